/**
 * What only the Redis deployment store does (gateway/control/redis-store.ts), on a real
 * redis-server: two gateways see each other's puts and deletes, each keeps its own file over
 * the shared hash, a stored JSON that fails its check is skipped with a warning, and a Redis
 * that is gone is STORE_UNAVAILABLE. The cases every store passes are in store.spec.ts.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisDeploymentStore } from '../../../gateway/control/redis-store.ts';
import type { RedisDeploymentStoreOptions } from '../../../gateway/control/redis-store.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { warningRecorder } from '../../support/logger.ts';
import { startRedis } from '../../support/redis.ts';
import { redisForSuite } from '../../support/redis-suite.ts';
import { closedAfterEach, redisClientForSuite } from '../../support/closed-after-each.ts';
import { deployment } from './fake-fleet.ts';

const server = redisForSuite();
const client = redisClientForSuite(server);

const opened = closedAfterEach<RedisDeploymentStore>();

function store(options: Partial<RedisDeploymentStoreOptions> & { keyPrefix: string }): RedisDeploymentStore {
  const made = new RedisDeploymentStore({ url: server.url, ...options });
  opened.push(made);
  return made;
}

const models = async (s: RedisDeploymentStore) =>
  (await s.list()).map((d) => [d.deployment.model, d.source, d.deployment.maxReplicas]);

describe('RedisDeploymentStore', () => {
  it("shows two gateways each other's puts and deletes", async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const a = store({ keyPrefix });
    const b = store({ keyPrefix });
    expect(await a.put(deployment('m'))).toEqual({ kind: 'created' });
    expect(await b.get('m')).toMatchObject({ source: 'api', deployment: { model: 'm', maxReplicas: 1 } });
    expect(await b.put(deployment('m', { maxReplicas: 2 }))).toEqual({ kind: 'replaced' });
    expect(await models(a)).toEqual([['m', 'api', 2]]);
    expect(await b.delete('m')).toEqual({ kind: 'deleted' });
    expect(await a.get('m')).toBeUndefined();
    expect(await a.delete('m')).toEqual({ kind: 'not-found' });
    expect(await models(a)).toEqual([]);
  });

  it("keeps each gateway's file its own, listed over the shared hash and read-only through the API", async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const a = store({ keyPrefix, fileDeployments: [deployment('filed', { maxReplicas: 5 })] });
    const b = store({ keyPrefix });
    // Through b, whose file does not hold it, the model is an API deployment in the hash.
    expect(await b.put(deployment('filed', { maxReplicas: 2 }))).toEqual({ kind: 'created' });
    expect(await models(a)).toEqual([['filed', 'file', 5]]);
    expect(await a.get('filed')).toMatchObject({ source: 'file', deployment: { maxReplicas: 5 } });
    expect(await models(b)).toEqual([['filed', 'api', 2]]);
    expect(await a.put(deployment('filed'))).toEqual({ kind: 'in-file' });
    expect(await a.delete('filed')).toEqual({ kind: 'in-file' });
    expect(await models(b)).toEqual([['filed', 'api', 2]]);
  });

  it('skips a stored deployment that no longer passes its check, with a warning naming the model', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const warnings: LogFields[] = [];
    const s = store({ keyPrefix, logger: warningRecorder(warnings) });
    await s.put(deployment('good'));
    const hash = `${keyPrefix}deploy:deployments`;
    await client().hset(hash, 'not-json', '{');
    await client().hset(
      hash,
      'bad-field',
      JSON.stringify({ deployment: { model: 'bad-field', profile: { kind: 'nope' } }, updatedAt: 1 }),
    );
    await client().hset(hash, 'renamed', JSON.stringify({ deployment: deployment('other'), updatedAt: 1 }));
    await client().hset(hash, 'no-time', JSON.stringify({ deployment: deployment('no-time') }));
    expect((await s.list()).map((d) => d.deployment.model)).toEqual(['good']);
    expect(await s.get('bad-field')).toBeUndefined();
    const skipped = warnings.filter((w) => w.msg === 'stored deployment skipped');
    expect(skipped.map((w) => w.model).sort()).toEqual(['bad-field', 'bad-field', 'no-time', 'not-json', 'renamed']);
    expect(JSON.stringify(skipped.find((w) => w.model === 'bad-field')?.problems)).toContain(
      'profile.kind must be one of',
    );
  });

  it('keeps only what the deployment says and when, never the source', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const s = store({ keyPrefix, now: () => 1234 });
    await s.put(deployment('m'));
    const stored = JSON.parse((await client().hget(`${keyPrefix}deploy:deployments`, 'm'))!) as Record<string, unknown>;
    expect(Object.keys(stored).sort()).toEqual(['deployment', 'updatedAt']);
    expect(stored.updatedAt).toBe(1234);
  });

  it('shares a client it was given and leaves it open at close', async () => {
    const keyPrefix = `t-${randomUUID()}:`;
    const shared = new Redis(server.url, { maxRetriesPerRequest: 0 });
    try {
      const s = new RedisDeploymentStore({ client: shared, keyPrefix });
      await s.put(deployment('m'));
      await s.close();
      expect(await shared.hexists(`${keyPrefix}deploy:deployments`, 'm')).toBe(1);
    } finally {
      await shared.quit();
    }
  });

  it('rejects with STORE_UNAVAILABLE (503) naming the store, never its password, when Redis is gone', async () => {
    const gone = await startRedis({ password: 'hunter2-secret' });
    const url = gone.url.replace('redis://', 'redis://default:hunter2-secret@');
    const s = new RedisDeploymentStore({ url, keyPrefix: `t-${randomUUID()}:` });
    opened.push(s);
    expect(await s.put(deployment('m'))).toEqual({ kind: 'created' });
    await gone.stop();
    for (const step of [() => s.list(), () => s.get('m'), () => s.put(deployment('m')), () => s.delete('m')]) {
      const error = await step().then(
        () => undefined,
        (e: unknown) => e as Error & { code?: string; status?: number },
      );
      expect(error).toMatchObject({ code: 'STORE_UNAVAILABLE', status: 503 });
      expect(error?.message).toContain(`redis deployment store redis://127.0.0.1:${gone.port}/0`);
      expect(error?.message).not.toContain('hunter2');
    }
  });

  it('refuses a url and a client together, and neither', () => {
    expect(() => new RedisDeploymentStore({ url: server.url, client: client() })).toThrow(
      /redis deployment store: give exactly one of url .* got both/,
    );
    expect(() => new RedisDeploymentStore({})).toThrow(expect.objectContaining({ code: 'GW_INVALID_OPTION' }));
  });
});
