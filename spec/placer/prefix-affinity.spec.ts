import { describe, expect, it } from 'vitest';
import {
  PlacerConfigError,
  createPrefixAffinityPlacer,
  type Runner,
  type RunnerCall,
  type RunnerLoad,
} from '../../placer/index.ts';
import { seededRandom } from '../../placer/kernel/index.ts';
import { Fleet, type Outcome, fakeCall, fakePool, placeEach, tally } from './fake.ts';
import { FakeLoads, seeded, sequence, slotsBusy } from './fake-load.ts';

// 640 characters: ten 64-character blocks, about 94% of each prompt below.
const system = 'You are the support assistant for a GPU cloud. Be brief and exact. '.repeat(10).slice(0, 640);
const questions = [
  'How do I resize a volume?',
  'Why was my job preempted?',
  'Which regions have H100s?',
  'Can I pause a node?',
];

/** Calls whose prompts share `prefix`, each with its own question, ids in order. */
function chats(n: number, prefix = system, fn = 'llama-3-8b'): RunnerCall[] {
  return Array.from({ length: n }, (_, i) =>
    fakeCall({ id: `call-${i + 1}`, fn, prompt: `${prefix}\nuser: ${questions[i % questions.length]} (#${i + 1})` }),
  );
}

interface PickCase {
  name: string;
  loads: Record<string, RunnerLoad>;
  runners: Record<string, readonly Outcome[]>;
  calls: RunnerCall[];
  hold?: boolean;
  offers: string[];
  placed: string[];
}

const free = { a: ['placed'], b: ['placed'], c: ['placed'] } as const;
// Within the guard: the gap is 0.25, not above it.
const balanced = { a: slotsBusy(2, 8), b: slotsBusy(1, 8), c: slotsBusy(0, 8) };

// The calls' key (session-1) has c as its home among a, b and c, so least-loaded sends it to c
// whenever c is within its tie band of the least loaded.
const pickCases: PickCase[] = [
  {
    // The first call has nothing to match and goes least-loaded: c, the least loaded.
    name: 'calls share a system prompt and the pool is balanced',
    loads: balanced,
    runners: free,
    calls: chats(3),
    offers: ['c', 'c', 'c'],
    placed: ['c', 'c', 'c'],
  },
  {
    // c turns call 2 down, so b (next least loaded) serves it and the prefix now points at b.
    name: 'the affinity runner turns a call down',
    loads: balanced,
    runners: { ...free, c: ['placed', 'busy'] },
    calls: chats(3),
    offers: ['c', 'c', 'b', 'b'],
    placed: ['c', 'b', 'b'],
  },
  {
    // 64 shared characters of about 500: below 0.3, so both go least-loaded: c.
    name: 'the shared prefix is too small a share of the prompt',
    loads: balanced,
    runners: free,
    calls: [0, 1].map((i) => fakeCall({ id: `call-${i + 1}`, prompt: system.slice(0, 64) + String(i).repeat(400) })),
    offers: ['c', 'c'],
    placed: ['c', 'c'],
  },
  {
    name: 'calls carry no prompt',
    loads: balanced,
    runners: free,
    calls: [fakeCall(), fakeCall({ id: 'call-2', prompt: '' })],
    offers: ['c', 'c'],
    placed: ['c', 'c'],
  },
  {
    // Two slots each, calls held. 1: no match, every runner idle: c, the key's home. 2: home c at
    // 0.5 is not more than 0.5 above the least loaded (0), so c again. 3: c full at 1.0 trips the
    // guard, least-loaded gives a. 4: the prefix's latest runner a is at 0.5, within the gap: a.
    // 5: a full trips it: b.
    name: 'held calls fill the affinity runner until the guard trips',
    loads: { a: slotsBusy(0, 2), b: slotsBusy(0, 2), c: slotsBusy(0, 2) },
    runners: free,
    hold: true,
    calls: chats(5),
    offers: ['c', 'c', 'a', 'a', 'b'],
    placed: ['c', 'c', 'a', 'a', 'b'],
  },
];

describe('createPrefixAffinityPlacer', () => {
  it.each(pickCases)('returns the expected offer order when $name', async (c) => {
    const fleet = new Fleet({ loads: new FakeLoads(c.loads), hold: c.hold ?? false });
    const placer = createPrefixAffinityPlacer({ random: () => expect.unreachable('a small pool draws nothing') });
    const placed = await placeEach(placer, fakePool(fleet.runners(c.runners)), c.calls);
    expect(fleet.offers).toEqual(c.offers);
    expect(placed).toEqual(c.placed);
  });

  it('returns one runner for 200 calls sharing a system prompt while the pool stays balanced', async () => {
    const fleet = new Fleet({ loads: new FakeLoads(balanced) });
    const placer = createPrefixAffinityPlacer({ random: seeded(11) });
    const placed = await placeEach(placer, fakePool(fleet.runners(free)), chats(200));
    expect(Object.keys(tally(placed))).toHaveLength(1);
  });

  it('returns each tenant to its own first runner when several system prompts interleave', async () => {
    const idle = slotsBusy(0, 8);
    const fleet = new Fleet({ loads: new FakeLoads({ a: idle, b: idle, c: idle, d: idle }) });
    const placer = createPrefixAffinityPlacer({ random: seeded(12) });
    const tenants = ['Acme', 'Globex', 'Initech', 'Umbrella', 'Hooli'].map((name) => `Tenant ${name}. ${system}`);
    const calls = Array.from({ length: 250 }, (_, i) => ({ ...chats(1, tenants[i % 5]!)[0]!, id: `call-${i}` }));
    const placed = await placeEach(placer, fakePool(fleet.runners({ ...free, d: ['placed'] })), calls);
    for (let t = 0; t < 5; t++) {
      expect(new Set(placed.filter((_, i) => i % 5 === t)).size).toBe(1);
    }
  });

  it('moves a prefix off its runner while that runner is saturated, and back to affinity once balanced', async () => {
    const loads = new FakeLoads(balanced);
    const fleet = new Fleet({ loads });
    const pool = fakePool(fleet.runners(free));
    const placer = createPrefixAffinityPlacer({ random: seeded(13) });
    const [home] = await placeEach(placer, pool, chats(1));
    loads.set(home!, slotsBusy(8, 8));
    const during = await placeEach(placer, pool, chats(100));
    expect(during).not.toContain(home);
    loads.set(home!, slotsBusy(1, 8));
    const after = await placeEach(placer, pool, chats(50));
    // Affinity again, to whichever runner served the prefix last.
    expect(new Set(after)).toEqual(new Set([during.at(-1)]));
  });

  it('returns least-loaded order for a prefix whose runner was forgotten', async () => {
    // a is the most loaded but within the guard, so only affinity puts it first.
    const fleet = new Fleet({ loads: new FakeLoads({ a: slotsBusy(2, 8), b: slotsBusy(0, 8), c: slotsBusy(1, 8) }) });
    const runners = fleet.runners(free);
    const placer = createPrefixAffinityPlacer({ random: seeded(14) });
    const [call] = chats(1);
    placer.placed?.(call!, runners[0]!);
    expect([...placer.order(call!, runners)][0]!.id).toBe('a');
    placer.forget?.(['a']);
    for (let i = 0; i < 50; i++) expect([...placer.order(call!, runners)][0]!.id).not.toBe('a');
  });

  it('prefers the runner caching the prompt, even when saturated, and none for a prompt no runner served or one that left', () => {
    const fleet = new Fleet({ loads: new FakeLoads({ a: slotsBusy(8, 8), b: slotsBusy(0, 8), c: slotsBusy(1, 8) }) });
    const runners = fleet.runners(free);
    const placer = createPrefixAffinityPlacer({ random: seeded(15) });
    const [first, second] = chats(2);
    expect(placer.preferred?.(first!, runners)).toBeUndefined();
    placer.placed?.(first!, runners[0]!);
    // a is full, so order() leaves it for least-loaded; the preference is still a's cache.
    expect([...placer.order(second!, runners)][0]!.id).not.toBe('a');
    expect(placer.preferred?.(second!, runners)).toBe('a');
    expect(
      placer.preferred?.(fakeCall({ id: 'other', prompt: 'nothing like it '.repeat(40) }), runners),
    ).toBeUndefined();
    placer.forget?.(['a']);
    expect(placer.preferred?.(second!, runners)).toBeUndefined();
  });

  it('returns least-loaded order when the affinity runner is not listed for the call', () => {
    const fleet = new Fleet({ loads: new FakeLoads({ b: slotsBusy(1, 8), c: slotsBusy(0, 8) }) });
    const [a, b, c] = fleet.runners(free);
    const placer = createPrefixAffinityPlacer({ random: sequence([0, 0]) });
    const [call] = chats(1);
    placer.placed?.(call!, a!);
    expect([...placer.order(call!, [b!, c!])].map((r) => r.id)).toEqual(['c', 'b']);
  });

  it('returns no affinity across models even for the same prompt', () => {
    const fleet = new Fleet({ loads: new FakeLoads({ a: slotsBusy(2, 8), b: slotsBusy(0, 8) }) });
    const runners = fleet.runners({ a: ['placed'], b: ['placed'] });
    const placer = createPrefixAffinityPlacer({ random: sequence([0, 0]) });
    placer.placed?.(chats(1, system, 'llama-3-8b')[0]!, runners[0]!);
    expect([...placer.order(chats(1, system, 'llama-3-8b')[0]!, runners)][0]!.id).toBe('a');
    expect([...placer.order(chats(1, system, 'qwen-2.5-7b')[0]!, runners)][0]!.id).toBe('b');
  });

  it('returns a placer named prefix-affinity when created', () => {
    expect(createPrefixAffinityPlacer().name).toBe('prefix-affinity');
  });

  it.each([
    [{ blockSize: 0 }, 'blockSize must be a positive integer, got 0'],
    [{ maxBlocks: Number.POSITIVE_INFINITY }, 'maxBlocks must be a positive integer, got Infinity'],
    [{ maxBlocks: 20_000_000 }, 'maxBlocks must be at most 10000000, got 20000000'],
    [{ minMatchRatio: 1.5 }, 'minMatchRatio must be at most 1, got 1.5'],
    [{ balanceAbsThreshold: -1 }, 'balanceAbsThreshold must be at least 0, got -1'],
    [{ balanceRelThreshold: 0.5 }, 'balanceRelThreshold must be at least 1, got 0.5'],
    [{ now: 5 }, 'now must be a function, got 5'],
  ])('throws PlacerConfigError naming the option when given %o', (options, message) => {
    expect(() => createPrefixAffinityPlacer(options as never)).toThrow(new PlacerConfigError(message));
  });
});

describe('createPrefixAffinityPlacer decisions', () => {
  // Chat sessions over four system prompts (English, French, Chinese, emoji across block
  // boundaries), two models, turns that resend the history, loads that move, and an index small
  // enough to evict. The expected runners pin every decision of the rules as they are (the index,
  // the guard, least-loaded's scan with ties to the key's home): a change to any shows here.
  const systems = [
    'You are the support assistant for a GPU cloud. Be brief and exact. '.repeat(6),
    'Tu es un assistant précis; réponds en français, sans détour. Ça marche? '.repeat(5),
    '你是一个乐于助人的助手。请简洁地回答问题，并给出来源。'.repeat(12),
    `${'x'.repeat(63)}😀 emoji straddle the block boundary 🚀🚀 and keep going. `.repeat(4),
  ];
  const expected =
    'r3 r2 r0 r4 r2 r2 r4 r0 r2 r4 r3 r0 r4 r0 r1 r4 r3 r1 r2 r1 r1 r5 r2 r3 r3 r0 r4 r4 r0 r5 ' +
    'r1 r5 r1 r4 r0 r4 r1 r0 r5 r1 r5 r1 r4 r0 r2 r5 r4 r1 r4 r0 r4 r2 r2 r2 r0 r0 r5 r3 r0 r5';

  it('returns the same first runner for every call of a fixed workload', () => {
    const random = seededRandom(12);
    const loads = new Map<string, RunnerLoad>();
    const runners: Runner<string>[] = Array.from({ length: 6 }, (_, i) => ({
      id: `r${i}`,
      tryExec: async () => ({ kind: 'placed', value: 'ok' }) as const,
      load: () => loads.get(`r${i}`),
    }));
    for (const r of runners) loads.set(r.id, { inFlight: 0, slots: 8 });
    const placer = createPrefixAffinityPlacer({ random: seededRandom(7), now: () => 0, maxBlocks: 120 });
    const history = new Map<number, string>();
    const firsts: string[] = [];
    for (let step = 0; step < 60; step++) {
      const session = Math.floor(random() * 12);
      const before = history.get(session) ?? systems[session % systems.length]!;
      const prompt = `${before}\nuser: question ${step} from session ${session}${session % 5 === 0 ? ' — ünïcödé ✓' : ''}\nassistant: answer ${step}`;
      history.set(session, prompt);
      const call = fakeCall({
        id: `c${step}`,
        fn: session % 7 === 3 ? 'model-b' : 'model-a',
        key: `s${session}`,
        prompt,
      });
      const first = placer.order(call, runners)[Symbol.iterator]().next().value as Runner<string>;
      placer.placed!(call, first);
      firsts.push(first.id);
      const load = loads.get(first.id)!;
      loads.set(first.id, { inFlight: (load.inFlight + 1) % 9, slots: 8 });
      if (step % 4 === 3) loads.set(runners[Math.floor(random() * 6)]!.id, { inFlight: 0, slots: 8 });
    }
    expect(firsts.join(' ')).toBe(expected);
  });
});
