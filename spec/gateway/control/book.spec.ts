/**
 * The reconciler's book (gateway/control/book.ts): what a clone shares with its original (nothing
 * a plan's draft may change), what a new leader's book keeps (the history), and how an
 * operation's failures end in a dead letter under the book's limits.
 */
import { describe, expect, it } from 'vitest';
import type { ReconcileAction } from '../../../gateway/control/actions.ts';
import { Book } from '../../../gateway/control/book.ts';
import { reconcilerDefaults } from '../../../gateway/control/reconciler-options.ts';
import { T0 } from '../../placer/fake.ts';

const order = (replica: string) => ({
  replica,
  model: 'm',
  profile: { kind: 'sim', model: 'm', gpus: 0, args: [], env: {} },
  revision: '0123456789abcdef',
});

/** Attempt `attempt` at m's start as `replica` on `runner` failed at `at`, exiting with code `attempt`. */
const failedStart = (
  replica: string,
  runner: string,
  attempt: number,
  at: number,
  output?: string[],
): ReconcileAction => ({
  kind: 'start-failed',
  model: 'm',
  replica,
  runner,
  attempt,
  reason: `exit code ${attempt}`,
  output,
  at,
});

/** A book with m-1 adopted on r1, a start ordered as m-2 on r2, a scale event, a block and a dead letter. */
function busy(): Book {
  const book = new Book({ ...reconcilerDefaults, startAttempts: 2 });
  const actions: ReconcileAction[] = [
    { kind: 'adopt', orders: [{ runner: 'r1', order: order('m-1') }], at: T0 },
    { kind: 'start', model: 'm', id: 1, at: T0 },
    { kind: 'order', model: 'm', id: 1, runner: 'r2', order: order('m-2'), at: T0, attempt: 1 },
    { kind: 'scale', model: 'm', from: 1, to: 2, reason: 'minReplicas 2', at: T0 },
    { kind: 'size', model: 'm', wanted: 2, memory: { holdUntil: T0, belowSince: undefined } },
    { kind: 'dead-letter', model: 'm', attempts: [], at: T0, blocked: { updatedAt: T0 - 1, reason: 'a start failed' } },
  ];
  for (const action of actions) book.apply(action);
  return book;
}

describe('Book', () => {
  it('gives a clone to draft on: applying to it leaves the original as it was', () => {
    const book = busy();
    const draft = book.clone();
    draft.apply(failedStart('m-2', 'r2', 1, T0 + 1));
    draft.apply({ kind: 'stop', model: 'm', replica: 'm-1', runner: 'r1', state: 'ready', reason: 'idle' });
    draft.apply({ kind: 'forget', model: 'm', stopped: 0 });
    expect(book.orders().map(([runner, e]) => [runner, e.order.replica])).toEqual([
      ['r1', 'm-1'],
      ['r2', 'm-2'],
    ]);
    expect(book.pending('m').map(({ id, op }) => [id, op.inFlight?.replica, op.attempts.length])).toEqual([
      [1, 'm-2', 0],
    ]);
    expect([
      book.wanted('m'),
      book.scaleEvents('m').length,
      book.deadLetters('m').length,
      book.blocked('m')?.reason,
    ]).toEqual([2, 1, 1, 'a start failed']);
    expect(draft.models()).toEqual(new Set());
  });

  it("gives a new leader the history (dead letters, blocks, scale events) and none of the old leader's orders, starts or memory", () => {
    const next = busy().handover();
    expect([
      next.adopted,
      next.orders(),
      next.pending('m'),
      next.wanted('m'),
      next.memory('m').belowSince,
      next.memory('m').holdUntil,
    ]).toEqual([false, [], [], undefined, undefined, -Infinity]);
    expect([next.scaleEvents('m').length, next.deadLetters('m').length, next.blocked('m')?.reason]).toEqual([
      1,
      1,
      'a start failed',
    ]);
  });

  it("retries a failed start until its last attempt under the book's startAttempts, then drops it", () => {
    const book = busy();
    book.apply(failedStart('m-2', 'r2', 1, T0 + 1, ['tail']));
    expect(book.order('r2')).toBeUndefined();
    expect(book.pending('m').map(({ op }) => [op.attempts.length, op.nextAttemptAt])).toEqual([
      [1, T0 + 1 + reconcilerDefaults.startBackoffBase],
    ]);
    book.apply({ kind: 'order', model: 'm', id: 1, runner: 'r3', order: order('m-3'), at: T0 + 2, attempt: 2 });
    book.apply(failedStart('m-3', 'r3', 2, T0 + 3));
    expect(book.pending('m')).toEqual([]);
  });
});
