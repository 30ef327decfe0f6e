/** runner/seen-calls.ts: the call ids a runner has taken, so a signed call cannot be replayed. */
import { describe, expect, it } from 'vitest';
import { SeenCalls } from '../../runner/seen-calls.ts';

const NOW = 1_800_000_000_000;

describe('SeenCalls', () => {
  it('refuses a claimed id until its time is up, then takes it again', () => {
    let now = NOW;
    const seen = new SeenCalls(() => now);
    expect(seen.claim('a', NOW + 1000)).toBe(true);
    expect(seen.claim('a', NOW + 1000)).toBe(false);
    expect(seen.claim('b', NOW + 1000)).toBe(true);
    now = NOW + 1001;
    expect(seen.claim('a', NOW + 5000)).toBe(true);
  });

  it('takes a released id again at once: its call ended without running', () => {
    const seen = new SeenCalls(() => NOW);
    expect(seen.claim('a', NOW + 1000)).toBe(true);
    seen.release('a');
    expect(seen.claim('a', NOW + 1000)).toBe(true);
  });

  it('keeps at most its bound of ids, the oldest going first', () => {
    const seen = new SeenCalls(() => NOW, 2);
    seen.claim('a', NOW + 1000);
    seen.claim('b', NOW + 1000);
    seen.claim('c', NOW + 1000);
    expect(seen.claim('a', NOW + 1000)).toBe(true);
    expect(seen.claim('c', NOW + 1000)).toBe(false);
  });
});
