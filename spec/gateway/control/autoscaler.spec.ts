/**
 * The wanted count of one deployment (gateway/control/autoscaler.ts): the two windows, the panic
 * hold and the scale-down delay, on times the spec gives.
 */
import { describe, expect, it } from 'vitest';
import { FRESH_SCALE_MEMORY, ModelAutoscaler, decideScale } from '../../../gateway/control/autoscaler.ts';
import type { ScaleDecision, ScaleInput } from '../../../gateway/control/autoscaler.ts';
import { deployment } from './fake-fleet.ts';

const windows = { stableWindow: 60_000, panicWindow: 6_000, panicThreshold: 2 };
const d = deployment('m', { minReplicas: 0, maxReplicas: 10, targetConcurrency: 2, scaleDownDelay: 10_000 });

/** Samples and the memory {@link decideScale} leaves, as the reconciler keeps them across passes. */
class Scaling {
  readonly samples = new ModelAutoscaler(windows);
  #memory = FRESH_SCALE_MEMORY;

  sample(at: number, value: number): void {
    this.samples.sample(at, value);
  }

  average(now: number, window: number): number {
    return this.samples.average(now, window);
  }

  decide(input: ScaleInput): ScaleDecision {
    const { decision, memory } = decideScale(windows, this.samples.load(input.now), this.#memory, input);
    this.#memory = memory;
    return decision;
  }
}

/** Samples of `values`, one a second, the last at `end`. */
function fed(values: number[], end = 100_000): Scaling {
  const scaler = new Scaling();
  values.forEach((v, i) => scaler.sample(end - (values.length - 1 - i) * 1_000, v));
  return scaler;
}

const input = (now: number, extra: Partial<ScaleInput> = {}): ScaleInput => ({
  now,
  deployment: d,
  ready: 1,
  current: 1,
  waiting: 0,
  ...extra,
});

describe('ModelAutoscaler and decideScale', () => {
  it('averages the samples inside each window, and drops those older than the stable one', () => {
    const scaler = fed([...Array(60).fill(1), ...Array(6).fill(7)]);
    expect(scaler.average(100_000, 6_000)).toBe(7);
    // 54 ones and 6 sevens in the last 60 s.
    expect(scaler.average(100_000, 60_000)).toBeCloseTo(1.6);
    expect(new ModelAutoscaler(windows).average(100_000, 60_000)).toBe(0);
  });

  it('wants ceil(stable / target) within min and max, saying why', () => {
    expect(fed(Array(60).fill(5)).decide(input(100_000, { ready: 3, current: 3 }))).toMatchObject({
      wanted: 3,
      reason: '5 calls over 60 s at target 2',
      panicking: false,
    });
    expect(fed(Array(60).fill(100)).decide(input(100_000, { ready: 10, current: 10 }))).toMatchObject({ wanted: 10 });
    const floor = deployment('m', { minReplicas: 2, maxReplicas: 4 });
    expect(fed([0]).decide(input(100_000, { deployment: floor }))).toMatchObject({
      wanted: 2,
      reason: 'minReplicas 2',
    });
  });

  it(`panics at ${windows.panicThreshold}x the target of the ready replicas and wants the panic's count`, () => {
    // Stable 0.6 wants one replica; the panic window's 6 reaches 2 x target 2 x 1 ready, not 2 x 2 x 2.
    const burst = [...Array(54).fill(0), ...Array(6).fill(6)];
    expect(fed(burst).decide(input(100_000))).toMatchObject({
      wanted: 3,
      panicking: true,
      reason: 'panic: 6 calls over 6 s',
    });
    expect(fed(burst).decide(input(100_000, { ready: 2, current: 2 }))).toMatchObject({
      wanted: 1,
      panicking: false,
      reason: '0.6 calls over 60 s at target 2',
    });
  });

  it('keeps the current count while panicking and for the stable window after', () => {
    const scaler = fed([...Array(54).fill(0), ...Array(6).fill(20)]);
    expect(scaler.decide(input(100_000, { ready: 1, current: 4 }))).toMatchObject({ wanted: 10, panicking: true });
    for (let t = 101_000; t <= 160_000; t += 1_000) scaler.sample(t, 0);
    const held = scaler.decide(input(159_999, { ready: 10, current: 10 }));
    expect(held).toMatchObject({ wanted: 10, scaleDown: false });
    const after = scaler.decide(input(160_000, { ready: 10, current: 10 }));
    expect(after).toMatchObject({ wanted: 0, scaleDown: false });
  });

  it('allows a scale-down once wanted has been below current for the whole delay, and restarts the count when it is not', () => {
    const scaler = fed([0]);
    expect(scaler.decide(input(100_000))).toMatchObject({ wanted: 0, scaleDown: false });
    expect(scaler.decide(input(109_999))).toMatchObject({ scaleDown: false });
    expect(scaler.decide(input(110_000))).toMatchObject({ scaleDown: true, downReason: 'idle for 10 s' });
    // A load that wants the current count resets the delay.
    scaler.sample(111_000, 2);
    expect(scaler.decide(input(111_000))).toMatchObject({ wanted: 1, scaleDown: false });
    expect(scaler.decide(input(111_000, { ready: 2, current: 2 }))).toMatchObject({ wanted: 1, scaleDown: false });
    expect(scaler.decide(input(121_000, { ready: 2, current: 2 }))).toMatchObject({
      scaleDown: true,
      downReason: '1 calls over 60 s at target 2 for 10 s',
    });
  });

  it('wants one replica at once for a waiting call with none, and keeps wanting it while calls wait', () => {
    const scaler = new Scaling();
    expect(scaler.decide(input(100_000, { ready: 0, current: 0, waiting: 1 }))).toMatchObject({
      wanted: 1,
      reason: 'a call is waiting with no replica',
    });
    expect(scaler.decide(input(100_000, { ready: 0, current: 1, waiting: 3 }))).toMatchObject({
      wanted: 1,
      reason: '3 calls waiting',
      scaleDown: false,
    });
  });
});
