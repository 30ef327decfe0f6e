import { describe, expect, it } from 'vitest';
import { createPrefixAffinityPlacer } from '../../../placer/index.ts';
import type { Runner, RunnerCall } from '../../../placer/index.ts';
import { fakeCall } from '../fake.ts';

// 640 characters of shared prefix: ten 64-character blocks, most of each prompt.
const system = 'You are the support assistant for a GPU cloud. Be brief and exact. '.repeat(10).slice(0, 640);
const runners: Runner[] = ['a', 'b', 'c'].map((id) => ({
  id,
  tryExec: async () => ({ kind: 'placed', value: undefined }),
}));
let n = 0;
const chat = (prefix = system): RunnerCall => {
  n++;
  return fakeCall({ id: `call-${n}`, prompt: `${prefix}\nuser: question ${n}` });
};

/** A placer whose index points `system` at runner a, through a call that order() put there. */
function learned() {
  const placer = createPrefixAffinityPlacer({ now: () => 0 });
  placer.placed!(chat(), runners[0]!);
  const call = chat();
  expect([...placer.order(call, runners)][0]?.id).toBe('a');
  placer.placed!(call, runners[0]!);
  return { placer, call };
}

describe('prefix-affinity cached()', () => {
  it('stops pointing at a runner past what its engine reported holding', () => {
    const { placer, call } = learned();
    placer.cached!(call, 'a', { cachedTokens: 0, promptTokens: 180 });
    expect(placer.preferred!(chat(), runners)).toBeUndefined();
  });

  it('keeps the prefix the engine did hold', () => {
    const { placer, call } = learned();
    // 80 % of the prompt was cached: the prefix (about 94 % of the prompt) is cut to 80 %, still
    // above the match threshold.
    placer.cached!(call, 'a', { cachedTokens: 144, promptTokens: 180 });
    expect(placer.preferred!(chat(), runners)).toBe('a');
    placer.cached!(call, 'a', { cachedTokens: 18, promptTokens: 180 });
    expect(placer.preferred!(chat(), runners)).toBeUndefined();
  });

  it('changes nothing when the engine held all the index said, or the report is of another runner', () => {
    const { placer, call } = learned();
    placer.cached!(call, 'a', { cachedTokens: 180, promptTokens: 180 });
    placer.cached!(call, 'b', { cachedTokens: 0, promptTokens: 180 });
    // Without the prompt's length there is no share to cut at.
    placer.cached!(call, 'a', { cachedTokens: 0 });
    expect(placer.preferred!(chat(), runners)).toBe('a');
  });

  it('does not unlearn a first call, which had nothing cached to predict', () => {
    const placer = createPrefixAffinityPlacer({ now: () => 0 });
    const first = chat();
    [...placer.order(first, runners)];
    placer.placed!(first, runners[1]!);
    placer.cached!(first, 'b', { cachedTokens: 0, promptTokens: 180 });
    expect(placer.preferred!(chat(), runners)).toBe('b');
  });
});
