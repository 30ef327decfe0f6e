import { describe, expect, it } from 'vitest';
import { createFixedTiming, playTokens } from '../../../../runner/engines/sim/index.ts';

const timeouts = (): number => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;

describe('playTokens', () => {
  it('emits every token of a fixed schedule in order, the first after ttftMs', async () => {
    const schedule = createFixedTiming({ ttftMs: 15, itlMs: 3 }).plan({ promptTokens: 1, outputTokens: 4, running: 1 });
    const started = performance.now();
    const seen: Array<[number, number]> = [];
    const outcome = await playTokens(schedule, (index) => seen.push([index, performance.now() - started]), new AbortController().signal);
    expect(outcome).toBe('done');
    expect(seen.map(([index]) => index)).toEqual([0, 1, 2, 3]);
    expect(seen[0]![1]).toBeGreaterThanOrEqual(14);
    expect(seen[3]![1]).toBeGreaterThanOrEqual(14 + 3 * 3);
  });

  it('stops at once on abort and leaves no timer behind', async () => {
    const schedule = createFixedTiming({ ttftMs: 60_000, itlMs: 1 }).plan({ promptTokens: 1, outputTokens: 4, running: 1 });
    const before = timeouts();
    const controller = new AbortController();
    const onToken = (): void => {
      throw new Error('no token may be emitted');
    };
    const playing = playTokens(schedule, onToken, controller.signal);
    expect(timeouts()).toBe(before + 1);
    controller.abort();
    expect(await playing).toBe('aborted');
    expect(timeouts()).toBe(before);
  });
});
