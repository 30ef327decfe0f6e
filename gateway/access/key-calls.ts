/**
 * A client key's limits on the call path, so the agent makes a few calls and holds one object:
 * {@link KeyCalls.open} before the body is read (requests per minute and concurrent calls), then
 * on the {@link KeyCall} it answers: `tokens` once the body is parsed (the call's worst case
 * reserved), `storedRoom` for a detached call (room for its result reserved), `watch` on the
 * engine's answer to read its usage, `stored` once a detached result is kept, and `close` at the
 * end, which settles the tokens, gives back a room for a result that was never stored and the
 * concurrent call.
 *
 * A limiter that fails (Redis not answering) admits the call and logs it, once per outage, as
 * Envoy's global rate limit does by default: the limits protect the fleet's share, and an outage
 * of the counters should not take every key's calls down with it.
 */
import type { Readable } from 'node:stream';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { RateLimitedError } from '../errors.ts';
import type { ClientKey } from './keys.ts';
import { estimateTokens, newLease, rateLimitHeaders, retryAfterSeconds } from './limits.ts';
import { tokenBudget } from './token-budget.ts';
import type { TokenBudget } from './token-budget.ts';
import type { CallRoute } from '../http/index.ts';
import type { Admission, Limiter, StoredAdmission, WindowState } from './limits.ts';

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/** The bytes of an answer's end searched for its usage block: engines put it last. */
const USAGE_TAIL_BYTES = 4096;

/** Options of {@link KeyCalls}. */
export interface KeyCallsOptions {
  limiter: Limiter;
  /** @default silentLogger */
  logger?: Logger;
}

/** Opens a {@link KeyCall} per call of a key; one per gateway. */
export class KeyCalls {
  readonly #limiter: Limiter;
  readonly #logger: Logger;
  #failing = false;

  constructor(options: KeyCallsOptions) {
    this.#limiter = options.limiter;
    this.#logger = options.logger ?? silentLogger;
  }

  /** The limiter, for closing with the gateway. */
  get limiter(): Limiter {
    return this.#limiter;
  }

  /**
   * Counts one call of `key` against its requests per minute and holds one of its concurrent
   * calls; a refusal counts nothing. Never rejects.
   */
  async open(key: ClientKey): Promise<KeyCall | RateLimitedError> {
    const { limits } = key;
    if (
      limits.requestsPerMinute === undefined &&
      limits.concurrentCalls === undefined &&
      limits.tokensPerMinute === undefined &&
      limits.storedBytes === undefined
    ) {
      return new KeyCall(this, key, undefined, undefined);
    }
    const lease = newLease();
    const admission = await this.step(() => this.#limiter.admitCall(key.id, limits, lease));
    if (admission.kind === 'refused')
      return refusal(key, admission, { requests: admission.window, tokens: await this.tokensNow(key) });
    return new KeyCall(this, key, limits.concurrentCalls === undefined ? undefined : lease, admission.window);
  }

  /**
   * Where the key's tokens window stands, counting nothing (a step of no tokens), so a call
   * refused before its tokens are known still carries the tokens' x-ratelimit headers.
   */
  async tokensNow(key: ClientKey): Promise<WindowState | undefined> {
    if (key.limits.tokensPerMinute === undefined) return undefined;
    return (await this.step(() => this.#limiter.admitTokens(key.id, key.limits, 0))).window;
  }

  /** Runs a limiter step; a failure admits, and is logged once until a step succeeds again. */
  async step<A extends Admission | StoredAdmission>(run: () => Promise<A>): Promise<A | Admission> {
    try {
      const admission = await run();
      this.#recovered();
      return admission;
    } catch (error) {
      this.#failed(error);
      return { kind: 'admitted' };
    }
  }

  /** Runs a limiter write whose failure only loses a count. */
  quietly(run: () => Promise<void>): void {
    run().then(
      () => this.#recovered(),
      (error: unknown) => this.#failed(error),
    );
  }

  #failed(error: unknown): void {
    if (!this.#failing)
      this.#logger.warn('key limits not answering; calls admitted without them', { error: error as Error });
    this.#failing = true;
  }

  #recovered(): void {
    if (this.#failing) this.#logger.info('key limits answering again', {});
    this.#failing = false;
  }
}

/** One call of one key: what it was counted at, and what it holds until {@link close}. */
export class KeyCall {
  readonly key: ClientKey;
  readonly #calls: KeyCalls;
  #lease: string | undefined;
  #requests: WindowState | undefined;
  #tokens: WindowState | undefined;
  #estimate = 0;
  /** The room reserved for a detached call's result, until its result is stored or the call ends. */
  #room: { callId: string; reserved: number } | undefined;
  #tail: Buffer | undefined;
  #previous: Buffer | undefined;
  #last: Buffer | undefined;
  #closed = false;

  constructor(calls: KeyCalls, key: ClientKey, lease: string | undefined, requests: WindowState | undefined) {
    this.#calls = calls;
    this.key = key;
    this.#lease = lease;
    this.#requests = requests;
  }

  /** The `x-ratelimit-*` headers for the windows this call was checked against. */
  get headers(): Record<string, string> {
    return rateLimitHeaders({ requests: this.#requests, tokens: this.#tokens });
  }

  /** The `x-ratelimit-*-tokens` headers alone, once {@link tokens} counted the call; none before. */
  get tokenHeaders(): Record<string, string> {
    return this.#tokens === undefined ? NO_HEADERS : rateLimitHeaders({ tokens: this.#tokens });
  }

  /**
   * The `x-ratelimit-*-tokens` headers for a refusal: where the key's tokens window stands,
   * read without counting when this call's tokens were not counted yet (its body was bad, or
   * named a model the key may not call). Never rejects.
   */
  async refusalTokenHeaders(): Promise<Record<string, string>> {
    if (this.#tokens === undefined && this.key.limits.tokensPerMinute !== undefined)
      this.#tokens = await this.#calls.tokensNow(this.key);
    return this.tokenHeaders;
  }

  /**
   * The call's worst case in tokens and the body to send for it (token-budget.ts), when the key
   * has tokensPerMinute; undefined otherwise (the body goes as it came).
   */
  budget(route: CallRoute, body: Buffer): TokenBudget | undefined {
    const { tokensPerMinute, defaultMaxTokens } = this.key.limits;
    return tokensPerMinute === undefined ? undefined : tokenBudget(route, body, tokensPerMinute, defaultMaxTokens);
  }

  /**
   * Reserves the call's worst case against tokens per minute: its prompt estimated at a quarter
   * of `promptBytes`, plus `outputTokens`, the most it may produce (token-budget.ts). The
   * engine's usage settles it at {@link close}. Never rejects; a refusal counts nothing.
   */
  async tokens(promptBytes: number, outputTokens = 0): Promise<RateLimitedError | undefined> {
    const { key } = this;
    if (key.limits.tokensPerMinute === undefined) return undefined;
    const estimate = estimateTokens(promptBytes) + outputTokens;
    const admission = await this.#calls.step(() => this.#calls.limiter.admitTokens(key.id, key.limits, estimate));
    this.#tokens = admission.window ?? this.#tokens;
    if (admission.kind === 'refused')
      return refusal(key, admission, { requests: this.#requests, tokens: admission.window });
    // A failing limiter admitted without counting: nothing to settle later.
    if (admission.window) this.#estimate = Math.min(estimate, key.limits.tokensPerMinute);
    return undefined;
  }

  /**
   * Reserves room for detached call `callId`'s result among the key's storedBytes: `cap` bytes
   * (the largest result with its record) or what remains below the limit, until `until` (the
   * call's lifetime end). Refuses while the key's results and reservations fill its storedBytes.
   * Never rejects.
   */
  async storedRoom(callId: string, cap: number, until: number): Promise<RateLimitedError | undefined> {
    const { key } = this;
    if (key.limits.storedBytes === undefined) return undefined;
    const admission = await this.#calls.step(() =>
      this.#calls.limiter.reserveStored(key.id, key.limits, { callId, cap, until }),
    );
    if (admission.kind === 'refused') return refusal(key, admission, {});
    this.#room = { callId, reserved: 'reserved' in admission ? admission.reserved : 0 };
    return undefined;
  }

  /** Counts a detached call's stored result against the key until it expires, in place of its reservation. */
  stored(callId: string, bytes: number, expiresAt: number): void {
    if (this.key.limits.storedBytes === undefined) return;
    const reserved = this.#room?.callId === callId ? this.#room.reserved : 0;
    this.#room = undefined;
    this.#calls.quietly(() => this.#calls.limiter.settleStored(this.key.id, callId, reserved, bytes, expiresAt));
  }

  /**
   * Keeps the end of the engine's answer, to settle the tokens from its usage block; only when
   * tokens were counted. Call it before the body flows (beside the relay's own listener).
   */
  watch(body: Readable): void {
    if (this.#estimate === 0) return;
    // The last two chunks, by reference: no copy per chunk of a long stream. An engine writes its
    // usage in one event, so two chunks hold it whole unless the chunk before it was tiny.
    body.on('data', (chunk: Buffer) => {
      this.#previous = this.#last;
      this.#last = chunk;
    });
  }

  /** Takes a whole answer read elsewhere (a detached call's stored result), to settle from its usage. */
  answered(body: Buffer): void {
    if (this.#estimate === 0) return;
    this.#tail = body.length > USAGE_TAIL_BYTES ? body.subarray(body.length - USAGE_TAIL_BYTES) : body;
  }

  /**
   * Settles the tokens from the usage the engine reported (what was estimated stands when it
   * reported none) and gives the concurrent call back. Idempotent; never throws.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const { id } = this.key;
    const limiter = this.#calls.limiter;
    const tail = this.#tail ?? joinTail(this.#previous, this.#last);
    const used = tail
      ? usageTokens(tail.length > USAGE_TAIL_BYTES ? tail.subarray(tail.length - USAGE_TAIL_BYTES) : tail)
      : undefined;
    if (this.#estimate > 0 && used !== undefined) {
      const estimated = this.#estimate;
      this.#calls.quietly(() => limiter.settle(id, used, estimated));
    }
    const room = this.#room;
    this.#room = undefined;
    // A detached call that stored no result (refused after its reservation, unplaced, failed).
    if (room) this.#calls.quietly(() => limiter.releaseStored(id, room.callId, room.reserved));
    const lease = this.#lease;
    this.#lease = undefined;
    if (lease !== undefined) this.#calls.quietly(() => limiter.release(id, lease));
  }
}

/**
 * The tokens an answer's end reports, from its last `"usage"` block: total_tokens, or prompt
 * plus completion tokens; undefined when there is none (an engine that reports no usage, a
 * stream without `stream_options.include_usage`).
 */
export function usageTokens(tail: Buffer | string): number | undefined {
  const at = tail.lastIndexOf('"usage"');
  if (at < 0) return undefined;
  // Room for the counts and a details object or two; the counts come first in every engine seen.
  const block = typeof tail === 'string' ? tail.slice(at, at + 600) : tail.toString('latin1', at, at + 600);
  const total = countOf(TOTAL_TOKENS, block);
  if (total !== undefined) return total;
  const prompt = countOf(PROMPT_TOKENS, block);
  const completion = countOf(COMPLETION_TOKENS, block);
  return prompt === undefined && completion === undefined ? undefined : (prompt ?? 0) + (completion ?? 0);
}

/** The last USAGE_TAIL_BYTES of two chunks, copying at most that many bytes. */
function joinTail(previous: Buffer | undefined, last: Buffer | undefined): Buffer | undefined {
  if (!last || !previous || last.length >= USAGE_TAIL_BYTES) return last;
  return Buffer.concat([previous.subarray(Math.max(0, previous.length - (USAGE_TAIL_BYTES - last.length))), last]);
}

const TOTAL_TOKENS = /"total_tokens"\s*:\s*(\d+)/;
const PROMPT_TOKENS = /"prompt_tokens"\s*:\s*(\d+)/;
const COMPLETION_TOKENS = /"completion_tokens"\s*:\s*(\d+)/;

function countOf(field: RegExp, block: string): number | undefined {
  const match = field.exec(block);
  return match ? Number(match[1]) : undefined;
}

function refusal(
  key: ClientKey,
  admission: Extract<Admission, { kind: 'refused' }>,
  windows: { requests?: WindowState | undefined; tokens?: WindowState | undefined },
): RateLimitedError {
  const seconds = retryAfterSeconds(admission.retryAfterMs);
  const { limits } = key;
  const what = {
    requests: `its requestsPerMinute (${limits.requestsPerMinute})`,
    tokens: `its tokensPerMinute (${limits.tokensPerMinute}); a call is counted at its worst case (a quarter of its prompt's bytes plus max_tokens × n) until the engine reports its usage`,
    concurrent: `its concurrentCalls (${limits.concurrentCalls}): that many of its calls are running`,
    'stored-bytes': `its storedBytes (${limits.storedBytes}) of detached results kept; they free as results expire`,
  }[admission.limit];
  return new RateLimitedError(`client key ${JSON.stringify(key.name)} is at ${what}; retry in ${seconds} s`, {
    'retry-after': String(seconds),
    ...rateLimitHeaders(windows),
  });
}
