/**
 * The reconciler's plan (gateway/control/plan.ts) as tables: each row a situation (the
 * deployments, the runners as they report, the book as earlier passes left it, the load) and
 * the actions one pass takes, in order. The book is built from the actions that would have made
 * it; `seen` and `size` rows, pure bookkeeping, are left out of the expected lines.
 */
import { describe, expect, it } from 'vitest';
import type { ReconcileAction } from '../../../gateway/control/actions.ts';
import { Book } from '../../../gateway/control/book.ts';
import { deploymentRevision } from '../../../gateway/control/deployments.ts';
import type { EngineOrder } from '../../../runner/protocol/index.ts';
import { plan } from '../../../gateway/control/plan.ts';
import type { DeployedModel } from '../../../gateway/control/plan.ts';
import { reconcilerDefaults } from '../../../gateway/control/reconciler-options.ts';
import type { ReconcilerConfig } from '../../../gateway/control/reconciler-options.ts';
import { T0 } from '../../placer/fake.ts';
import { deployment, host, runner } from './fake-fleet.ts';
import type { MutableRunner } from './fake-fleet.ts';

/** When every row's deployment was stored. */
const STORED_AT = T0 - 60_000;

function deployed(extra: Record<string, unknown> = {}, updatedAt = STORED_AT): DeployedModel {
  const d = deployment('m', extra);
  return { stored: { deployment: d, source: 'api', updatedAt }, revision: deploymentRevision(d) };
}

/** The order of `replica` of `d`, at its revision or `revision`. */
const orderOf = (d: DeployedModel, replica: string, revision = d.revision): EngineOrder => ({
  replica,
  model: 'm',
  profile: d.stored.deployment.profile,
  revision,
});
const adopt = (at: number, ...orders: { runner: string; order: EngineOrder }[]): ReconcileAction => ({
  kind: 'adopt',
  orders,
  at,
});
/** m dead-lettered a second ago and blocked at the revision stored at STORED_AT. */
const BLOCKED: ReconcileAction = {
  kind: 'dead-letter',
  model: 'm',
  attempts: [],
  at: T0 - 1_000,
  blocked: { updatedAt: STORED_AT, reason: 'a start failed' },
};
/** Start operation `id` of m, made and ordered from `runner` as `replica` at `at`. */
const ordered = (d: DeployedModel, id: number, runner: string, replica: string, at: number): ReconcileAction[] => [
  { kind: 'start', model: 'm', id, at },
  { kind: 'order', model: 'm', id, runner, order: orderOf(d, replica), at, attempt: 1 },
];

/** One line per action, in words; undefined for bookkeeping. */
function line(a: ReconcileAction): string | undefined {
  switch (a.kind) {
    case 'adopt':
      return `adopt ${a.orders.map((o) => `${o.order.replica}@${o.runner}`).join(' ')}`.trim();
    case 'forget':
      return `forget ${a.model}, ${a.stopped} stopped`;
    case 'ready':
      return `ready ${a.replica}@${a.runner} in ${a.startMs} ms`;
    case 'start-failed':
      return `failed ${a.replica}@${a.runner} attempt ${a.attempt}: ${a.reason}`;
    case 'dead-letter':
      return `dead-letter ${a.model} after ${a.attempts.length}${a.blocked ? ', blocked' : ''}`;
    case 'lost':
      return `lost ${a.replica}@${a.runner}: ${a.reason}`;
    case 'replaced':
      return `replaced ${a.replica}@${a.runner} by ${a.by}`;
    case 'unblock':
      return `unblock ${a.model}`;
    case 'stop':
      return `stop ${a.replica}@${a.runner} (${a.state}): ${a.reason}`;
    case 'scale':
      return `scale ${a.model} ${a.from}->${a.to}: ${a.reason}`;
    case 'start':
      return `start ${a.model} #${a.id}`;
    case 'revive':
      return `revive ${a.model} #${a.id}`;
    case 'drop':
      return `drop ${a.model} #${a.id}${a.rest === undefined ? '' : ', resting'}`;
    case 'abandon':
      return `abandon ${a.model} #${a.id}`;
    case 'replace':
      return `replace ${a.target.replica}@${a.target.runner} by #${a.id}`;
    case 'go-first':
      return `go first ${a.target.replica}@${a.target.runner} for #${a.id}`;
    case 'order':
      return `order #${a.id} ${a.order.replica}@${a.runner} (attempt ${a.attempt})`;
    case 'fit':
      return a.unplaced
        ? `unplaced ${a.model}: ${Object.entries(a.unplaced)
            .map(([r, why]) => `${r} ${why}`)
            .join('; ')}`
        : undefined;
    default:
      return undefined;
  }
}

interface Row {
  readonly name: string;
  readonly deployments: readonly DeployedModel[];
  readonly runners: readonly MutableRunner[];
  /** The actions of earlier passes, applied to a new book in order. */
  readonly given: readonly ReconcileAction[];
  readonly waiting?: number;
  readonly load?: { stable: number; panic: number };
  /** Options of the plan and the book both. */
  readonly config?: Partial<ReconcilerConfig>;
  readonly expected: readonly string[];
}

/** `r` reporting `replica` of m in `state`. */
function hosting(
  r: MutableRunner,
  replica: string,
  state: 'starting' | 'ready' | 'failed' | 'stopped',
  extra: Record<string, unknown> = {},
): MutableRunner {
  host(r, 'm', replica, state, T0 - 10_000, extra);
  return r;
}

function bookOf(given: readonly ReconcileAction[], limits: Partial<ReconcilerConfig> = {}): Book {
  const book = new Book({ ...reconcilerDefaults, ...limits });
  for (const action of given) book.apply(action);
  return book;
}

function run(row: Row): ReconcileAction[] {
  let n = 0;
  const fleet = {
    runners: row.runners,
    waiting: new Map([['m', row.waiting ?? 0]]),
    load: new Map(row.load ? [['m', row.load]] : []),
  };
  return plan(row.deployments, fleet, bookOf(row.given, row.config), {
    now: T0,
    config: { ...reconcilerDefaults, ...row.config },
    newReplica: (model) => `${model}-new${++n}`,
  });
}

const minOne = deployed({ minReplicas: 1 });
const v1 = deployed({ minReplicas: 1, maxReplicas: 1, profile: { kind: 'sim', args: ['--v', '1'] } });
const v2 = deployed({ minReplicas: 1, maxReplicas: 1, profile: { kind: 'sim', args: ['--v', '2'] } });
/** A book with m-x of m ordered from r1, failed there at `failedAt` (the next attempt 30 s after). */
const failedOnce = (failedAt: number): ReconcileAction[] => [
  adopt(failedAt - 5_000),
  ...ordered(minOne, 1, 'r1', 'm-x', failedAt - 1_000),
  {
    kind: 'start-failed',
    model: 'm',
    replica: 'm-x',
    runner: 'r1',
    attempt: 1,
    reason: 'exit code 1',
    output: undefined,
    at: failedAt,
  },
];
/** Every row's deployments share one profile, so their orders one revision. */
const plain = deployed();

const rows: Row[] = [
  {
    name: 'a new leader adopts the starting and ready replicas of deployed models on runners that take orders, and stops none',
    deployments: [deployed({ maxReplicas: 4 })],
    runners: [
      hosting(runner('r1'), 'm-a', 'ready'),
      hosting(runner('r2'), 'm-b', 'starting'),
      hosting(runner('r3', { orders: false }), 'm-c', 'ready'),
      hosting(runner('r4'), 'm-d', 'failed'),
    ],
    given: [],
    expected: ['adopt m-a@r1 m-b@r2'],
  },
  {
    name: 'scales 0 -> 1 at once for a waiting call, ordering the first runner',
    deployments: [deployed({ maxReplicas: 3, targetConcurrency: 1 })],
    runners: [runner('r1'), runner('r2')],
    given: [adopt(T0 - 5_000)],
    waiting: 1,
    expected: ['start m #1', 'scale m 0->1: a call is waiting with no replica', 'order #1 m-new1@r1 (attempt 1)'],
  },
  {
    name: 'keeps minReplicas with no load, saying so',
    deployments: [deployed({ minReplicas: 2, maxReplicas: 3 })],
    runners: [runner('r1'), runner('r2')],
    given: [adopt(T0 - 5_000)],
    expected: [
      'start m #1',
      'start m #2',
      'scale m 0->2: minReplicas 2',
      'order #1 m-new1@r1 (attempt 1)',
      'order #2 m-new2@r2 (attempt 1)',
    ],
  },
  {
    name: 'goes to the panic count on a burst past twice the target of the ready replicas',
    deployments: [deployed({ minReplicas: 1, maxReplicas: 3, targetConcurrency: 1 })],
    runners: [hosting(runner('r1'), 'm-a', 'ready'), runner('r2'), runner('r3')],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(plain, 'm-a') })],
    load: { stable: 0.9, panic: 9 },
    expected: [
      'start m #1',
      'start m #2',
      'scale m 1->3: panic: 9 calls over 6 s',
      'order #1 m-new1@r2 (attempt 1)',
      'order #2 m-new2@r3 (attempt 1)',
    ],
  },
  {
    name: 'stops the least loaded ready replica once wanted has been below for the whole scaleDownDelay',
    deployments: [deployed({ minReplicas: 1, maxReplicas: 3, targetConcurrency: 10 })],
    runners: [
      hosting(runner('r1', {}, { slotsInUse: 1 }), 'm-a', 'ready'),
      hosting(runner('r2'), 'm-b', 'ready'),
      hosting(runner('r3', {}, { slotsInUse: 1 }), 'm-c', 'ready'),
    ],
    given: [
      adopt(T0 - 400_000, ...['a', 'b', 'c'].map((x, i) => ({ runner: `r${i + 1}`, order: orderOf(plain, `m-${x}`) }))),
      { kind: 'size', model: 'm', wanted: 1, memory: { holdUntil: -Infinity, belowSince: T0 - 300_000 } },
    ],
    load: { stable: 2, panic: 2 },
    expected: [
      'stop m-b@r2 (ready): 2 calls over 60 s at target 10 for 300 s',
      'scale m 3->2: 2 calls over 60 s at target 10 for 300 s',
    ],
  },
  {
    name: 'keeps every replica one ms before the scaleDownDelay has passed',
    deployments: [deployed({ minReplicas: 1, maxReplicas: 3, targetConcurrency: 10 })],
    runners: [hosting(runner('r1'), 'm-a', 'ready'), hosting(runner('r2'), 'm-b', 'ready')],
    given: [
      adopt(T0 - 400_000, ...['a', 'b'].map((x, i) => ({ runner: `r${i + 1}`, order: orderOf(plain, `m-${x}`) }))),
      { kind: 'size', model: 'm', wanted: 1, memory: { holdUntil: -Infinity, belowSince: T0 - 299_999 } },
    ],
    expected: [],
  },
  {
    name: 'stops a starting replica before a ready one',
    deployments: [deployed({ minReplicas: 1, maxReplicas: 2, scaleDownDelay: 0 })],
    runners: [hosting(runner('r1'), 'm-a', 'ready'), hosting(runner('r2'), 'm-b', 'starting')],
    given: [adopt(T0 - 5_000, ...['a', 'b'].map((x, i) => ({ runner: `r${i + 1}`, order: orderOf(plain, `m-${x}`) })))],
    expected: ['stop m-b@r2 (starting): idle for 0 s', 'scale m 2->1: idle for 0 s'],
  },
  {
    name: 'forgets a deleted deployment, stopping its replicas',
    deployments: [],
    runners: [hosting(runner('r1'), 'm-a', 'ready')],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(minOne, 'm-a') })],
    expected: ['forget m, 1 stopped'],
  },
  {
    name: 'marks an ordered replica ready with its start time once its runner reports it ready',
    deployments: [minOne],
    runners: [hosting(runner('r1'), 'm-x', 'ready')],
    given: [adopt(T0 - 5_000), ...ordered(minOne, 1, 'r1', 'm-x', T0 - 2_500)],
    expected: ['ready m-x@r1 in 2500 ms'],
  },
  {
    name: 'fails an attempt its runner reports failed, and waits out the backoff',
    deployments: [minOne],
    runners: [hosting(runner('r1'), 'm-x', 'failed', { reason: 'exit code 1' }), runner('r2')],
    given: [adopt(T0 - 5_000), ...ordered(minOne, 1, 'r1', 'm-x', T0 - 1_000)],
    expected: ['failed m-x@r1 attempt 1: exit code 1'],
  },
  {
    name: 'orders the retry on another runner once the backoff has passed',
    deployments: [minOne],
    runners: [runner('r1'), runner('r2')],
    given: failedOnce(T0 - 30_000),
    expected: ['order #1 m-new1@r2 (attempt 2)'],
  },
  {
    name: 'dead-letters the last attempt and blocks the deployment',
    deployments: [minOne],
    runners: [hosting(runner('r1'), 'm-x', 'failed', { reason: 'exit code 1' }), runner('r2')],
    given: [adopt(T0 - 5_000), ...ordered(minOne, 1, 'r1', 'm-x', T0 - 1_000)],
    config: { startAttempts: 1 },
    expected: ['failed m-x@r1 attempt 1: exit code 1', 'dead-letter m after 1, blocked'],
  },
  {
    name: 'starts nothing for a blocked deployment, calls waiting or not',
    deployments: [minOne],
    runners: [runner('r1')],
    given: [adopt(T0 - 5_000), BLOCKED],
    waiting: 3,
    expected: [],
  },
  {
    name: 'unblocks a deployment that changed since, and starts',
    deployments: [deployed({ minReplicas: 1 }, T0 - 1)],
    runners: [runner('r1')],
    given: [adopt(T0 - 5_000), BLOCKED],
    expected: ['unblock m', 'start m #1', 'scale m 0->1: minReplicas 1', 'order #1 m-new1@r1 (attempt 1)'],
  },
  {
    name: 'fails an attempt whose runner left the fleet before the replica was ready',
    deployments: [minOne],
    runners: [runner('r1')],
    given: [adopt(T0 - 5_000), ...ordered(minOne, 1, 'r9', 'm-x', T0 - 1_000)],
    expected: ['failed m-x@r9 attempt 1: runner lost: it left the fleet before the replica was ready'],
  },
  {
    name: 'loses an established replica its runner reports failed, and starts another over it',
    deployments: [minOne],
    runners: [hosting(runner('r1'), 'm-a', 'failed', { reason: 'engine crashed' }), runner('r2')],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(minOne, 'm-a') })],
    expected: [
      'lost m-a@r1: engine crashed',
      'start m #1',
      'scale m 0->1: minReplicas 1',
      'order #1 m-new1@r1 (attempt 1)',
    ],
  },
  {
    name: 'loses a replica its runner has not reported for orderTimeout',
    deployments: [plain],
    runners: [runner('r1')],
    given: [adopt(T0 - reconcilerDefaults.orderTimeout, { runner: 'r1', order: orderOf(plain, 'm-a') })],
    expected: ['lost m-a@r1: the runner has not reported the replica for 30 s'],
  },
  {
    name: 'drops a start not yet ordered that is no longer wanted, resting it for its failed attempt',
    deployments: [deployed({ targetConcurrency: 1 })],
    runners: [runner('r1')],
    given: failedOnce(T0 - 1_000),
    expected: ['drop m #1, resting', 'scale m 1->0: 0 calls over 60 s at target 1'],
  },
  {
    name: 'takes a resting start back at the next scale-up, backoff and all',
    deployments: [deployed({ targetConcurrency: 1 })],
    runners: [runner('r1')],
    given: [
      ...failedOnce(T0 - 1_000),
      { kind: 'drop', model: 'm', id: 1, failedAttempts: 1, reason: 'idle', rest: STORED_AT },
    ],
    waiting: 1,
    expected: ['revive m #1', 'scale m 0->1: a call is waiting with no replica'],
  },
  {
    name: 'stops a replica of an older revision still starting, and starts a current one at once',
    deployments: [v2],
    runners: [hosting(runner('r1'), 'm-a', 'starting'), runner('r2')],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(v1, 'm-a') })],
    expected: [
      'stop m-a@r1 (starting): the deployment changed before it was ready',
      'start m #1',
      'scale m 0->1: minReplicas 1',
      'order #1 m-new1@r2 (attempt 1)',
    ],
  },
  {
    name: 'starts a replacement beside a ready replica of an older revision',
    deployments: [v2],
    runners: [hosting(runner('r1'), 'm-a', 'ready', { revision: v1.revision }), runner('r2')],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(v1, 'm-a') })],
    expected: ['replace m-a@r1 by #1', 'order #1 m-new1@r2 (attempt 1)'],
  },
  {
    name: 'lets the outdated replica stop first when no runner has room beside it',
    deployments: [v2],
    runners: [hosting(runner('r1'), 'm-a', 'ready', { revision: v1.revision })],
    given: [adopt(T0 - 5_000, { runner: 'r1', order: orderOf(v1, 'm-a') })],
    expected: [
      'replace m-a@r1 by #1',
      'go first m-a@r1 for #1',
      'unplaced m: r1 hosts replica m-a of model m (one ordered engine per runner)',
    ],
  },
  {
    name: 'stops the outdated replica once its replacement is ready',
    deployments: [v2],
    runners: [
      hosting(runner('r1'), 'm-a', 'ready', { revision: v1.revision }),
      hosting(runner('r2'), 'm-b', 'ready', { revision: v2.revision }),
    ],
    given: [
      adopt(T0 - 5_000, { runner: 'r1', order: orderOf(v1, 'm-a') }),
      { kind: 'replace', model: 'm', id: 1, at: T0 - 1_000, target: { runner: 'r1', replica: 'm-a' }, outdated: 1 },
      { kind: 'order', model: 'm', id: 1, runner: 'r2', order: orderOf(v2, 'm-b'), at: T0 - 1_000, attempt: 1 },
    ],
    expected: ['ready m-b@r2 in 1000 ms', 'replaced m-a@r1 by m-b'],
  },
  {
    name: 'abandons a replacement whose outdated replica is gone, and starts a plain one',
    deployments: [v2],
    runners: [runner('r1'), runner('r2')],
    given: [
      adopt(T0 - 5_000, { runner: 'r1', order: orderOf(v1, 'm-a') }),
      { kind: 'replace', model: 'm', id: 1, at: T0 - 1_000, target: { runner: 'r1', replica: 'm-a' }, outdated: 1 },
      { kind: 'lost', model: 'm', replica: 'm-a', runner: 'r1', reason: 'runner lost' },
    ],
    expected: ['start m #2', 'scale m 0->1: minReplicas 1', 'abandon m #1', 'order #2 m-new1@r1 (attempt 1)'],
  },
  {
    name: "gives every runner's reason when no runner fits",
    deployments: [deployed({ minReplicas: 1, runnerLabels: { zone: 'a' } })],
    runners: [
      Object.assign(runner('old'), { capacity: undefined }),
      runner('own', { orders: false }),
      runner('gone', {}, { placeable: false }),
      runner('llama', { engineKinds: ['llamacpp'] }),
      runner('zone-b', { labels: { zone: 'b' } }),
    ],
    given: [adopt(T0 - 5_000)],
    expected: [
      'start m #1',
      'scale m 0->1: minReplicas 1',
      'unplaced m: old reports no capacity (a runner older than engine orders); own takes no engine orders (it runs an engine of its own); gone not placeable (draining, or missing heartbeats); llama cannot launch kind sim (it can launch: llamacpp); zone-b label zone is b, wanted a',
    ],
  },
];

describe('plan', () => {
  it.each(rows)('$name', (row) => {
    expect(
      run(row)
        .map(line)
        .filter((l) => l !== undefined),
    ).toEqual(row.expected);
  });

  it('changes none of its inputs, and plans the same twice', () => {
    const row = rows.find((r) => r.name.startsWith('stops the outdated replica once'))!;
    const book = bookOf(row.given);
    const before = {
      orders: book.orders(),
      pending: book.pending('m').map(({ id, op }) => [id, op.inFlight, op.replaces]),
    };
    const runners = JSON.stringify(row.runners);
    const again = (): ReconcileAction[] =>
      plan(row.deployments, { runners: row.runners, waiting: new Map(), load: new Map() }, book, {
        now: T0,
        config: reconcilerDefaults,
        newReplica: () => 'fresh',
      });
    const first = again();
    expect(again()).toEqual(first);
    expect({
      orders: book.orders(),
      pending: book.pending('m').map(({ id, op }) => [id, op.inFlight, op.replaces]),
    }).toEqual(before);
    expect(JSON.stringify(row.runners)).toBe(runners);
    expect(book.adopted).toBe(true);
  });

  it('leaves the book, once its actions are applied, as its own later steps saw it', () => {
    const book = bookOf([adopt(T0 - 5_000)]);
    const runners = [runner('r1'), runner('r2')];
    let n = 0;
    const actions = plan(
      [deployed({ minReplicas: 2, maxReplicas: 2 })],
      { runners, waiting: new Map(), load: new Map() },
      book,
      { now: T0, config: reconcilerDefaults, newReplica: (m) => `${m}-${++n}` },
    );
    expect(book.orders()).toEqual([]);
    for (const action of actions) book.apply(action);
    // The second start went to r2 because the draft had r1 ordered already.
    expect(book.orders().map(([runner, e]) => [runner, e.order.replica])).toEqual([
      ['r1', 'm-1'],
      ['r2', 'm-2'],
    ]);
    expect(book.pending('m').map(({ op }) => op.inFlight?.runner)).toEqual(['r1', 'r2']);
    expect(book.wanted('m')).toBe(2);
  });
});
