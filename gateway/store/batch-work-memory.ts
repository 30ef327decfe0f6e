/**
 * The work of batches in one process (the memory batch store's): each batch's chunks with their
 * leases, its stop, and its lines' started marks and results, held in Maps. The rules are the
 * ones the Redis store keeps in Lua (batch-work-redis.ts): a lease runs until its `ttl` passes on
 * the store's clock, a chunk done is never handed out again, a line's result is written once.
 */
import type { BatchStop, ChunkTake, LineClaim, LineResult, RequestCounts } from './batch-types.ts';

/** The finalize step's index among the leases. */
const FINALIZE = -1;

interface Lease {
  holder: string;
  until: number;
}

/** One batch's work. */
interface Work {
  count: number | undefined;
  readonly done: Set<number>;
  readonly leases: Map<number, Lease>;
  stop: BatchStop | undefined;
  /** Started marks (holder) and results, by custom_id. */
  readonly lines: Map<string, string | LineResult>;
  /** The results written, each way. */
  readonly ended: { completed: number; failed: number };
}

/** Every batch's work, on the store's clock. */
export class MemoryBatchWork {
  readonly #work = new Map<string, Work>();
  readonly #now: () => number;

  constructor(now: () => number) {
    this.#now = now;
  }

  open(id: string, count: number): void {
    const work = this.#of(id);
    work.count ??= count;
  }

  take(id: string, holder: string, ttl: number): ChunkTake {
    const work = this.#of(id);
    if (work.count === undefined) return { kind: 'none' };
    const now = this.#now();
    const live = (index: number) => (work.leases.get(index)?.until ?? 0) > now;
    if (work.stop === undefined) {
      for (let index = 0; index < work.count; index++) {
        if (work.done.has(index) || live(index)) continue;
        work.leases.set(index, { holder, until: now + ttl });
        return { kind: 'chunk', index };
      }
    }
    const busy = [...work.leases.keys()].some((index) => index !== FINALIZE && !work.done.has(index) && live(index));
    const finished = work.stop !== undefined || work.done.size === work.count;
    if (busy || !finished || live(FINALIZE)) return { kind: 'none' };
    work.leases.set(FINALIZE, { holder, until: now + ttl });
    return work.stop === undefined ? { kind: 'finalize' } : { kind: 'finalize', stop: work.stop };
  }

  renew(id: string, index: number, holder: string, ttl: number): boolean {
    const lease = this.#work.get(id)?.leases.get(index);
    if (!lease || lease.holder !== holder || this.#work.get(id)!.done.has(index)) return false;
    lease.until = this.#now() + ttl;
    return true;
  }

  end(id: string, index: number, holder: string): void {
    const work = this.#work.get(id);
    if (work?.leases.get(index)?.holder !== holder) return;
    work.leases.delete(index);
    work.done.add(index);
  }

  release(id: string, index: number, holder: string): void {
    const work = this.#work.get(id);
    if (work?.leases.get(index)?.holder === holder) work.leases.delete(index);
  }

  stop(id: string, stop: BatchStop): void {
    const work = this.#of(id);
    work.stop ??= stop;
  }

  claim(id: string, customId: string, holder: string): LineClaim {
    const lines = this.#of(id).lines;
    const mark = lines.get(customId);
    if (mark === undefined || mark === holder) {
      lines.set(customId, holder);
      return 'claimed';
    }
    return typeof mark === 'string' ? 'started' : 'ended';
  }

  unclaim(id: string, customId: string, holder: string): void {
    const lines = this.#work.get(id)?.lines;
    if (lines?.get(customId) === holder) lines.delete(customId);
  }

  put(id: string, customId: string, result: LineResult): boolean {
    const lines = this.#of(id).lines;
    if (typeof lines.get(customId) === 'object') return false;
    lines.set(customId, { ...result });
    this.#of(id).ended[result.outcome]++;
    return true;
  }

  results(id: string): Map<string, LineResult> {
    const results = new Map<string, LineResult>();
    for (const [customId, mark] of this.#work.get(id)?.lines ?? []) {
      if (typeof mark === 'object') results.set(customId, { ...mark });
    }
    return results;
  }

  /** The lines ended each way so far. */
  counts(id: string): Pick<RequestCounts, 'completed' | 'failed'> {
    const ended = this.#work.get(id)?.ended;
    return ended ? { ...ended } : { completed: 0, failed: 0 };
  }

  /** Forgets a batch's work (it is final). */
  forget(id: string): void {
    this.#work.delete(id);
  }

  #of(id: string): Work {
    let work = this.#work.get(id);
    if (!work) {
      work = {
        count: undefined,
        done: new Set(),
        leases: new Map(),
        stop: undefined,
        lines: new Map(),
        ended: { completed: 0, failed: 0 },
      };
      this.#work.set(id, work);
    }
    return work;
  }
}
