import { describe, expect, it } from 'vitest';
import { benchCalls, fakeFleet } from '../../k6/driver/scenarios/scale.ts';
import {
  TRUTH_HOLDERS,
  TRUTH_PROMPT_BLOCKS,
  measureTruthDecision,
  truthOf,
} from '../../k6/driver/scenarios/scale-truth.ts';

describe('bench scale: kv-aware on cache truth', () => {
  it('builds the truth it says: four runners hold each context, and with a preamble every runner holds its start', () => {
    const runners = fakeFleet(100);
    const few = truthOf('four holders', runners);
    const holders = new Map<string, number>();
    few.index.leading(few.prompts[0]!, 16, holders);
    expect(holders.size).toBe(TRUTH_HOLDERS);
    expect(new Set(holders.values())).toEqual(new Set([400 * 16]));
    expect(few.prompts[0]).toHaveLength(TRUTH_PROMPT_BLOCKS);

    const shared = truthOf('shared preamble', runners);
    const beyond = new Map<string, number>();
    // The preamble is every runner's: the floor, and only the context's holders are listed.
    expect(shared.index.leading(shared.prompts[3]!, 16, beyond)).toBe(32 * 16);
    expect([...beyond.values()]).toEqual(Array(TRUTH_HOLDERS).fill(400 * 16));
  });

  it('times as many decisions as it is bounded to', async () => {
    const runners = fakeFleet(50);
    const sample = await measureTruthDecision('four holders', runners, benchCalls(4), {
      warmup: 0,
      maxCalls: 16,
      maxMs: 1_000,
      batch: 4,
    });
    expect(sample.calls).toBe(16);
    expect(sample.usPerCall).toBeGreaterThan(0);
  });
});
