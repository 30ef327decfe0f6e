/**
 * The soak's fault schedule and its windows. Each fault is injected once, at a fixed share of the
 * load's duration, so two soaks of the same length are comparable fault by fault; each leaves a
 * window from its injection to its recovery plus a grace, and a call whose life overlaps a window
 * is a call the fault may have touched. Errors outside every window are the ones a fault cannot
 * excuse.
 */

/** The faults the soak injects. */
export type FaultKind = 'runner-kill' | 'runner-stop' | 'engine-crash' | 'redis-restart';

/** Every fault, in the order the schedule injects them. */
export const FAULT_KINDS: readonly FaultKind[] = Object.freeze([
  'runner-kill',
  'runner-stop',
  'engine-crash',
  'redis-restart',
]);

/** Where in the load each fault strikes, as a share of the load's duration. */
const FAULT_AT: Readonly<Record<FaultKind, number>> = Object.freeze({
  'runner-kill': 0.15,
  'runner-stop': 0.35,
  'engine-crash': 0.55,
  'redis-restart': 0.75,
});

/** Added after a fault's recovery before its window closes: what the fleet needs to notice it. */
const WINDOW_GRACE_MS = 5_000;

/** One fault as planned: what, when (ms from the load's start). */
export interface PlannedFault {
  readonly kind: FaultKind;
  readonly atMs: number;
}

/** One fault as it happened. Times are ms from the load's start. */
export interface FaultWindow {
  readonly kind: FaultKind;
  /** What it struck: a runner id, or `redis`. */
  readonly target: string;
  readonly plannedMs: number;
  readonly injectedMs: number;
  /** When the fleet was whole again; undefined when it was not within the recovery bound. */
  readonly recoveredMs: number | undefined;
  /** The window's end: recovery (or the bound, when there was none) plus {@link WINDOW_GRACE_MS}. */
  readonly endMs: number;
  /** What the injection and the recovery found, for the report (`engine pid 123 -> 456`). */
  readonly note: string;
}

/** True when `value` names a fault. */
export function isFaultKind(value: unknown): value is FaultKind {
  return typeof value === 'string' && (FAULT_KINDS as readonly string[]).includes(value);
}

/** The schedule of `faults` over a load of `durationMs`, in injection order. */
export function planSchedule(durationMs: number, faults: readonly FaultKind[]): PlannedFault[] {
  return faults
    .map((kind) => ({ kind, atMs: Math.round(durationMs * FAULT_AT[kind]) }))
    .sort((a, b) => a.atMs - b.atMs);
}

/**
 * The window of a fault injected at `injectedMs` that recovered at `recoveredMs`, or, when it did
 * not recover, whose recovery was given up at `gaveUpMs`.
 */
export function faultWindow(
  fault: { kind: FaultKind; target: string; plannedMs: number; injectedMs: number; note: string },
  recoveredMs: number | undefined,
  gaveUpMs: number,
  graceMs = WINDOW_GRACE_MS,
): FaultWindow {
  return { ...fault, recoveredMs, endMs: (recoveredMs ?? gaveUpMs) + graceMs };
}

/** True when [`fromMs`, `toMs`] overlaps any window: the call was alive while some fault was. */
export function overlapsWindow(windows: readonly FaultWindow[], fromMs: number, toMs: number): boolean {
  return windows.some((w) => fromMs <= w.endMs && toMs >= w.injectedMs);
}
