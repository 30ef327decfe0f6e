/**
 * The runner's door for calls: a call must show it came from a gateway before it takes a slot.
 * The signature covers only what the head carries (call id, method, path, deadline and the body's
 * digest), so its MAC is verified, and its call id claimed against replays, before admission and
 * before a byte of the body is read: nothing unauthenticated holds a slot, and a gateway's call
 * to a full runner still gets its busy answer at once. Once the body is in, and before anything
 * reaches the engine, the body is checked against the signed digest. A refused call is answered
 * 401 RUNNER_UNAUTHORIZED and counted; nothing ran. Under mutual TLS without a call secret the
 * TLS handshake is the credential (runner/server.ts) and this door stands open.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../placer/kernel/index.ts';
import { RunnerUnauthorizedError } from './errors.ts';
import {
  BODY_DIGEST_HEADER,
  CALL_ID_HEADER,
  DEADLINE_HEADER,
  ERROR_TRAILER,
  SIGNATURE_HEADER,
  bodyDigest,
  isBodyDigest,
  readCallCredential,
  verifyCall,
} from './protocol/index.ts';
import type { CallRefusal } from './protocol/index.ts';
import { RUNNER_ID_HEADER } from './protocol/index.ts';
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

/** A runner's check of its calls' signatures. */
export class CallGuard {
  readonly #options: CallGuardOptions;
  readonly #now: () => number;
  readonly #seen: SeenCalls;
  /** The signed digest of each admitted call's body, to check once the body is in. */
  readonly #digests = new WeakMap<ServerResponse, string>();
  /** The call id each admitted signed call claimed, to forget if it ends without running. */
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
   * Before admission, from the head alone: false when the call shows no credential, one in
   * another format, one past its deadline, a MAC that does not verify, or a call id that is
   * running or ran here, and has been answered 401. True claims the call id.
   */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.enabled) return true;
    const callId = header(req, CALL_ID_HEADER);
    const credential = readCallCredential(
      header(req, SIGNATURE_HEADER),
      header(req, DEADLINE_HEADER),
      this.#now(),
      this.#options.skew,
    );
    if (credential.kind === 'refused') return this.#refuse(res, credential.reason, callId);
    const digest = header(req, BODY_DIGEST_HEADER);
    if (callId === undefined || callId === '' || digest === undefined) return this.#refuse(res, 'unsigned', callId);
    if (!isBodyDigest(digest)) return this.#refuse(res, 'malformed', callId);
    const verdict = verifyCall(this.#options.secrets, credential, {
      callId,
      method: req.method ?? 'POST',
      path: req.url ?? '/',
      bodyDigest: digest,
    });
    if (verdict.kind === 'refused') return this.#refuse(res, verdict.reason, callId);
    if (!this.#seen.claim(callId, credential.deadline + this.#options.skew))
      return this.#refuse(res, 'replayed', callId);
    this.#claimed.set(res, callId);
    this.#digests.set(res, digest);
    return true;
  }

  /**
   * Once the body is in, before the acknowledgement: false when it is not the body whose digest
   * the admitted call's signature covers, and the call has been answered 401.
   */
  verify(res: ServerResponse, body: Buffer): boolean {
    if (!this.enabled) return true;
    const digest = this.#digests.get(res);
    this.#digests.delete(res);
    if (digest !== undefined && bodyDigest(body) === digest) return true;
    // Nothing ran: the gateway's own call under this id may still come.
    const callId = this.#claimed.get(res);
    this.forget(res);
    return this.#refuse(res, digest === undefined ? 'unsigned' : 'altered-body', callId);
  }

  /** The call on `res` ended without running (busy, or its body never came whole): its gateway may offer it here again. */
  forget(res: ServerResponse): void {
    const id = this.#claimed.get(res);
    this.#claimed.delete(res);
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
      this.#options.log.warn('call refused: no valid signature', {
        ...fields,
        ...clock,
        refusedSinceLastWarning: this.#unwarned,
      });
      this.#warnedAt = now;
      this.#unwarned = 0;
    } else {
      this.#unwarned++;
      this.#options.log.debug('call refused: no valid signature', fields);
    }
    const error = new RunnerUnauthorizedError(REASONS[reason]);
    // The body of a refused call is not read (or not to its end): the connection cannot be reused. The code in
    // `sluice-error` lets a gateway tell its client what happened rather than relay a 401.
    res.writeHead(error.status, {
      'content-type': 'application/json',
      connection: 'close',
      [ERROR_TRAILER]: error.code,
      [RUNNER_ID_HEADER]: this.#options.runnerId,
    });
    res.end(errorJson(error));
    return false;
  }
}

/** The shortest time between two refusals logged at warn. */
const REFUSAL_WARN_INTERVAL_MS = 60_000;

/** What a refused caller is told; the same for every secret, so it says nothing about them. */
const REASONS: Record<CallRefusal | 'replayed', string> = {
  unsigned: 'this runner takes calls only from a gateway: the call carries no signature',
  malformed: "this runner takes calls only from a gateway: the call's signature or deadline is malformed",
  expired: "this runner takes calls only from a gateway: the call's deadline has passed",
  mismatch: "this runner takes calls only from a gateway: the call's signature does not match",
  'altered-body':
    "this runner takes calls only from a gateway: the call's body does not match the digest its signature covers",
  replayed: 'this runner takes calls only from a gateway: this call id has already run here',
};

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
