/**
 * Limits per client key: requests per minute, tokens per minute, concurrent calls and stored
 * detached-result bytes, behind one {@link Limiter} contract with two backends: in memory (one
 * gateway, this file) and Redis (gateways sharing the counters, limits-redis.ts).
 *
 * The two per-minute limits use one sliding-window algorithm, the two-bucket approximation: a
 * count for the current fixed window and one for the window before it, the earlier one weighted
 * by how much of it still lies inside the sliding window that ends now. It keeps five numbers per
 * key and limit, whatever the traffic (the window, the two counts, and the time of each count's
 * last hit), and is exact when traffic is even across the window; its error is bounded by the
 * previous window's count times the unevenness. Once a whole window has passed since the
 * previous window's last hit, none of its hits is inside the sliding window, and it counts for
 * nothing: so a key is told to retry, and admitted, within a window of its last counted call,
 * never later (a 3-a-minute key whose calls came together waits a minute, not 67 s). Both
 * backends compute it with the same expression ({@link windowEstimate}), the Redis one inside a
 * Lua script.
 *
 * Tokens are counted in two steps: a reservation at admission of the call's worst case (its
 * prompt estimated by {@link estimateTokens}, bytes/4 since no tokenizer runs in the gateway,
 * plus the most output it may produce: gateway/access/token-budget.ts), then
 * {@link Limiter.settle} with the usage the engine reported, which corrects the current window
 * by the difference.
 *
 * Stored bytes are counted the same way: a detached call reserves room for its result at
 * admission ({@link Limiter.reserveStored}), and its end replaces the reservation by the
 * result's real size ({@link Limiter.settleStored}) or gives it back
 * ({@link Limiter.releaseStored}). A reservation lapses on its own at the call's lifetime end,
 * so one a gateway never settled (it died) frees in time.
 */
import { randomBytes } from 'node:crypto';
import { checksFor, show, systemClock } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import type { KeyLimits } from './scopes.ts';

/** A key's limits (scopes.ts): each a positive integer, and an absent one is not enforced. */
export type { KeyLimits };

/** The names of {@link KeyLimits}, in the order a keys file lists them in messages. */
export const LIMIT_FIELDS = Object.freeze([
  'requestsPerMinute',
  'tokensPerMinute',
  'concurrentCalls',
  'storedBytes',
  'defaultMaxTokens',
] as const);

/** Which limit refused a call. */
export type LimitName = 'requests' | 'tokens' | 'concurrent' | 'stored-bytes';

/** Where a key stands against one per-minute limit: what OpenAI's `x-ratelimit-*` headers say. */
export interface WindowState {
  readonly limit: number;
  /** What may still be spent now, rounded down. */
  readonly remaining: number;
  /** Until the window holds nothing of this key's, in ms. */
  readonly resetMs: number;
}

/** A limiter's answer. `window` is the per-minute limit the step checked, when the key has one. */
export type Admission =
  | { readonly kind: 'admitted'; readonly window?: WindowState }
  | {
      readonly kind: 'refused';
      readonly limit: LimitName;
      readonly retryAfterMs: number;
      readonly window?: WindowState;
    };

/** What {@link Limiter.reserveStored} reserves for: a detached call, its result's largest size, and until when. */
export interface StoredReservation {
  readonly callId: string;
  /** The most bytes to reserve: the largest result with its record. */
  readonly cap: number;
  /** Ms since the epoch: the call's lifetime end, after which an unsettled reservation lapses. */
  readonly until: number;
}

/** {@link Limiter.reserveStored}'s answer: on admission, the bytes reserved for the call's result. */
export type StoredAdmission =
  | { readonly kind: 'admitted'; readonly reserved: number }
  | Extract<Admission, { kind: 'refused' }>;

/**
 * The counters of every key. Each step is atomic in its backend: two gateways sharing Redis never
 * both take the last request of a window.
 */
export interface Limiter {
  /**
   * Admits one call against requestsPerMinute and concurrentCalls, before its body is read: on
   * admission the request is counted and `lease` holds one of the key's concurrent calls until
   * {@link release}; on refusal nothing is counted.
   */
  admitCall(keyId: string, limits: KeyLimits, lease: string): Promise<Admission>;
  /** Counts `estimate` tokens against tokensPerMinute (a call larger than the limit counts as the limit). */
  admitTokens(keyId: string, limits: KeyLimits, estimate: number): Promise<Admission>;
  /** Corrects the key's token count by what the call used (`actual`) against what it was counted at (`estimated`). */
  settle(keyId: string, actual: number, estimated: number): Promise<void>;
  /** Gives back the concurrent call held by `lease`; releasing twice is harmless. */
  release(keyId: string, lease: string): Promise<void>;
  /**
   * Reserves room for the result of detached call `callId` against storedBytes, atomically with
   * the check: while the key's stored results and reservations hold less than its storedBytes,
   * reserves `cap` bytes or what remains below the limit, whichever is less, until `until` (ms
   * since the epoch: the call's lifetime end, after which an unsettled reservation lapses). A
   * refusal reserves nothing. A key without storedBytes is admitted with nothing reserved.
   */
  reserveStored(keyId: string, limits: KeyLimits, reservation: StoredReservation): Promise<StoredAdmission>;
  /**
   * Replaces the reservation of `callId` (`reserved` bytes, 0 for none) by its stored result:
   * `bytes` counted against the key until `expiresAt` (ms since the epoch).
   */
  settleStored(keyId: string, callId: string, reserved: number, bytes: number, expiresAt: number): Promise<void>;
  /** Gives back the reservation of `callId` (`reserved` bytes) of a call that stored no result; twice is harmless. */
  releaseStored(keyId: string, callId: string, reserved: number): Promise<void>;
  /** Closes connections; idempotent. */
  close(): Promise<void>;
}

/** Options both backends take. */
export interface LimiterOptions {
  /** Time for the windows and stored-result expiry. @default systemClock */
  clock?: Pick<Clock, 'now'>;
  /** Length of the sliding window in ms: a minute, shorter only for tests and demonstrations. @default 60000 */
  windowMs?: number;
  /**
   * How long a refused call is told to wait when the window cannot say (a concurrent-calls or
   * stored-bytes refusal), in ms. @default 1000
   */
  retryAfterMs?: number;
}

/** The defaults, frozen. */
export const limiterDefaults = Object.freeze({ windowMs: 60_000, retryAfterMs: 1_000 });

/** {@link LimiterOptions} with defaults applied. */
export interface LimiterConfig {
  readonly clock: Pick<Clock, 'now'>;
  readonly windowMs: number;
  readonly retryAfterMs: number;
}

const check = checksFor(GatewayConfigError);

/**
 * Fills in a limiter's defaults and checks each option.
 * @throws GatewayConfigError naming the option and the bad value.
 */
export function resolveLimiterOptions(options: LimiterOptions): LimiterConfig {
  const {
    clock = systemClock,
    windowMs = limiterDefaults.windowMs,
    retryAfterMs = limiterDefaults.retryAfterMs,
  } = options;
  if (typeof clock?.now !== 'function') throw check.fail(`clock must have a now() method, got ${show(clock)}`);
  return Object.freeze({
    clock,
    windowMs: check.ms('windowMs', windowMs, 1),
    retryAfterMs: check.ms('retryAfterMs', retryAfterMs, 0),
  });
}

/**
 * A bucket's counts: `current` in fixed window `bucket` (now / windowMs), `previous` in the one
 * before, and the time (whole ms) of each one's last hit, which means something only while its
 * count is above 0.
 */
export interface WindowCounts {
  bucket: number;
  current: number;
  previous: number;
  currentLast: number;
  previousLast: number;
}

/** The counts {@link decideWindow} reads. */
export type WindowTally = Pick<WindowCounts, 'current' | 'previous' | 'currentLast' | 'previousLast'>;

/** What one window check decided, from the counts before it. */
export interface WindowDecision {
  admitted: boolean;
  state: WindowState;
  /** Until `cost` would fit, in ms; 0 when admitted. */
  retryAfterMs: number;
}

/**
 * The sliding count at `now` (whole ms): the previous window's count weighted by the share of it
 * still inside the sliding window, or nothing once its last hit is a window old, plus the current
 * one's. limits-redis.ts's Lua computes the same expression in the same order, so both backends
 * decide alike.
 */
export function windowEstimate(now: number, windowMs: number, tally: WindowTally): number {
  if (now >= tally.previousLast + windowMs) return tally.current;
  const elapsed = now - Math.floor(now / windowMs) * windowMs;
  return (tally.previous * (windowMs - elapsed)) / windowMs + tally.current;
}

/**
 * The one window decision both backends share: may `cost` more be spent at `now` against
 * `limit`, given the counts of the current and previous fixed windows (before this cost), and
 * where the key stands after it. `cost` is at most `limit` (the limiter clamps it).
 */
export function decideWindow(
  now: number,
  windowMs: number,
  limit: number,
  cost: number,
  tally: WindowTally,
): WindowDecision {
  const { current, previous } = tally;
  const t = Math.floor(now);
  const start = Math.floor(t / windowMs) * windowMs;
  const elapsed = t - start;
  const estimate = windowEstimate(t, windowMs, tally);
  const admitted = estimate + cost <= limit;
  const after = admitted ? { estimate: estimate + cost, current: current + cost } : { estimate, current };
  // Nothing of the key's is left in the sliding window a window after its last counted hit.
  const last = admitted && cost > 0 ? t : tally.currentLast;
  const previousCounts = previous > 0 && t < tally.previousLast + windowMs;
  const resetMs = after.current > 0 ? last + windowMs - t : previousCounts ? tally.previousLast + windowMs - t : 0;
  const state: WindowState = { limit, remaining: Math.max(0, Math.floor(limit - after.estimate)), resetMs };
  if (admitted) return { admitted, state, retryAfterMs: 0 };
  // The estimate falls as the previous window's weight does, linearly, and to nothing a window
  // after that window's last hit: cost fits at the first of the two.
  let wait: number;
  if (current + cost <= limit) {
    wait = Math.min(windowMs * (1 - (limit - current - cost) / previous) - elapsed, tally.previousLast + windowMs - t);
  } else {
    // Only once this window is the previous one, and enough of it has slid out.
    const slid = windowMs - elapsed + windowMs * (1 - (limit - cost) / current);
    wait = Math.min(slid, tally.currentLast + windowMs - t);
  }
  return { admitted, state, retryAfterMs: Math.max(1, Math.ceil(wait)) };
}

/** The counts as they stand in `bucket`: rolled forward one window, or emptied after two. */
export function rollWindow(counts: WindowCounts | undefined, bucket: number): WindowCounts {
  if (counts?.bucket === bucket) return counts;
  if (counts?.bucket === bucket - 1)
    return { bucket, current: 0, previous: counts.current, currentLast: 0, previousLast: counts.currentLast };
  return { bucket, current: 0, previous: 0, currentLast: 0, previousLast: 0 };
}

/**
 * Tokens a call is counted at before the engine reports its usage: a quarter of the prompt's
 * UTF-8 bytes, rounded up, at least 1. About right for English text with OpenAI-style
 * tokenizers; the settle corrects it either way.
 */
export function estimateTokens(promptBytes: number): number {
  return Math.max(1, Math.ceil(promptBytes / 4));
}

/** Milliseconds as OpenAI writes its resets: `20ms`, `1s`, `6m0s`, `1m30.5s`. */
export function formatReset(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  if (whole < 1000) return `${whole}ms`;
  const minutes = Math.floor(whole / 60_000);
  const seconds = (whole - minutes * 60_000) / 1000;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

/** The `x-ratelimit-*` headers OpenAI clients read, for the windows a call was checked against. */
export function rateLimitHeaders(windows: {
  requests?: WindowState | undefined;
  tokens?: WindowState | undefined;
}): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, state] of [
    ['requests', windows.requests],
    ['tokens', windows.tokens],
  ] as const) {
    if (!state) continue;
    headers[`x-ratelimit-limit-${name}`] = String(state.limit);
    headers[`x-ratelimit-remaining-${name}`] = String(state.remaining);
    headers[`x-ratelimit-reset-${name}`] = formatReset(state.resetMs);
  }
  return headers;
}

/** Retry-After in whole seconds, at least 1, for a refusal. */
export function retryAfterSeconds(retryAfterMs: number): number {
  return Math.max(1, Math.ceil(retryAfterMs / 1000));
}

/** This process's lease prefix: random, so leases of gateways sharing Redis never collide. */
const LEASE_PREFIX = randomBytes(6).toString('base64url');
let leases = 0;

/**
 * A lease id for {@link Limiter.admitCall}, unique across gateways: a random prefix per process
 * and a counter, since a call's random bytes would cost more than the rest of its key check.
 */
export function newLease(): string {
  return `${LEASE_PREFIX}.${(leases++).toString(36)}`;
}

/** One key's counters in memory. */
interface KeyState {
  requests: WindowCounts | undefined;
  tokens: WindowCounts | undefined;
  leases: Set<string>;
  /** Stored results: bytes and expiry, in the order they were added. */
  stored: { bytes: number; expiresAt: number }[];
  storedBytes: number;
  /** Rooms reserved for results of calls still running, by call id: as many as the key's detached calls in flight. */
  reserved: Map<string, { bytes: number; until: number }>;
  reservedBytes: number;
}

/**
 * The in-memory limiter, for one gateway. State is kept per key id for the life of the process:
 * bounded by the number of keys, since a key is a credential the operator made.
 */
export function createMemoryLimiter(options: LimiterOptions = {}): Limiter {
  return new MemoryLimiter(options);
}

class MemoryLimiter implements Limiter {
  readonly #clock: Pick<Clock, 'now'>;
  readonly #windowMs: number;
  readonly #retryAfterMs: number;
  readonly #keys = new Map<string, KeyState>();

  constructor(options: LimiterOptions) {
    ({
      clock: this.#clock,
      windowMs: this.#windowMs,
      retryAfterMs: this.#retryAfterMs,
    } = resolveLimiterOptions(options));
  }

  admitCall(keyId: string, limits: KeyLimits, lease: string): Promise<Admission> {
    const state = this.#state(keyId);
    const { requestsPerMinute, concurrentCalls } = limits;
    if (concurrentCalls !== undefined && state.leases.size >= concurrentCalls && !state.leases.has(lease)) {
      // Where the requests window stands, uncounted, for the refusal's x-ratelimit headers.
      const window = requestsPerMinute === undefined ? undefined : this.#peek(state, 'requests', requestsPerMinute);
      return Promise.resolve({
        kind: 'refused',
        limit: 'concurrent',
        retryAfterMs: this.#retryAfterMs,
        ...(window ? { window } : {}),
      });
    }
    let window: WindowState | undefined;
    if (requestsPerMinute !== undefined) {
      const decision = this.#spend(state, 'requests', requestsPerMinute, 1);
      if (!decision.admitted)
        return Promise.resolve({
          kind: 'refused',
          limit: 'requests',
          retryAfterMs: decision.retryAfterMs,
          window: decision.state,
        });
      window = decision.state;
    }
    if (concurrentCalls !== undefined) state.leases.add(lease);
    return Promise.resolve(window ? { kind: 'admitted', window } : ADMITTED);
  }

  admitTokens(keyId: string, limits: KeyLimits, estimate: number): Promise<Admission> {
    const limit = limits.tokensPerMinute;
    if (limit === undefined) return Promise.resolve(ADMITTED);
    const decision = this.#spend(this.#state(keyId), 'tokens', limit, Math.min(estimate, limit));
    return Promise.resolve(
      decision.admitted
        ? { kind: 'admitted', window: decision.state }
        : { kind: 'refused', limit: 'tokens', retryAfterMs: decision.retryAfterMs, window: decision.state },
    );
  }

  settle(keyId: string, actual: number, estimated: number): Promise<void> {
    const state = this.#keys.get(keyId);
    if (state && actual !== estimated) {
      const counts = rollWindow(state.tokens, this.#bucket());
      const current = Math.max(0, counts.current + actual - estimated);
      // Tokens counted late are a hit now: the window holds them a whole window from here.
      const currentLast = actual > estimated ? Math.floor(this.#clock.now()) : counts.currentLast;
      state.tokens = { ...counts, current, currentLast };
    }
    return DONE;
  }

  release(keyId: string, lease: string): Promise<void> {
    this.#keys.get(keyId)?.leases.delete(lease);
    return DONE;
  }

  reserveStored(keyId: string, limits: KeyLimits, { callId, cap, until }: StoredReservation): Promise<StoredAdmission> {
    const limit = limits.storedBytes;
    if (limit === undefined) return Promise.resolve(NOTHING_RESERVED);
    const state = this.#state(keyId);
    this.#prune(state);
    const held = state.storedBytes + state.reservedBytes;
    if (held >= limit) {
      const now = this.#clock.now();
      const next = state.stored[0]?.expiresAt ?? now;
      return Promise.resolve({
        kind: 'refused',
        limit: 'stored-bytes',
        retryAfterMs: Math.max(this.#retryAfterMs, next - now),
      });
    }
    const reserved = Math.min(cap, limit - held);
    const earlier = state.reserved.get(callId);
    if (earlier) state.reservedBytes -= earlier.bytes;
    state.reserved.set(callId, { bytes: reserved, until });
    state.reservedBytes += reserved;
    return Promise.resolve({ kind: 'admitted', reserved });
  }

  settleStored(keyId: string, callId: string, _reserved: number, bytes: number, expiresAt: number): Promise<void> {
    const state = this.#state(keyId);
    this.#unreserve(state, callId);
    this.#prune(state);
    // Results share one TTL, so appending keeps the list ordered by expiry almost always; the
    // prune stops at the first live entry, which at worst keeps an expired one a little longer.
    state.stored.push({ bytes, expiresAt });
    state.storedBytes += bytes;
    return DONE;
  }

  releaseStored(keyId: string, callId: string, _reserved: number): Promise<void> {
    const state = this.#keys.get(keyId);
    if (state) this.#unreserve(state, callId);
    return DONE;
  }

  close(): Promise<void> {
    return DONE;
  }

  #bucket(): number {
    return Math.floor(Math.floor(this.#clock.now()) / this.#windowMs);
  }

  #state(keyId: string): KeyState {
    let state = this.#keys.get(keyId);
    if (!state) {
      state = {
        requests: undefined,
        tokens: undefined,
        leases: new Set(),
        stored: [],
        storedBytes: 0,
        reserved: new Map(),
        reservedBytes: 0,
      };
      this.#keys.set(keyId, state);
    }
    return state;
  }

  /** Decides `cost` against one window and counts it when admitted. */
  #spend(state: KeyState, which: 'requests' | 'tokens', limit: number, cost: number): WindowDecision {
    const now = this.#clock.now();
    const counts = rollWindow(state[which], Math.floor(Math.floor(now) / this.#windowMs));
    const decision = decideWindow(now, this.#windowMs, limit, cost, counts);
    state[which] = decision.admitted
      ? { ...counts, current: counts.current + cost, currentLast: Math.floor(now) }
      : counts;
    return decision;
  }

  /** Where a window stands now, without spending anything. */
  #peek(state: KeyState, which: 'requests' | 'tokens', limit: number): WindowState {
    const now = this.#clock.now();
    const counts = rollWindow(state[which], Math.floor(Math.floor(now) / this.#windowMs));
    return decideWindow(now, this.#windowMs, limit, 0, counts).state;
  }

  #prune(state: KeyState): void {
    const now = this.#clock.now();
    let gone = 0;
    while (gone < state.stored.length && state.stored[gone]!.expiresAt <= now)
      state.storedBytes -= state.stored[gone++]!.bytes;
    if (gone > 0) state.stored.splice(0, gone);
    // Reservations are few (the key's detached calls in flight), so a scan is cheap.
    for (const [callId, reservation] of state.reserved) if (reservation.until <= now) this.#unreserve(state, callId);
  }

  #unreserve(state: KeyState, callId: string): void {
    const reservation = state.reserved.get(callId);
    if (!reservation) return;
    state.reserved.delete(callId);
    state.reservedBytes -= reservation.bytes;
  }
}

const ADMITTED: Admission = Object.freeze({ kind: 'admitted' });
const NOTHING_RESERVED: StoredAdmission = Object.freeze({ kind: 'admitted', reserved: 0 });
const DONE = Promise.resolve();
