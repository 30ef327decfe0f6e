/**
 * Delivers a finished call to its callback URL: signed (signing.ts), only to an approved and
 * pinned address (targets.ts), retried with full-jitter exponential backoff.
 *
 * Retried: network errors, timeouts, 5xx, 408 and 429; the receiver may succeed later. Final:
 * other 4xx (the receiver rejected this message and will again) and 3xx (redirects are not
 * followed: the new location never went through the policy). The webhook-id stays the call id
 * on every attempt so receivers can deduplicate; the timestamp and signature are fresh per
 * attempt, or a receiver would reject a late retry as stale.
 */
import { Client } from 'undici';
import type { Logger } from '../../placer/kernel/index.ts';
import { fullJitterBackoff } from '../../placer/kernel/index.ts';
import { CallbackRefusedError } from './errors.ts';
import type { CallbackSenderOptions } from './options.ts';
import { resolveSenderOptions } from './options.ts';
import { signWebhook, WEBHOOK_HEADERS } from './signing.ts';
import { pinnedLookup } from './targets.ts';
import type { CallbackTarget } from './targets.ts';

/** One callback to deliver. */
export interface CallbackMessage {
  /** The webhook-id: the call id, the same on every attempt. */
  id: string;
  url: string;
  /** Sent as JSON. */
  payload: object;
  /** Stops the delivery (e.g. at shutdown): no further attempt or pause. */
  signal?: AbortSignal;
}

/** How a delivery ended. `attempts` is 0 when nothing was sent (refused URL, unserialisable payload). */
export interface DeliveryResult {
  delivered: boolean;
  attempts: number;
  /** Status the receiver gave the last attempt; absent when that attempt got no answer. */
  lastStatus?: number;
  /** Why the last attempt got no answer, why nothing was sent, or that the signal aborted. */
  lastError?: string;
}

/** Sends signed callbacks. */
export interface CallbackSender {
  /**
   * The policy's check: lets the gateway refuse a bad callback URL with 400 when the call
   * arrives, not after it ran. Delivery checks again, since DNS may have changed since.
   */
  check(url: string): Promise<CallbackTarget>;
  /** Delivers `message`; never rejects. */
  send(message: CallbackMessage): Promise<DeliveryResult>;
}

/**
 * How the gateway delivers a finished call to its callback URL: the part of a
 * {@link CallbackSender} that detached calls use.
 */
export interface CallbackDelivery {
  /** Resolves when `url` may be called back; rejects with a 4xx SluiceError saying why not. */
  check(url: string): Promise<unknown>;
  /** Delivers `payload`, retrying as it sees fit; never rejects. */
  send(delivery: { id: string; url: string; payload: object }): Promise<unknown>;
}

type Outcome = { kind: 'answer'; status: number; retryAfter: string | undefined } | { kind: 'error'; error: string };

/**
 * Creates a sender from its options, validated up front.
 * @throws {@link CallbackConfigError} or {@link CallbackSecretError} for a bad option.
 */
export function createCallbackSender(options: CallbackSenderOptions): CallbackSender {
  const config = resolveSenderOptions(options);
  const { secrets, policy, attempts: maxAttempts, backoffBase, backoffCap, timeout, clock, random, logger } = config;

  const backoff = (failures: number): number =>
    fullJitterBackoff(failures, { base: backoffBase, cap: backoffCap }, random);

  async function attempt(
    client: Client,
    target: CallbackTarget,
    id: string,
    body: string,
    signal?: AbortSignal,
  ): Promise<Outcome> {
    const timestamp = Math.floor(clock.now() / 1000);
    const timer = new AbortController();
    // One deadline for the whole exchange: undici's headersTimeout and bodyTimeout bound gaps,
    // so a receiver dripping a byte at a time would never trip them.
    const deadline = setTimeout(() => timer.abort(new Error(`no answer within ${timeout} ms`)), timeout);
    try {
      const response = await client.request({
        method: 'POST',
        path: target.url.pathname + target.url.search,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'sluice-callbacks',
          [WEBHOOK_HEADERS.id]: id,
          [WEBHOOK_HEADERS.timestamp]: String(timestamp),
          // One signature per secret: a receiver accepts the delivery when any of them is its own.
          [WEBHOOK_HEADERS.signature]: secrets.map((secret) => signWebhook({ id, timestamp, body, secret })).join(' '),
        },
        body,
        signal: signal ? AbortSignal.any([timer.signal, signal]) : timer.signal,
      });
      // The answer's body means nothing to us, but an unread body holds the socket.
      await response.body.dump().catch(() => {});
      const retryAfter = response.headers['retry-after'];
      return {
        kind: 'answer',
        status: response.statusCode,
        retryAfter: Array.isArray(retryAfter) ? retryAfter[0] : retryAfter,
      };
    } catch (error) {
      return { kind: 'error', error: describe(error) };
    } finally {
      clearTimeout(deadline);
    }
  }

  async function deliver({ id, url, payload, signal }: CallbackMessage): Promise<DeliveryResult> {
    const log = logger.child({ callId: id });
    if (typeof id !== 'string' || id === '') return notSent(log, 'callback id must be a non-empty string');
    let body: string | undefined;
    try {
      body = JSON.stringify(payload);
    } catch (error) {
      return notSent(log, `payload is not serialisable: ${describe(error)}`);
    }
    if (body === undefined) return notSent(log, 'payload is not serialisable');
    let target: CallbackTarget;
    try {
      target = await policy.check(url);
    } catch (error) {
      // The refusal message repeats the URL, query tokens and all: the log gets the reason only.
      const reason = error instanceof CallbackRefusedError ? `callback URL refused: ${error.reason}` : describe(error);
      return notSent(log, describe(error), reason);
    }
    // Query strings of webhook URLs often hold tokens; logs get the origin and path only.
    const where = { target: target.url.origin + target.url.pathname };
    const client = new Client(target.url.origin, {
      connect: { lookup: pinnedLookup(target), timeout },
      headersTimeout: timeout,
      bodyTimeout: timeout,
      pipelining: 1,
    });
    const result: DeliveryResult = { delivered: false, attempts: 0 };
    try {
      while (result.attempts < maxAttempts && !signal?.aborted) {
        result.attempts += 1;
        const outcome = await attempt(client, target, id, body, signal);
        let retryable: boolean;
        let pause: number | undefined;
        if (outcome.kind === 'answer') {
          result.lastStatus = outcome.status;
          delete result.lastError;
          if (outcome.status >= 200 && outcome.status < 300) {
            result.delivered = true;
            log.debug('callback delivered', { ...where, attempt: result.attempts, status: outcome.status });
            return result;
          }
          retryable = outcome.status >= 500 || outcome.status === 408 || outcome.status === 429;
          if (outcome.status === 429 || outcome.status === 503) pause = retryAfterMs(outcome.retryAfter, backoffCap);
        } else {
          delete result.lastStatus;
          result.lastError = outcome.error;
          retryable = !signal?.aborted;
        }
        const again = retryable && result.attempts < maxAttempts;
        if (again) pause ??= backoff(result.attempts);
        log.warn('callback attempt failed', {
          ...where,
          attempt: result.attempts,
          ...(outcome.kind === 'answer' ? { status: outcome.status } : { error: outcome.error }),
          ...(again ? { retryInMs: pause } : { final: true }),
        });
        if (!again) break;
        try {
          await clock.sleep(pause!, signal);
        } catch {
          break;
        }
      }
      if (signal?.aborted) result.lastError = `aborted: ${describe(signal.reason)}`;
      log.error('callback not delivered', {
        ...where,
        attempts: result.attempts,
        lastStatus: result.lastStatus,
        lastError: result.lastError,
      });
      return result;
    } finally {
      client.destroy().catch(() => {});
    }
  }

  return Object.freeze({
    check: (url: string) => policy.check(url),
    async send(message: CallbackMessage): Promise<DeliveryResult> {
      try {
        return await deliver(message);
      } catch (error) {
        // deliver catches what it expects; this is the promise that send never rejects.
        logger.error('callback failed unexpectedly', { callId: message?.id, error: describe(error) });
        return { delivered: false, attempts: 0, lastError: describe(error) };
      }
    },
  });
}

function notSent(log: Logger, lastError: string, logged = lastError): DeliveryResult {
  log.warn('callback not sent', { error: logged });
  return { delivered: false, attempts: 0, lastError };
}

/** Retry-After in whole seconds (the HTTP-date form is not honoured), bounded by the cap. */
function retryAfterMs(value: string | undefined, cap: number): number | undefined {
  if (value === undefined || !/^\s*\d+\s*$/.test(value)) return undefined;
  return Math.min(Number(value) * 1000, cap);
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
}
