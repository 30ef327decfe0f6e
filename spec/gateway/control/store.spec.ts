/**
 * The DeploymentStore contract (gateway/control/store.ts), run on every implementation: the
 * memory store and the Redis store (on a real redis-server, a key prefix per test). What only
 * the Redis store does (two gateways sharing it, stored JSON that fails its check) is in
 * redis-store.spec.ts.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Deployment } from '../../../gateway/control/deployments.ts';
import { MemoryDeploymentStore } from '../../../gateway/control/store.ts';
import type { DeploymentStore } from '../../../gateway/control/store.ts';
import { RedisDeploymentStore } from '../../../gateway/control/redis-store.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach } from '../../support/closed-after-each.ts';
import { LLAMA_PROFILE, deployment } from './fake-fleet.ts';

const server = redisForSuite();
const opened = closedAfterEach<RedisDeploymentStore>();

/** Makes a store holding `fileDeployments`, its clock reading `now()`. */
type MakeStore = (fileDeployments: readonly Deployment[], now: () => number) => DeploymentStore;

const STORES: Record<string, MakeStore> = {
  memory: (fileDeployments, now) => new MemoryDeploymentStore({ fileDeployments, now }),
  redis: (fileDeployments, now) => {
    const store = new RedisDeploymentStore({ url: server.url, keyPrefix: `t-${randomUUID()}:`, fileDeployments, now });
    opened.push(store);
    return store;
  },
};

describe.each(Object.entries(STORES))('DeploymentStore (%s)', (_name, make) => {
  it('creates, replaces, lists by model name and deletes API deployments', async () => {
    let time = 10;
    const store = make([], () => time);
    expect(await store.put(deployment('org/b'))).toEqual({ kind: 'created' });
    expect(await store.put(deployment('a'))).toEqual({ kind: 'created' });
    time = 20;
    expect(await store.put(deployment('org/b', { maxReplicas: 3 }))).toEqual({ kind: 'replaced' });
    expect(
      (await store.list()).map((s) => [s.deployment.model, s.source, s.updatedAt, s.deployment.maxReplicas]),
    ).toEqual([
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

  it('lists file and API deployments together by model name, code unit order', async () => {
    const store = make([deployment('m'), deployment('B')], () => 1);
    for (const model of ['z', 'a', 'org/x', 'Z'])
      expect(await store.put(deployment(model))).toEqual({ kind: 'created' });
    expect((await store.list()).map((s) => [s.deployment.model, s.source])).toEqual([
      ['B', 'file'],
      ['Z', 'api'],
      ['a', 'api'],
      ['m', 'file'],
      ['org/x', 'api'],
      ['z', 'api'],
    ]);
  });

  it('answers not-found for a model never deployed, and keeps a deployment whole through a put and a get', async () => {
    const store = make([], () => 7);
    expect(await store.delete('nothing')).toEqual({ kind: 'not-found' });
    expect(await store.get('nothing')).toBeUndefined();
    const full = deployment('org/full', {
      minReplicas: 1,
      maxReplicas: 4,
      targetConcurrency: 8,
      scaleDownDelay: 1_000,
      runnerLabels: { zone: 'a' },
      profile: { ...LLAMA_PROFILE, startTimeout: 60_000 },
    });
    await store.put(full);
    expect(await store.get('org/full')).toEqual({ deployment: full, source: 'api', updatedAt: 7 });
  });
});
