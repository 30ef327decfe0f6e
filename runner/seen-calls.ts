/**
 * The call ids of signed calls this runner has run, each kept until its signed deadline (plus
 * the allowed clock skew) has passed: a signed request replayed whole, before its deadline, is
 * the same call, and is refused rather than run twice. A call that ended busy (nothing ran) is
 * forgotten, so its gateway may offer it here again.
 */
import { LRUCache } from 'lru-cache';

/** Most call ids kept; past it the oldest go first, reopening their replay window until their deadline. */
export const SEEN_CALLS_MAX = 100_000;

/** Call ids of signed calls running or run, until their deadline. */
export class SeenCalls {
  /** Each id's end of claim, ms since the epoch; an entry past it is as good as gone. */
  readonly #ids: LRUCache<string, number>;
  readonly #now: () => number;

  /** @param now wall-clock ms since the epoch, the deadlines' time */
  constructor(now: () => number = Date.now, max = SEEN_CALLS_MAX) {
    this.#now = now;
    // Expiry is checked here against `now` rather than by the cache's TTL, which reads its own
    // cached time: a deadline is on the wall clock the caller gives.
    this.#ids = new LRUCache<string, number>({ max });
  }

  /**
   * Claims `id` until `until` (ms since the epoch); false when it is claimed already: the
   * request is a replay of a call that is running or ran.
   */
  claim(id: string, until: number): boolean {
    const claimed = this.#ids.get(id);
    if (claimed !== undefined && claimed >= this.#now()) return false;
    this.#ids.set(id, until);
    return true;
  }

  /** Forgets `id`: its call ended without running (a busy answer). */
  release(id: string): void {
    this.#ids.delete(id);
  }
}
