/**
 * How the gateway reads a runner's load for the placers: its own in-flight count (immediate),
 * the runner's last report (heartbeat or status probe), and that report corrected by the calls of
 * this gateway it counted that have ended since. HttpRunner.load() (for the pool's RunnerEntry)
 * reads load this way, and so does the simulator (k6/driver/vsim) on its virtual clock, so both
 * place on the same figures.
 */
import type { RunnerLoad } from '../../placer/types.ts';
import type { ReportedLoad } from '../../runner/protocol/index.ts';

/** A runner's last report as the gateway keeps it, with the gateway's clock reading when it came. */
export interface StampedReport {
  readonly load: Pick<ReportedLoad, 'slotsInUse' | 'slots' | 'queue' | 'kvCacheUsage'>;
  readonly at: number;
}

/**
 * The load placers see: `inFlight` alone while no report came, else the report with the calls of
 * ours it counted that have ended since taken off its running count.
 */
export function runnerLoad(inFlight: number, report: StampedReport | undefined, ended: EndedCalls): RunnerLoad {
  if (!report) return { inFlight };
  const { load, at } = report;
  const running =
    typeof load.slotsInUse === 'number' ? Math.max(0, load.slotsInUse - ended.since(at)) : load.slotsInUse;
  return {
    inFlight,
    slots: load.slots,
    reported: {
      running,
      waiting: load.queue,
      ...(load.kvCacheUsage === undefined ? {} : { kvCacheUsage: load.kvCacheUsage }),
      at,
    },
  };
}

/**
 * The send and end times of one gateway's recent calls on one runner, for correcting that runner's
 * last report. A report is a snapshot: the calls of ours it counted as running that have ended
 * since are not running any more. Without this, a runner that just finished a call reads busy for
 * up to a heartbeat, and a placer steers the next call (a session's next turn) away from it.
 * Times are whatever clock the caller keeps (the gateway's, or the simulator's virtual one), the
 * same clock as the report's `at`.
 */
export class EndedCalls {
  /**
   * Oldest end first (calls are recorded as they end), from {@link #first} on: the entries
   * before it are forgotten, and cut off in one go once they are half the array, so forgetting
   * costs no copy per call.
   */
  readonly #recent: { sent: number; ended: number }[] = [];
  #first = 0;
  readonly #keepMs: number;
  readonly #keepMax: number;

  /**
   * @param keepMs how long an ended call is remembered; reports older than the load staleness are
   *   ignored anyway, so a little more than that is enough. @default 10000
   * @param keepMax most ended calls remembered, whatever their age. @default 1024
   */
  constructor(keepMs = 10_000, keepMax = 1_024) {
    this.#keepMs = keepMs;
    this.#keepMax = keepMax;
  }

  /** A call sent at `sent` ended at `ended` (not before the last one recorded). */
  record(sent: number, ended: number): void {
    const recent = this.#recent;
    recent.push({ sent, ended });
    let first = this.#first;
    while (
      first < recent.length &&
      (recent[first]!.ended < ended - this.#keepMs || recent.length - first > this.#keepMax)
    )
      first++;
    if (first > 64 && first * 2 > recent.length) {
      recent.splice(0, first);
      first = 0;
    }
    this.#first = first;
  }

  /** Calls that were running at `at` (sent at or before it) and have ended since. */
  since(at: number): number {
    let count = 0;
    for (let i = this.#recent.length - 1; i >= this.#first; i--) {
      const call = this.#recent[i]!;
      if (call.ended <= at) break;
      if (call.sent <= at) count++;
    }
    return count;
  }
}
