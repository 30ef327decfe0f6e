/**
 * The contract every Placer must keep, as one suite any implementation runs (built-in or
 * custom): it orders the runners it is given and nothing more, so the shared walk can rely on it.
 */
import { describe, expect, it } from 'vitest';
import { PlacerTimeoutError, placeCall, type Placer, type PromptCache, type Runner } from '../../placer/index.ts';
import { FakeClock, Fleet, T0, fakeCall, fakePool } from './fake.ts';
import { FakeLoads } from './fake-load.ts';

/** How the suite should treat the placer under test. */
export interface PlacerContractOptions {
  /** Set for placers allowed to leave runners out of a pass; they then need not yield all. */
  skips?: boolean;
}

const sizes = [1, 2, 3, 5, 17];
const keys = ['alice', 'bob', 'carol', 'dave', 'session-42', ''];

function runnersOf(n: number): Runner<string>[] {
  const fleet = new Fleet();
  return Array.from({ length: n }, (_, i) => fleet.runner(`runner-${String(i).padStart(2, '0')}`));
}

// Loads as a live pool shows them, garbled ones included: the contract holds whatever they say.
const sampleLoads = [
  { inFlight: 0, slots: 4 },
  { inFlight: 4, slots: 4 },
  { inFlight: 9, slots: 4, reported: { running: 4, waiting: 7, kvCacheUsage: 0.9, at: Date.now() } },
  { inFlight: Number.NaN },
  { inFlight: 2, slots: 0, reported: { running: -1, kvCacheUsage: Number.POSITIVE_INFINITY, at: 0 } },
];
const prompts = [undefined, '', 'short', `${'You are a helpful assistant. '.repeat(20)}Summarise the meeting notes.`];

// Cache truth as a gateway hands it over, odd ones included: holders that are not listed, hold
// nothing or hold more than the prompt, and a view that knows no runner.
const sampleCaches: (PromptCache | undefined)[] = [
  undefined,
  promptCache(4_000, {}),
  promptCache(4_000, { 'runner-00': 3_200, 'runner-02': 16 }),
  promptCache(4_000, { 'runner-01': 8_000, stranger: 4_000, 'runner-03': 0 }),
  promptCache(64, { 'runner-04': 48 }, () => false),
  { ...promptCache(4_000, { 'runner-02': 3_000 }), floor: 512 },
  { ...promptCache(4_000, {}), floor: 4_000 },
];

/** A call's cache truth from a table of holders. */
function promptCache(
  promptTokens: number,
  holders: Record<string, number>,
  known: (runnerId: string) => boolean = () => true,
): PromptCache {
  return { promptTokens, holders: new Map(Object.entries(holders)), known };
}

/** Runners whose load() reports the sample loads in turn, and one whose load() throws. */
function loadedRunnersOf(n: number): Runner<string>[] {
  const loads = new FakeLoads();
  const fleet = new Fleet({ loads });
  return Array.from({ length: n }, (_, i) => {
    const id = `runner-${String(i).padStart(2, '0')}`;
    loads.set(id, sampleLoads[i % sampleLoads.length]!);
    const runner = fleet.runner(id);
    const broken = (): never => {
      throw new Error('load read failed');
    };
    return i === 3 ? { ...runner, load: broken } : runner;
  });
}

/** Registers the placer contract suite for the placer that `create` returns. */
export function placerContract(label: string, create: () => Placer, options: PlacerContractOptions = {}): void {
  describe(`${label} (placer contract)`, () => {
    it('returns a non-empty string name when created', () => {
      const { name } = create();
      expect(typeof name).toBe('string');
      expect(name.length).toBeGreaterThan(0);
    });

    it('returns nothing when given no runners', () => {
      const placer = create();
      for (const key of keys) expect([...placer.order(fakeCall({ key }), [])]).toEqual([]);
    });

    it('returns only given runners, each at most once, when called pass after pass', () => {
      const placer = create();
      for (const n of sizes) {
        const runners = runnersOf(n);
        for (const key of keys) {
          for (let pass = 0; pass < 3; pass++) {
            const order = [...placer.order(fakeCall({ key }), runners)];
            expect(new Set(order).size).toBe(order.length);
            for (const runner of order) expect(runners).toContain(runner);
            if (!options.skips) expect(order).toHaveLength(n);
          }
        }
      }
    });

    it('returns only given runners, each at most once, when runners report loads and calls carry prompts and cache truth', () => {
      const placer = create();
      for (const n of sizes) {
        const runners = loadedRunnersOf(n);
        for (const [i, key] of keys.entries()) {
          for (let pass = 0; pass < 3; pass++) {
            const cache = sampleCaches[(i + pass) % sampleCaches.length];
            const call = fakeCall({ key, prompt: prompts[(i + pass) % prompts.length], ...(cache ? { cache } : {}) });
            const order = [...placer.order(call, runners)];
            expect(new Set(order).size).toBe(order.length);
            for (const runner of order) expect(runners).toContain(runner);
            if (!options.skips) expect(order).toHaveLength(n);
            placer.placed?.(call, order[0] ?? runners[0]!);
          }
        }
      }
    });

    it('returns nothing from placed() and forget() when told of runners it never ordered', () => {
      const placer = create();
      const stranger = new Fleet().runner('stranger');
      const prompt = 'You are a helpful assistant. '.repeat(20);
      expect(placer.placed?.(fakeCall({ prompt }), stranger)).toBeUndefined();
      expect(placer.forget?.(['stranger', 'never-seen'])).toBeUndefined();
      expect(placer.forget?.([])).toBeUndefined();
      const order = [...placer.order(fakeCall({ prompt }), runnersOf(3))];
      if (!options.skips) expect(order).toHaveLength(3);
    });

    it('returns an order without touching the runners array when the array is frozen', () => {
      const placer = create();
      const runners = Object.freeze(runnersOf(5));
      expect(() => [...placer.order(fakeCall(), runners)]).not.toThrow();
    });

    // Concurrent calls interleave their walks across awaits; orders must not share iteration state.
    it('returns complete orders when two are iterated interleaved', () => {
      const placer = create();
      const runners = runnersOf(4);
      const first = placer.order(fakeCall({ key: 'alice' }), runners)[Symbol.iterator]();
      const head = first.next();
      const second = [...placer.order(fakeCall({ key: 'bob' }), runners)];
      const firstAll: Runner<string>[] = head.done ? [] : [head.value];
      for (let step = first.next(); !step.done; step = first.next()) firstAll.push(step.value);
      for (const order of [firstAll, second]) {
        expect(new Set(order).size).toBe(order.length);
        if (!options.skips) expect(order).toHaveLength(4);
      }
    });

    it('returns a placement through placeCall when only one runner is free', async () => {
      const fleet = new Fleet();
      const pool = fakePool(fleet.runners({ a: ['busy'], b: ['failed'], c: ['placed'], d: ['busy'] }));
      const clock = new FakeClock({ auto: true });
      const placement = await placeCall(fakeCall(), pool, create(), { retryAllDelay: 10, clock });
      expect(placement.value).toBe('c');
      expect(fleet.offers.filter((id) => id === 'c')).toHaveLength(1);
    });

    it('offers each runner once per pass through placeCall when none ever commits', async () => {
      if (options.skips) return;
      const fleet = new Fleet();
      const pool = fakePool(fleet.runners({ a: ['busy'], b: ['failed'], c: ['busy'] }));
      const clock = new FakeClock({ auto: true });
      const call = fakeCall({ placerDeadline: T0 + 25 });
      const walk = placeCall(call, pool, create(), { retryAllDelay: 10, clock });
      await expect(walk).rejects.toBeInstanceOf(PlacerTimeoutError);
      expect(fleet.offers).toHaveLength(9);
      for (let pass = 0; pass < 3; pass++) {
        expect([...fleet.offers.slice(pass * 3, pass * 3 + 3)].sort()).toEqual(['a', 'b', 'c']);
      }
    });
  });
}
