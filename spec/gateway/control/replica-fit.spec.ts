/**
 * Placement of a new replica (gateway/control/replica-fit.ts): a reason per misfit, the failed
 * runners last, and spreading over labels.
 */
import { describe, expect, it } from 'vitest';
import { fitRunner, fitsOnceFreed, placeReplica } from '../../../gateway/control/replica-fit.ts';
import type { Occupant } from '../../../gateway/control/replica-fit.ts';
import { deployment, runner } from './fake-fleet.ts';

const none = new Map<string, Occupant>();
const noFailures = new Map<string, number>();

describe('fitRunner', () => {
  const gpuDeployment = deployment('m', {
    profile: { kind: 'vllm', gpus: 2 },
    runnerLabels: { zone: 'a', tier: 'gpu' },
  });
  const fitting = { engineKinds: ['vllm', 'sim'], labels: { zone: 'a', tier: 'gpu' }, freeGpus: [0, 1] };

  it.each([
    [
      'an older runner',
      Object.assign(runner('r', fitting), { capacity: undefined }),
      undefined,
      'reports no capacity (a runner older than engine orders)',
    ],
    [
      'a runner with its own engine',
      runner('r', { ...fitting, orders: false }),
      undefined,
      'takes no engine orders (it runs an engine of its own)',
    ],
    [
      'a runner without the orders field',
      runner('r', { ...fitting, orders: undefined }),
      undefined,
      'takes no engine orders (it runs an engine of its own)',
    ],
    [
      'a draining runner',
      runner('r', fitting, { placeable: false }),
      undefined,
      'not placeable (draining, or missing heartbeats)',
    ],
    [
      'a runner hosting a replica',
      runner('r', fitting),
      { replica: 'x-1', model: 'x', how: 'hosted' },
      'hosts replica x-1 of model x (one ordered engine per runner)',
    ],
    [
      'a runner ordered a replica',
      runner('r', fitting),
      { replica: 'm-2', model: 'm', how: 'ordered' },
      'is ordered replica m-2 of model m (one ordered engine per runner)',
    ],
    [
      'a runner without the kind',
      runner('r', { ...fitting, engineKinds: ['sim', 'llamacpp'] }),
      undefined,
      'cannot launch kind vllm (it can launch: sim, llamacpp)',
    ],
    [
      'a runner in another zone',
      runner('r', { ...fitting, labels: { zone: 'b', tier: 'gpu' } }),
      undefined,
      'label zone is b, wanted a',
    ],
    [
      'a runner without a label',
      runner('r', { ...fitting, labels: { zone: 'a' } }),
      undefined,
      'label tier missing, wanted gpu',
    ],
    ['a runner short of GPUs', runner('r', { ...fitting, freeGpus: [3] }), undefined, 'needs 2 free GPUs, has 1'],
  ] as const)('says why %s does not fit', (_name, r, occupant, reason) => {
    expect(fitRunner(r, gpuDeployment, occupant as Occupant | undefined, false)).toEqual({
      kind: 'misfit',
      runner: r,
      reason,
    });
  });

  it('names the first GPU index that is not free, and lists the free ones', () => {
    const d = deployment('m', { profile: { kind: 'vllm', gpus: [0, 2] } });
    const r = runner('r', { engineKinds: ['vllm'], freeGpus: [0, 1] });
    expect(fitRunner(r, d, undefined, false)).toMatchObject({ kind: 'misfit', reason: 'GPU 2 not free (free: 0, 1)' });
    expect(fitRunner(runner('r', { engineKinds: ['vllm'], freeGpus: [2, 0] }), d, undefined, false)).toMatchObject({
      kind: 'fits',
    });
  });

  it('fits a runner that has it all', () => {
    expect(fitRunner(runner('r', fitting), gpuDeployment, undefined, true)).toMatchObject({
      kind: 'fits',
      failedBefore: true,
    });
  });
});

describe('placeReplica', () => {
  it('returns every runner with its reason when none fits', () => {
    const d = deployment('m', { runnerLabels: { zone: 'a' } });
    const runners = [runner('r1', { labels: { zone: 'b' } }), runner('r2', { engineKinds: [] })];
    expect(placeReplica({ deployment: d, runners, occupants: none, failedOn: noFailures })).toEqual({
      kind: 'unplaced',
      reasons: { r1: 'label zone is b, wanted a', r2: 'cannot launch kind sim (it can launch: none)' },
    });
  });

  it('takes a runner this operation failed on only when no other fits, the longest-ago failure first', () => {
    const d = deployment('m');
    const runners = [runner('r1'), runner('r2'), runner('r3')];
    const place = (failedOn: Map<string, number>, list = runners) => {
      const placed = placeReplica({ deployment: d, runners: list, occupants: none, failedOn });
      return placed.kind === 'placed' ? placed.runner.id : placed.reasons;
    };
    expect(place(new Map([['r1', 5]]))).toBe('r2');
    expect(
      place(
        new Map([
          ['r1', 5],
          ['r2', 6],
        ]),
      ),
    ).toBe('r3');
    expect(
      place(
        new Map([
          ['r1', 5],
          ['r2', 6],
          ['r3', 7],
        ]),
      ),
    ).toBe('r1');
    expect(
      place(
        new Map([
          ['r1', 9],
          ['r2', 6],
          ['r3', 7],
        ]),
      ),
    ).toBe('r2');
    expect(place(new Map([['r1', 9]]), [runners[0]!])).toBe('r1');
  });

  it('spreads replicas of a model over labels, the fewest sharing first, then by id', () => {
    const d = deployment('m', { maxReplicas: 4 });
    const runners = [
      runner('a1', { labels: { zone: 'a', rack: '1' } }),
      runner('a2', { labels: { zone: 'a', rack: '2' } }),
      runner('a3', { labels: { zone: 'a', rack: '1' } }),
      runner('b1', { labels: { zone: 'b', rack: '1' } }),
      runner('b2', { labels: { zone: 'b', rack: '2' } }),
    ];
    const occupants = new Map<string, Occupant>();
    const next = (): string => {
      const placed = placeReplica({ deployment: d, runners, occupants, failedOn: noFailures });
      if (placed.kind !== 'placed') throw new Error('unplaced');
      occupants.set(placed.runner.id, { replica: `m-${occupants.size}`, model: 'm', how: 'ordered' });
      return placed.runner.id;
    };
    // a1 by id; b2 shares no label with it; then a2, a3 and b1 share two pairs each (a2 by id);
    // then b1 shares two and a3 three.
    expect([next(), next(), next(), next()]).toEqual(['a1', 'b2', 'a2', 'b1']);
    // Another model's replicas count for nothing.
    const other = new Map<string, Occupant>([['a1', { replica: 'x-1', model: 'x', how: 'hosted' }]]);
    expect(placeReplica({ deployment: d, runners, occupants: other, failedOn: noFailures })).toMatchObject({
      kind: 'placed',
      runner: { id: 'a2' },
    });
  });
});

describe('fitsOnceFreed', () => {
  const hosting = runner(
    'r1',
    { freeGpus: [2, 3] },
    { hosted: { replica: 'old', model: 'm', state: 'ready', since: 0 } },
  );
  const vllm = (gpus: unknown, extra: Record<string, unknown> = {}) =>
    deployment('m', { profile: { kind: 'vllm', gpus }, ...extra });
  const vllmRunner = (r: typeof hosting) => ({ ...r, capacity: { ...r.capacity!, engineKinds: ['vllm'] } });

  it("gives the old engine's GPUs back: a count fits within free plus held, indices within free plus held indices", () => {
    const r = vllmRunner(hosting);
    expect(fitsOnceFreed(r, 2, vllm(4))).toBe(true);
    expect(fitsOnceFreed(r, 2, vllm(5))).toBe(false);
    expect(fitsOnceFreed(r, [0, 1], vllm([0, 3]))).toBe(true);
    expect(fitsOnceFreed(r, [0, 1], vllm([0, 4]))).toBe(false);
  });

  it('does not assume named GPUs come back from an engine that took a count of them', () => {
    expect(fitsOnceFreed(vllmRunner(hosting), 2, vllm([0, 1]))).toBe(false);
  });

  it('still asks for the labels, the kind and a runner that reports capacity', () => {
    const r = vllmRunner(hosting);
    expect(fitsOnceFreed(r, 0, vllm(0, { runnerLabels: { zone: 'b' } }))).toBe(false);
    expect(fitsOnceFreed({ ...r, capacity: { ...r.capacity, engineKinds: ['sim'] } }, 0, vllm(1))).toBe(false);
    expect(fitsOnceFreed({ ...r, capacity: undefined }, 0, vllm(1))).toBe(false);
  });
});
