/**
 * The DeploymentStore contract (gateway/deploy/store.ts), run on every implementation: the
 * memory store today; a Redis one, when it comes with the reconciler's lease, is added to STORES.
 */
import { describe, expect, it } from 'vitest';
import { checkDeployment } from '../../../gateway/deploy/deployments.ts';
import type { Deployment } from '../../../gateway/deploy/deployments.ts';
import { MemoryDeploymentStore } from '../../../gateway/deploy/store.ts';
import type { DeploymentStore } from '../../../gateway/deploy/store.ts';

function deployment(model: string, extra: Record<string, unknown> = {}): Deployment {
  const checked = checkDeployment({ model, profile: { kind: 'sim' }, ...extra });
  if (checked.kind !== 'valid') throw new Error(checked.problems.join('\n'));
  return checked.deployment;
}

/** Makes a store holding `fileDeployments`, its clock reading `now()`. */
type MakeStore = (fileDeployments: readonly Deployment[], now: () => number) => DeploymentStore;

const STORES: Record<string, MakeStore> = {
  memory: (fileDeployments, now) => new MemoryDeploymentStore({ fileDeployments, now }),
};

describe.each(Object.entries(STORES))('DeploymentStore (%s)', (_name, make) => {
  it('creates, replaces, lists by model name and deletes API deployments', async () => {
    let time = 10;
    const store = make([], () => time);
    expect(await store.put(deployment('org/b'))).toEqual({ kind: 'created' });
    expect(await store.put(deployment('a'))).toEqual({ kind: 'created' });
    time = 20;
    expect(await store.put(deployment('org/b', { maxReplicas: 3 }))).toEqual({ kind: 'replaced' });
    expect((await store.list()).map((s) => [s.deployment.model, s.source, s.updatedAt, s.deployment.maxReplicas])).toEqual([
      ['a', 'api', 10, 1],
      ['org/b', 'api', 20, 3],
    ]);
    expect((await store.get('org/b'))?.deployment.maxReplicas).toBe(3);
    expect(await store.delete('org/b')).toEqual({ kind: 'deleted' });
    expect(await store.get('org/b')).toBeUndefined();
    expect(await store.delete('org/b')).toEqual({ kind: 'not-found' });
    expect((await store.list()).map((s) => s.deployment.model)).toEqual(['a']);
  });

  it('keeps file deployments as they are: listed, never replaced or deleted', async () => {
    const store = make([deployment('filed', { minReplicas: 1 })], () => 5);
    expect(await store.put(deployment('filed', { minReplicas: 0 }))).toEqual({ kind: 'in-file' });
    expect(await store.delete('filed')).toEqual({ kind: 'in-file' });
    expect(await store.get('filed')).toMatchObject({ source: 'file', deployment: { minReplicas: 1 } });
    expect((await store.list()).map((s) => [s.deployment.model, s.source])).toEqual([['filed', 'file']]);
  });
});
