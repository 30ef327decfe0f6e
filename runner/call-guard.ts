/**
 * The runner's door for calls: a call must show it came from a gateway before it takes a slot
 * (its signature's headers and deadline, read before admission) and before anything reaches the
 * engine (its MAC, checked once the body it covers is in). A refused call is answered 401
 * RUNNER_UNAUTHORIZED and counted; nothing ran. Under mutual TLS without a call secret the TLS
 * handshake is the credential (runner/server.ts) and this door stands open.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../placer/kernel/index.ts';
import { RunnerUnauthorizedError } from './errors.ts';
import { CALL_ID_HEADER, DEADLINE_HEADER, ERROR_TRAILER, SIGNATURE_HEADER, bodyDigest, readCallCredential, verifyCall } from './protocol.ts';
import type { CallRefusal } from './protocol.ts';
import { RUNNER_ID_HEADER } from './protocol.ts';
import { errorJson } from './reply.ts';
import { SeenCalls } from './seen-calls.ts';

/** How the door is set up. */
export interface CallGuardOptions {
  /** The call secrets; the door checks nothing when empty. */
  secrets: readonly string[];
  /** How far past its deadline a call is still taken, ms. */
  skew: number;
  /** Named in the refusal's `sluice-runner-id`, as on every other answer of the runner's own. */
  runnerId: string;
  /** Wall-clock ms since the epoch: deadlines are on the gateway's wall clock. */
  now?: () => number;
  log: Logger;
  /** Told of every refusal (the /status counter). */
  refused(reason: CallRefusal | 'replayed'): void;
}

/** What the door learned of a call before admission, kept until its body is in. */
interface Pending {
  callId: string;
  mac: Buffer;
  deadline: number;
}

/** A runner's check of its calls' signatures. */
export class CallGuard {
  readonly #options: CallGuardOptions;
  readonly #now: () => number;
  readonly #seen: SeenCalls;
  readonly #pending = new WeakMap<ServerResponse, Pending>();
  /** The call id each running signed call claimed, to forget if it ends busy. */
  readonly #claimed = new WeakMap<ServerResponse, string>();
  /** When a refusal was last logged at warn, and how many came since. */
  #warnedAt = -Infinity;
  #unwarned = 0;

  constructor(options: CallGuardOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#seen = new SeenCalls(this.#now);
  }

  /** True when calls must be signed. */
  get enabled(): boolean {
    return this.#options.secrets.length > 0;
  }

  /**
   * Before admission: false when the call shows no credential in the wire's format, or one past
   * its deadline, and has been answered 401.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.enabled) return true;
    const callId = header(req, CALL_ID_HEADER);
    const credential = readCallCredential(header(req, SIGNATURE_HEADER), header(req, DEADLINE_HEADER), this.#now(), this.#options.skew);
    if (credential.kind === 'refused') return this.#refuse(res, credential.reason, callId);
    if (callId === undefined || callId === '') return this.#refuse(res, 'unsigned', callId);
    this.#pending.set(res, { callId, mac: credential.mac, deadline: credential.deadline });
    return true;
  }

  /**
   * Once the body is in, before the acknowledgement: false when the MAC does not match the call
   * as received, or the call id already ran, and the call has been answered 401.
   */
  verify(req: IncomingMessage, res: ServerResponse, body: Buffer): boolean {
    if (!this.enabled) return true;
    const pending = this.#pending.get(res);
    this.#pending.delete(res);
    if (pending === undefined) return this.#refuse(res, 'unsigned', undefined);
    const verdict = verifyCall(this.#options.secrets, pending, {
      callId: pending.callId,
      method: req.method ?? 'POST',
      path: req.url ?? '/',
      bodyDigest: bodyDigest(body),
    });
    if (verdict.kind === 'refused') return this.#refuse(res, verdict.reason, pending.callId);
    if (!this.#seen.claim(pending.callId, pending.deadline + this.#options.skew)) return this.#refuse(res, 'replayed', pending.callId);
    this.#claimed.set(res, pending.callId);
    return true;
  }

  /** The call on `res` ended busy, so nothing ran: its gateway may offer it here again. */
  forget(res: ServerResponse): void {
    const id = this.#claimed.get(res);
    if (id !== undefined) this.#seen.release(id);
  }

  #refuse(res: ServerResponse, reason: CallRefusal | 'replayed', callId: string | undefined): false {
    this.#options.refused(reason);
    // At warn once a minute at most, with how many were refused since, and at debug otherwise:
    // whoever sends unsigned calls must not write the log, but a gateway with the wrong secret,
    // or a runner whose clock is off (every call `expired`), must show.
    const now = this.#now();
    const fields = { call: callId, reason, remote: res.socket?.remoteAddress };
    if (now - this.#warnedAt >= REFUSAL_WARN_INTERVAL_MS) {
      const clock = reason === 'expired' ? { runnerClock: Math.round(now) } : {};
      this.#options.log.warn('call refused: no valid signature', { ...fields, ...clock, refusedSinceLastWarning: this.#unwarned });
      this.#warnedAt = now;
      this.#unwarned = 0;
    } else {
      this.#unwarned++;
      this.#options.log.debug('call refused: no valid signature', fields);
    }
    const error = new RunnerUnauthorizedError(REASONS[reason]);
    // The body of a refused call is never read: the connection cannot be reused. The code in
    // `sluice-error` lets a gateway tell its client what happened rather than relay a 401.
    res.writeHead(error.status, { 'content-type': 'application/json', connection: 'close', [ERROR_TRAILER]: error.code, [RUNNER_ID_HEADER]: this.#options.runnerId });
    res.end(errorJson(error));
    return false;
  }
}

/** The shortest time between two refusals logged at warn. */
const REFUSAL_WARN_INTERVAL_MS = 60_000;

/** What a refused caller is told; the same for every secret, so it says nothing about them. */
const REASONS: Record<CallRefusal | 'replayed', string> = {
  unsigned: 'this runner takes calls only from a gateway: the call carries no signature',
  malformed: 'this runner takes calls only from a gateway: the call\'s signature or deadline is malformed',
  expired: 'this runner takes calls only from a gateway: the call\'s deadline has passed',
  mismatch: 'this runner takes calls only from a gateway: the call\'s signature does not match',
  replayed: 'this runner takes calls only from a gateway: this call id has already run here',
};

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
