import { describe, expect, it } from 'vitest';
import { EndedCalls, runnerLoad } from '../../../gateway/fleet/runner-load.ts';

describe('runnerLoad', () => {
  const report = { load: { slotsInUse: 3, slots: 4, queue: 2, kvCacheUsage: 0.5 }, at: 1_000 };

  it('is the in-flight count alone until a report comes', () => {
    expect(runnerLoad(2, undefined, new EndedCalls())).toEqual({ inFlight: 2 });
  });

  it('takes off the running count the calls of ours the report counted that ended since', () => {
    const ended = new EndedCalls();
    ended.record(900, 950); // ended before the report: the report already left it out
    ended.record(990, 1_010); // counted by the report, ended after it
    ended.record(1_005, 1_020); // sent after the report: never counted by it
    expect(runnerLoad(1, report, ended)).toEqual({
      inFlight: 1,
      slots: 4,
      reported: { running: 2, waiting: 2, kvCacheUsage: 0.5, at: 1_000 },
    });
  });

  it('never reads a running count below zero, and leaves out a KV use the runner did not report', () => {
    const ended = new EndedCalls();
    for (let i = 0; i < 5; i++) ended.record(999, 1_001 + i);
    const bare = { load: { slotsInUse: 3, slots: 4, queue: 0 }, at: 1_000 };
    expect(runnerLoad(0, bare, ended)).toEqual({
      inFlight: 0,
      slots: 4,
      reported: { running: 0, waiting: 0, at: 1_000 },
    });
  });
});

describe('EndedCalls', () => {
  it('counts the calls sent by a report’s time that ended after it', () => {
    const ended = new EndedCalls();
    ended.record(0, 50); // ended before the report at 100: already not in it
    ended.record(10, 150); // running at 100, ended since: counts
    ended.record(120, 160); // sent after the report: never in it
    ended.record(100, 170); // sent at the report's time: counts
    expect(ended.since(100)).toBe(2);
    expect(ended.since(155)).toBe(2);
    expect(ended.since(200)).toBe(0);
  });

  it('forgets calls older than keepMs, and past keepMax', () => {
    const kept = new EndedCalls(1_000, 100);
    kept.record(0, 10);
    expect(kept.since(0)).toBe(1);
    const byAge = new EndedCalls(1_000, 100);
    byAge.record(0, 10);
    byAge.record(5_000, 5_010);
    // The first one ended 5 s before the last, past keepMs: gone, so it no longer counts from 0.
    expect(byAge.since(0)).toBe(0);
    expect(byAge.since(5_000)).toBe(1);
    const byCount = new EndedCalls(60_000, 3);
    for (let i = 0; i < 5; i++) byCount.record(0, 10 + i);
    expect(byCount.since(0)).toBe(3);
  });

  it('counts right across thousands of calls, as forgotten ones are cut off in batches', () => {
    const ended = new EndedCalls(60_000, 100);
    // Call i is sent at i and ends at i + 50: the last 100 are remembered.
    for (let i = 0; i < 5_000; i++) {
      ended.record(i, i + 50);
      // Sent by i (all recorded so far) and ended after i: those ending in (i, i + 50], at most 100 back.
      if (i % 997 === 0) expect(ended.since(i)).toBe(Math.min(i + 1, 50));
    }
    // Of the last 100 (sent 4900..4999), those sent by 4960 that end after it: sent 4911..4960.
    expect(ended.since(4_960)).toBe(50);
    expect(ended.since(4_900)).toBe(1);
  });
});
