import { describe, expect, it } from 'vitest';
import { formatMs } from '../../../placer/kernel/durations.ts';

describe('formatMs', () => {
  it.each([
    [991.4951171875, '991 ms'],
    [0.4, '0 ms'],
    [1499.5, '1500 ms'],
    [30_000, '30000 ms'],
  ])('writes %s as %s', (ms, text) => {
    expect(formatMs(ms)).toBe(text);
  });
});
