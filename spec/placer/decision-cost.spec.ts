import { describe, expect, it } from 'vitest';
import {
  type Placer,
  type PromptCache,
  type RunnerCall,
  createConsistentHashPlacer,
  createKvAwarePlacer,
  createLeastLoadedPlacer,
  createLoadWeightedPlacer,
  createPrefixAffinityPlacer,
  createRoundRobinPlacer,
} from '../../placer/index.ts';
import { T0, fakeCall } from './fake.ts';
import { countingPool, seeded } from './fake-load.ts';

/** The load every runner of the pools below reports. */
const LOAD = Object.freeze({ inFlight: 4, slots: 16 });

const prompt = `system: you are a careful assistant. ${'Answer briefly and cite sources. '.repeat(40)}\nuser: hello`;

/** Truth that runner-00042 and runner-07000 hold most of the prompt. */
const truth: PromptCache = {
  promptTokens: 400,
  holders: new Map([
    ['runner-00042', 384],
    ['runner-07000', 256],
  ]),
  known: () => true,
};

interface CostCase {
  name: string;
  create: () => Placer;
  call: RunnerCall;
  /** Calls placed on the first runner offered before the one measured (prefix-affinity learns). */
  before?: RunnerCall[];
  /** Most load() reads one decision may make on 10,000 runners. */
  most: number;
}

const random = seeded(31);
const costCases: CostCase[] = [
  { name: 'round-robin', create: () => createRoundRobinPlacer({ random }), call: fakeCall(), most: 0 },
  { name: 'consistent-hash', create: () => createConsistentHashPlacer(), call: fakeCall(), most: 16 + 1 },
  {
    name: 'least-loaded',
    create: () => createLeastLoadedPlacer({ random, now: () => T0 }),
    call: fakeCall(),
    most: 16,
  },
  // The mean spare room's 16, then the home, kept: it has the mean room.
  {
    name: 'load-weighted',
    create: () => createLoadWeightedPlacer({ random, now: () => T0 }),
    call: fakeCall(),
    most: 17,
  },
  {
    name: 'prefix-affinity',
    create: () => createPrefixAffinityPlacer({ random, now: () => T0 }),
    before: [fakeCall({ id: 'call-0', prompt })],
    call: fakeCall({ prompt: `${prompt} again` }),
    // The home, and least-loaded's 16 for the balance guard.
    most: 17,
  },
  {
    name: 'kv-aware',
    create: () => createKvAwarePlacer({ random, now: () => T0 }),
    call: { ...fakeCall({ prompt }), cache: truth },
    // The two holders and least-loaded's 16.
    most: 18,
  },
];

describe('one decision on a 10,000-runner pool', () => {
  it.each(costCases)('reads at most $most loads for $name', ({ create, call, before = [], most }) => {
    const { runners, reads } = countingPool(10_000, LOAD);
    const placer = create();
    for (const earlier of before)
      placer.placed!(earlier, placer.order(earlier, runners)[Symbol.iterator]().next().value!);
    const start = reads();
    const first = placer.order(call, runners)[Symbol.iterator]().next().value;
    expect(first).toBeDefined();
    expect(reads() - start).toBeLessThanOrEqual(most);
  });

  it('reads every load once the walk asks past the first runner, for a placer that orders the rest by load', () => {
    const { runners, reads } = countingPool(10_000, LOAD);
    const order = createLeastLoadedPlacer({ random, now: () => T0 })
      .order(fakeCall(), runners)
      [Symbol.iterator]();
    order.next();
    order.next();
    expect(reads()).toBe(16 + 9_999);
  });

  it('returns the prefix-affinity home first once it served the prefix', () => {
    const { runners } = countingPool(10_000, LOAD);
    const placer = createPrefixAffinityPlacer({ random, now: () => T0 });
    const first = placer
      .order(fakeCall({ id: 'call-0', prompt }), runners)
      [Symbol.iterator]()
      .next().value!;
    placer.placed!(fakeCall({ id: 'call-0', prompt }), first);
    expect(
      placer
        .order(fakeCall({ prompt: `${prompt} again` }), runners)
        [Symbol.iterator]()
        .next().value,
    ).toBe(first);
  });

  it('returns the cheapest kv-aware holder first', () => {
    const { runners } = countingPool(10_000, LOAD);
    const placer = createKvAwarePlacer({ random, now: () => T0 });
    expect(
      placer
        .order({ ...fakeCall({ prompt }), cache: truth }, runners)
        [Symbol.iterator]()
        .next().value!.id,
    ).toBe('runner-00042');
  });
});
