import { describe, expect, it } from 'vitest';
import { distribution } from '../../k6/driver/index.ts';
import { streamingRatios } from '../../k6/driver/scenarios/streaming.ts';
import type { StreamingFigures } from '../../k6/driver/scenarios/streaming.ts';
import { countEvents, gapsOf } from '../../k6/driver/stream-record.ts';

describe('gapsOf', () => {
  it('returns the differences between consecutive arrivals', () => {
    expect(gapsOf([50, 70, 95, 95])).toEqual([20, 25, 0]);
  });

  it('returns no gaps for zero or one arrival', () => {
    expect(gapsOf([])).toEqual([]);
    expect(gapsOf([3])).toEqual([]);
  });
});

describe('countEvents', () => {
  it('returns one per data line that starts an event', () => {
    expect(countEvents('data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n')).toBe(3);
  });

  it('returns 0 for the tail of an event split across chunks, and ignores data: inside a payload', () => {
    expect(countEvents('1}\n\n')).toBe(0);
    expect(countEvents('data: {"text":"data: no"}\n\n')).toBe(1);
  });
});

describe('streamingRatios', () => {
  const figures = (target: string, first: number[], gaps: number[]): StreamingFigures => ({
    target,
    calls: first.length,
    errors: {},
    headers: distribution(first),
    firstChunk: distribution(first),
    gap: distribution(gaps),
    eventsPerChunk: 1,
  });

  it('returns subject over baseline for the first chunk and the gap', () => {
    const rows = streamingRatios([figures('direct', [50], [20]), figures('sluice', [55], [20])], 'sluice', 'direct');
    expect(rows.map((r) => [r.measure, r.p50])).toEqual([
      ['first chunk', 1.1],
      ['gap', 1],
    ]);
  });

  it('returns no rows when a target is missing', () => {
    expect(streamingRatios([figures('direct', [50], [20])], 'sluice', 'direct')).toEqual([]);
  });
});
