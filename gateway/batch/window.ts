/**
 * The release window: how many more of a model's batch lines may start now. Lines run as calls
 * of the `batch` priority class, so a line that finds no free slot waits in the gateway's queue
 * behind every interactive call; the window keeps that wait short and the fleet's free slots
 * busy, and no more:
 *
 *   release = min(free + PARKED − waiting, maxInFlight − inFlight), at least 0
 *
 * `free` is the slots the model's runners have free now (each runner's reported slots minus the
 * calls this gateway has on it), `waiting` the batch-class calls of the model already in the
 * queue. So lines are released as slots free up (each line's end and each tick look again), a
 * line or so is kept parked in the queue, where a slot freed with no interactive call waiting
 * goes to it at once, and a fleet busy with interactive traffic gets no more lines than that.
 * Pure: the tables in spec/gateway/batch/window.spec.ts drive it.
 */
import type { Runner } from '../../placer/types.ts';

/** What the window reads of the fleet and the queue. */
export interface FleetView {
  /** The runners that may serve `model`. */
  runners(model: string): readonly Pick<Runner, 'load'>[];
  /** Batch-class calls of `model` waiting in this gateway's queue. */
  waiting(model: string): number;
}

/** Batch lines of a model kept waiting in the queue, ready for a slot no interactive call takes. */
export const PARKED = 1;

/** What the window is computed from, for one model. */
export interface WindowView {
  /** Free slots of the model's runners now. */
  readonly free: number;
  /** Batch-class calls of the model waiting in the queue now. */
  readonly waiting: number;
  /** Batch lines this gateway has in flight now, over every model. */
  readonly inFlight: number;
  /** The most batch lines in flight at once (maxLinesInFlight). */
  readonly maxInFlight: number;
}

/** How many more lines of the model may be released now. */
export function linesToRelease(view: WindowView): number {
  const wanted = Math.max(0, view.free) + PARKED - Math.max(0, view.waiting);
  return Math.max(0, Math.min(wanted, view.maxInFlight - view.inFlight));
}

/**
 * The free slots of `runners`: each one's reported slots less this gateway's calls on it; a
 * runner that has not reported its slots counts one while it has no call of ours (it may have
 * room), none after.
 */
export function freeSlots(runners: readonly Pick<Runner, 'load'>[]): number {
  let free = 0;
  for (const runner of runners) {
    const load = runner.load?.();
    const inFlight = load?.inFlight ?? 0;
    const slots = load?.slots;
    if (slots === undefined || !Number.isFinite(slots) || slots <= 0) free += inFlight === 0 ? 1 : 0;
    else free += Math.max(0, slots - inFlight);
  }
  return free;
}
