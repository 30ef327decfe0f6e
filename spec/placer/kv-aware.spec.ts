import { describe, expect, it } from 'vitest';
import {
  PlacerConfigError,
  createKvAwarePlacer,
  type PromptCache,
  type RunnerCall,
  type RunnerLoad,
} from '../../placer/index.ts';
import { Fleet, fakeCall } from './fake.ts';
import { FakeLoads, seeded } from './fake-load.ts';

/** A call of `promptTokens` whose start `holders` hold, by runner id, and every known runner `floor` of it. */
function cachedCall(promptTokens: number, holders: Record<string, number>, floor = 0): RunnerCall {
  const cache: PromptCache = { promptTokens, holders: new Map(Object.entries(holders)), floor, known: () => true };
  return fakeCall({ cache });
}

/** The order kv-aware gives `call` over runners a..d with these loads (16 slots each). */
function orderOf(call: RunnerCall, inFlight: Record<string, number>, options = {}): string[] {
  const loads = new FakeLoads(
    Object.fromEntries(
      Object.entries(inFlight).map(([id, n]): [string, RunnerLoad] => [id, { inFlight: n, slots: 16 }]),
    ),
  );
  const fleet = new Fleet({ loads });
  const runners = Object.keys(inFlight).map((id) => fleet.runner(id));
  const placer = createKvAwarePlacer({ random: seeded(7), now: () => 0, ...options });
  return [...placer.order(call, runners)].map((r) => r.id);
}

const idle = { a: 0, b: 0, c: 0, d: 0 };

describe('kv-aware', () => {
  it('puts the runner holding the most of the prompt first, then the other holders cheaper than a fresh runner', () => {
    const order = orderOf(cachedCall(8_000, { b: 6_000, c: 7_000, d: 16 }), idle);
    expect(order.slice(0, 2)).toEqual(['c', 'b']);
    expect(order.toSorted()).toEqual(['a', 'b', 'c', 'd']);
  });

  it('weighs the cache against load: a busier holder still wins while the work there is less', () => {
    // c: (8000 - 7000 + 120) x (1 + 10/16) = 1820; b idle: (8000 - 6000 + 120) x 1 = 2120.
    expect(orderOf(cachedCall(8_000, { b: 6_000, c: 7_000 }), { ...idle, c: 10 })[0]).toBe('c');
    // c full: 1120 x 2 = 2240 > 2120, so b goes first.
    expect(orderOf(cachedCall(8_000, { b: 6_000, c: 7_000 }), { ...idle, c: 16 })[0]).toBe('b');
  });

  it('passes a holder over for a fresh runner when the work there is more (a small hit on a loaded runner)', () => {
    // b: (8000 - 160 + 120) x (1 + 12/16) = 13930 against an idle fresh runner's 8120.
    const order = orderOf(cachedCall(8_000, { b: 160 }), { ...idle, b: 12 });
    expect(order[0]).not.toBe('b');
    expect(order.at(-1)).toBe('b');
  });

  it('falls back to least-loaded order when no listed runner holds any of the prompt, or the call has no truth', () => {
    for (const call of [cachedCall(8_000, {}), cachedCall(8_000, { stranger: 8_000, a: 0 }), fakeCall()]) {
      const order = orderOf(call, { a: 9, b: 1, c: 5, d: 12 });
      // The pair drawn decides the first; the rest go least loaded first.
      expect(order.toSorted()).toEqual(['a', 'b', 'c', 'd']);
      expect(order.slice(1)).toEqual(
        order.slice(1).toSorted((x, y) => ({ a: 9, b: 1, c: 5, d: 12 })[x]! - { a: 9, b: 1, c: 5, d: 12 }[y]!),
      );
    }
  });

  it('weighs a fresh runner by the floor every runner holds, so a small extra hit on a busy holder loses', () => {
    // b: (8000 - 1000 + 120) x (1 + 8/16) = 10680. Without the floor a fresh idle runner costs
    // 8120 and goes first; with a floor of 960 it costs 7160 and still goes first; b must hold
    // much more than the floor to win: at 6000, (2000 + 120) x 1.5 = 3180 wins.
    expect(orderOf(cachedCall(8_000, { b: 1_000 }, 960), { ...idle, b: 8 })[0]).not.toBe('b');
    expect(orderOf(cachedCall(8_000, { b: 6_000 }, 960), { ...idle, b: 8 })[0]).toBe('b');
    // Everyone holding the same floor and no more: least-loaded order.
    const order = orderOf(cachedCall(8_000, {}, 960), { a: 9, b: 1, c: 5, d: 12 });
    expect(order.slice(1)).toEqual(
      order.slice(1).toSorted((x, y) => ({ a: 9, b: 1, c: 5, d: 12 })[x]! - { a: 9, b: 1, c: 5, d: 12 }[y]!),
    );
  });

  it('keeps the load guard: a holder far busier than the least loaded runner does not take the call', () => {
    // c at 20/16 = 1.25 against 0: beyond both gaps (1 and 1.5x), so least-loaded order.
    const order = orderOf(cachedCall(8_000, { c: 7_984 }), { ...idle, c: 20 });
    expect(order.at(-1)).toBe('c');
    // With the guard loosened the same holder goes first.
    expect(orderOf(cachedCall(8_000, { c: 7_984 }), { ...idle, c: 20 }, { balanceAbsThreshold: 5 })[0]).toBe('c');
  });

  it('prefers the cheapest listed holder, and nothing when the call has no truth', () => {
    const fleet = new Fleet();
    const runners = ['a', 'b', 'c'].map((id) => fleet.runner(id));
    const placer = createKvAwarePlacer({ now: () => 0 });
    expect(placer.preferred?.(cachedCall(4_000, { b: 2_000, c: 3_000, z: 4_000 }), runners)).toBe('c');
    expect(placer.preferred?.(fakeCall(), runners)).toBeUndefined();
  });

  it.each([
    ['loadWeight', -1],
    ['overheadTokens', Number.NaN],
    ['balanceRelThreshold', 0.5],
  ])('refuses a bad %s, naming it', (option, value) => {
    expect(() => createKvAwarePlacer({ [option]: value })).toThrow(PlacerConfigError);
    expect(() => createKvAwarePlacer({ [option]: value })).toThrow(option);
  });
});
