import { describe, expect, it } from 'vitest';
import { UploadBudget, notReadyReasons, readinessNotes } from '../../../gateway/calls/admission.ts';

describe('UploadBudget', () => {
  it('refuses a client past its share with client-full while others are still admitted', () => {
    const budget = new UploadBudget({ max: 10, perClient: 2 });
    expect(budget.admit('staller').kind).toBe('admitted');
    expect(budget.admit('staller').kind).toBe('admitted');
    expect(budget.admit('staller').kind).toBe('client-full');
    expect(budget.admit('other').kind).toBe('admitted');
    expect(budget.size).toBe(3);
    expect(budget.full).toBe(false);
  });

  it('refuses everyone with full once the budget is taken, and admits again after a release', () => {
    const budget = new UploadBudget({ max: 2, perClient: 5 });
    const first = budget.admit('a');
    budget.admit('b');
    expect(budget.full).toBe(true);
    expect(budget.admit('c').kind).toBe('full');
    if (first.kind !== 'admitted') throw new Error('first upload was not admitted');
    first.release();
    expect(budget.full).toBe(false);
    expect(budget.admit('c').kind).toBe('admitted');
  });

  it('answers client-full before full when both hold', () => {
    const budget = new UploadBudget({ max: 2, perClient: 2 });
    budget.admit('a');
    budget.admit('a');
    expect(budget.admit('a').kind).toBe('client-full');
    expect(budget.admit('b').kind).toBe('full');
  });

  it('counts a release once however often it is called, and forgets the client after', () => {
    const budget = new UploadBudget({ max: 3, perClient: 3 });
    const one = budget.admit('a');
    budget.admit('a');
    if (one.kind !== 'admitted') throw new Error('not admitted');
    one.release();
    one.release();
    expect(budget.size).toBe(1);
    expect(budget.clients).toBe(1);
  });

  it('leaves nothing counted after every admitted upload is released', () => {
    const budget = new UploadBudget({ max: 100, perClient: 10 });
    const admitted = Array.from({ length: 50 }, (_, i) => budget.admit(`client-${i % 7}`));
    for (const a of admitted) if (a.kind === 'admitted') a.release();
    expect(budget.size).toBe(0);
    expect(budget.clients).toBe(0);
  });
});

/** A gateway that takes calls: a ready runner, room for more, its store answering. */
const READY = {
  closing: false,
  inFlight: 0,
  maxInFlight: 10,
  uploadsFull: false,
  runnersReady: true,
  replicasCanStart: false,
  storeReady: true,
};

describe('notReadyReasons', () => {
  const ready = READY;

  it('returns no reason when a new call would be taken', () => {
    expect(notReadyReasons(ready)).toEqual([]);
    expect(notReadyReasons({ ...ready, inFlight: 9 })).toEqual([]);
  });

  it('returns each reason that holds, in a fixed order', () => {
    expect(notReadyReasons({ ...ready, inFlight: 10 })).toEqual(['max_in_flight']);
    expect(notReadyReasons({ ...ready, uploadsFull: true })).toEqual(['uploads_full']);
    expect(notReadyReasons({ ...ready, storeReady: false })).toEqual(['store_unavailable']);
    expect(
      notReadyReasons({
        closing: true,
        inFlight: 12,
        maxInFlight: 10,
        uploadsFull: true,
        runnersReady: false,
        replicasCanStart: false,
        storeReady: false,
      }),
    ).toEqual(['closing', 'max_in_flight', 'uploads_full', 'no_ready_runner', 'store_unavailable']);
  });
});

describe('readiness with no ready runner', () => {
  const state = { ...READY, runnersReady: false };

  it('returns no_ready_runner when no deployment can start a replica either', () => {
    expect(notReadyReasons(state)).toEqual(['no_ready_runner']);
    expect(readinessNotes(state)).toEqual([]);
  });

  it('returns ready, with the note no_replica_yet, when a deployment can start one', () => {
    const atZero = { ...state, replicasCanStart: true };
    expect(notReadyReasons(atZero)).toEqual([]);
    expect(readinessNotes(atZero)).toEqual(['no_replica_yet']);
  });

  it('returns no note once a runner is ready', () => {
    expect(readinessNotes({ ...state, runnersReady: true, replicasCanStart: true })).toEqual([]);
  });
});
