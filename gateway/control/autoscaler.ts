/**
 * How many replicas one deployment wants, from the concurrency it carries: Knative's two-window
 * rule (a stable average and a short panic one) over samples the reconciler takes every
 * `sampleInterval`. Pure arithmetic on times it is given; it reads no clock and holds no timer:
 * {@link decideScale} is the rule, and the reconciler keeps its memory in its book.
 *
 * The rules, in the order they apply:
 * - wanted = clamp(ceil(stable / target), min, max), where `stable` is the average concurrency
 *   (calls holding a slot on the model's replicas plus calls waiting for one) over `stableWindow`.
 * - Panic when the average over `panicWindow` is at least `panicThreshold` x target x
 *   max(ready, 1): wanted = max(ceil(panic / target), the stable wanted, the current count),
 *   clamped to max. No scale-down while panicking, nor for `stableWindow` after the last panic,
 *   so a burst that pauses for a few seconds does not lose the replicas it brought.
 * - A call waiting with no ready or starting replica wants at least 1 at once: the activator's
 *   case, which cannot wait for an average to build. Waiting calls keep wanting 1 after.
 * - A scale-down is allowed once the wanted count has stayed below the current count for the
 *   deployment's whole `scaleDownDelay`; the reconciler then removes one replica per pass.
 */
import type { Deployment } from './deployments.ts';

/** The windows of {@link ModelAutoscaler} and {@link decideScale}, in ms; the reconciler checks them. */
export interface AutoscalerWindows {
  readonly stableWindow: number;
  readonly panicWindow: number;
  /** Panic when the panic average reaches this many times the target of the ready replicas. */
  readonly panicThreshold: number;
}

/** What the reconciler knows of a deployment's replicas at a pass. */
export interface ScaleInput {
  readonly now: number;
  readonly deployment: Deployment;
  /** Replicas whose engine is ready. */
  readonly ready: number;
  /** Replicas ready or starting (the current count; draining ones are on their way out). */
  readonly current: number;
  /** Calls for the model waiting in this gateway's queue now. */
  readonly waiting: number;
}

/** What {@link decideScale} wants, and why in words (scale events carry the words). */
export interface ScaleDecision {
  readonly wanted: number;
  /** Why `wanted` is what it is: "3.2 calls over 60 s at target 1", "minReplicas 1", ... */
  readonly reason: string;
  /** True when the current count may go down by one now. */
  readonly scaleDown: boolean;
  /** Why a scale-down is due: "idle for 300 s", or the load that stayed under target and for how long. */
  readonly downReason: string;
  readonly panicking: boolean;
  /** Average concurrency over the stable and the panic window. */
  readonly stable: number;
  readonly panic: number;
}

interface Sample {
  readonly at: number;
  readonly value: number;
}

/** A number for a reason: one decimal at most ("3.2", "9"). */
const figure = (n: number): string => String(Math.round(n * 10) / 10);
/** A duration for a reason, in whole seconds. */
const seconds = (ms: number): string => `${Math.round(ms / 1000)} s`;

/** What a deployment's scaling remembers between passes: its last panic's hold and how long it has wanted fewer. */
export interface ScaleMemory {
  /** Until when no scale-down happens: the last panic plus the stable window. */
  readonly holdUntil: number;
  /** Since when the wanted count has been below the current count; undefined when it is not. */
  readonly belowSince: number | undefined;
}

/** A memory with no panic and no time below: a new deployment's, or a new leader's. */
export const FRESH_SCALE_MEMORY: ScaleMemory = Object.freeze({ holdUntil: -Infinity, belowSince: undefined });

/** The average concurrency over the stable and the panic window, at a pass's time. */
export interface ScaleLoad {
  readonly stable: number;
  readonly panic: number;
}

/**
 * Applies the rules of this file to one pass's view of a deployment: pure, it returns the
 * decision and the memory the next pass starts from.
 */
export function decideScale(
  windows: AutoscalerWindows,
  load: ScaleLoad,
  memory: ScaleMemory,
  input: ScaleInput,
): { readonly decision: ScaleDecision; readonly memory: ScaleMemory } {
  const { now, deployment: d, ready, current, waiting } = input;
  const { stableWindow, panicWindow, panicThreshold } = windows;
  const { stable, panic } = load;
  const target = d.targetConcurrency;
  const clamp = (n: number): number => Math.min(d.maxReplicas, Math.max(d.minReplicas, n));
  const byLoad = Math.ceil(stable / target);
  let wanted = clamp(byLoad);
  let reason =
    byLoad < d.minReplicas && wanted === d.minReplicas
      ? `minReplicas ${d.minReplicas}`
      : `${figure(stable)} calls over ${seconds(stableWindow)} at target ${target}`;
  const panicking = panic > 0 && panic >= panicThreshold * target * Math.max(ready, 1);
  let holdUntil = memory.holdUntil;
  if (panicking) {
    holdUntil = now + stableWindow;
    const inPanic = clamp(Math.max(Math.ceil(panic / target), wanted, current));
    if (inPanic > wanted) reason = `panic: ${figure(panic)} calls over ${seconds(panicWindow)}`;
    wanted = inPanic;
  }
  // A waiting call wants a replica whatever the averages say; with none at all, at once.
  if (waiting > 0 && wanted < 1) {
    wanted = 1;
    reason = current === 0 ? 'a call is waiting with no replica' : `${waiting} calls waiting`;
  }
  const holding = now < holdUntil;
  // Held: the panic's replicas stay (an operator's lower max still wins).
  if (holding) wanted = Math.max(wanted, Math.min(current, d.maxReplicas));

  const belowSince = wanted >= current ? undefined : (memory.belowSince ?? now);
  const below = belowSince === undefined ? 0 : now - belowSince;
  const scaleDown = belowSince !== undefined && !holding && below >= d.scaleDownDelay;
  const downReason =
    stable === 0
      ? `idle for ${seconds(below)}`
      : `${figure(stable)} calls over ${seconds(stableWindow)} at target ${target} for ${seconds(below)}`;
  return {
    decision: { wanted, reason, scaleDown, downReason, panicking, stable, panic },
    memory: { holdUntil, belowSince },
  };
}

/** The concurrency samples of one model, over the stable window; {@link decideScale} reads their averages. */
export class ModelAutoscaler {
  readonly #windows: AutoscalerWindows;
  #samples: Sample[] = [];

  constructor(windows: AutoscalerWindows) {
    this.#windows = windows;
  }

  /** Records the concurrency at `at`; samples older than the stable window are dropped. */
  sample(at: number, concurrency: number): void {
    this.#samples.push({ at, value: concurrency });
    const oldest = at - this.#windows.stableWindow;
    let drop = 0;
    while (drop < this.#samples.length && this.#samples[drop]!.at <= oldest) drop++;
    if (drop > 0) this.#samples = this.#samples.slice(drop);
  }

  /**
   * The average over the last `window` ms before `now`, of the samples taken in it; 0 with none.
   * Dividing by the samples present (not by the window's length) lets a gateway that just started
   * act on the seconds it has seen.
   */
  average(now: number, window: number): number {
    let sum = 0;
    let n = 0;
    for (const s of this.#samples) {
      if (s.at > now - window && s.at <= now) {
        sum += s.value;
        n++;
      }
    }
    return n === 0 ? 0 : sum / n;
  }

  /** Both windows' averages at `now`. */
  load(now: number): ScaleLoad {
    return {
      stable: this.average(now, this.#windows.stableWindow),
      panic: this.average(now, this.#windows.panicWindow),
    };
  }
}
