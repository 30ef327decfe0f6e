/**
 * Start operations (gateway/control/operations.ts): the backoff, an attempt's fate from its
 * runner's report, the attempt count and the dead-letter list's bound.
 */
import { describe, expect, it } from 'vitest';
import { DeadLetters, StartOperation, attemptOutcome, startBackoff } from '../../../gateway/control/operations.ts';
import { reconcilerDefaults } from '../../../gateway/control/reconciler-options.ts';
import { runner } from './fake-fleet.ts';

const attempt = { runner: 'r1', replica: 'm-1', orderedAt: 1_000 };

describe('startBackoff', () => {
  it('doubles from the base and stops at the cap, without overflowing', () => {
    const { startBackoffBase: base, startBackoffCap: cap } = reconcilerDefaults;
    expect([1, 2, 3, 4, 5, 6, 7, 10].map((n) => startBackoff(n, base, cap) / 1000)).toEqual([
      30, 60, 120, 240, 480, 900, 900, 900,
    ]);
    expect(startBackoff(5_000, base, cap)).toBe(cap);
  });
});

describe('attemptOutcome', () => {
  it('reads ready, failed with reason and output, stopped, lost and timed out', () => {
    const r = runner('r1');
    expect(attemptOutcome(attempt, r, 1_000, 30_000)).toEqual({ kind: 'waiting' });
    expect(attemptOutcome(attempt, r, 31_000, 30_000)).toEqual({
      kind: 'failed',
      reason: 'the runner did not report the replica within 30 s of the order',
    });
    r.hosted = { replica: 'm-1', model: 'm', state: 'starting', since: 2_000 };
    // Reported: the runner's own start timeout bounds it now.
    expect(attemptOutcome(attempt, r, 100_000, 30_000)).toEqual({ kind: 'waiting' });
    r.hosted = {
      replica: 'm-1',
      model: 'm',
      state: 'failed',
      since: 3_000,
      reason: 'exited with code 1',
      output: ['CUDA out of memory'],
    };
    expect(attemptOutcome(attempt, r, 4_000, 30_000)).toEqual({
      kind: 'failed',
      reason: 'exited with code 1',
      output: ['CUDA out of memory'],
    });
    r.hosted = { replica: 'm-1', model: 'm', state: 'stopped', since: 3_000 };
    expect(attemptOutcome(attempt, r, 4_000, 30_000)).toMatchObject({
      kind: 'failed',
      reason: 'the runner reported the replica stopped before it was ready',
    });
    r.hosted = { replica: 'm-1', model: 'm', state: 'ready', since: 3_000 };
    expect(attemptOutcome(attempt, r, 4_000, 30_000)).toEqual({ kind: 'ready' });
    // Another replica on the runner is not this one.
    r.hosted = { replica: 'm-0', model: 'm', state: 'ready', since: 3_000 };
    expect(attemptOutcome(attempt, r, 4_000, 30_000)).toEqual({ kind: 'waiting' });
    r.placeable = false;
    expect(attemptOutcome(attempt, r, 4_000, 30_000)).toMatchObject({
      kind: 'failed',
      reason: expect.stringMatching(/^runner lost: it stopped being placeable/),
    });
    expect(attemptOutcome(attempt, undefined, 4_000, 30_000)).toMatchObject({
      kind: 'failed',
      reason: expect.stringMatching(/^runner lost: it left the fleet/),
    });
  });
});

describe('StartOperation', () => {
  it('counts attempts, sets the next one after the backoff, and is spent after startAttempts', () => {
    const steps = { startBackoffBase: 10, startBackoffCap: 25, startAttempts: 3 };
    const op = new StartOperation('m', 100);
    expect(op.due(100)).toBe(true);
    op.order('r1', 'm-1', 100);
    expect(op.due(100)).toBe(false);
    expect(op.fail('boom', ['tail'], 150, steps)).toBe('retry');
    expect(op.nextAttemptAt).toBe(160);
    expect(op.due(159)).toBe(false);
    expect(op.due(160)).toBe(true);
    op.order('r2', 'm-2', 160);
    expect(op.fail('bang', undefined, 170, steps)).toBe('retry');
    expect(op.nextAttemptAt).toBe(190);
    op.order('r1', 'm-3', 190);
    expect(op.fail('again', undefined, 200, steps)).toBe('spent');
    expect(op.attempts).toEqual([
      { runner: 'r1', replica: 'm-1', reason: 'boom', output: ['tail'], at: 150 },
      { runner: 'r2', replica: 'm-2', reason: 'bang', at: 170 },
      { runner: 'r1', replica: 'm-3', reason: 'again', at: 200 },
    ]);
    expect([...op.failedOn]).toEqual([
      ['r1', 200],
      ['r2', 170],
    ]);
    expect(() => op.fail('none in flight', undefined, 300, steps)).toThrow();
  });
});

describe('DeadLetters', () => {
  it('keeps the last `keep` letters per model, and forgets a model', () => {
    const letters = new DeadLetters(2);
    for (const at of [1, 2, 3]) letters.add({ model: 'm', at, attempts: [] });
    letters.add({ model: 'n', at: 4, attempts: [] });
    expect(letters.of('m').map((l) => l.at)).toEqual([2, 3]);
    expect(letters.of('n').map((l) => l.at)).toEqual([4]);
    letters.forget('m');
    expect(letters.of('m')).toEqual([]);
    expect(letters.models()).toEqual(['n']);
  });
});
