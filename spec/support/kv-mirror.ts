/** A runner's cache mirror fed by a real KV-event subscriber, and the engine calls the mirror specs make. */
import { request } from 'undici';
import { expect } from 'vitest';
import { silentLogger } from '../../placer/kernel/index.ts';
import { CacheMirror } from '../../runner/cache-mirror.ts';
import { KvEventSubscriber } from '../../runner/kv-events.ts';
import type { SimEngine } from '../../runner/engines/sim/index.ts';
import { eventually } from './fleet.ts';

/** What a test pushes to be closed after it. */
export type Cleanups = Array<() => Promise<void> | void>;

/** A subscriber feeding a fresh mirror, as the runner wires them; the subscriber is pushed onto `cleanups`. */
export async function subscribedMirror(cleanups: Cleanups): Promise<{ mirror: CacheMirror; endpoint: string }> {
  let epochs = 0;
  const mirror = new CacheMirror(() => `e${++epochs}`);
  const subscriber = new KvEventSubscriber({ onBatch: (batch) => mirror.receive(batch), logger: silentLogger });
  cleanups.push(() => subscriber.close());
  return { mirror, endpoint: await subscriber.open() };
}

/** POSTs `body` (JSON, when given) to `path` of the engine at `url` and expects a 200. */
export async function post(url: string, path: string, body?: unknown): Promise<void> {
  const res = await request(`${url}${path}`, {
    method: 'POST',
    ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
  });
  expect(res.statusCode).toBe(200);
  await res.body.dump();
}

/** Clears the engine's cache until `mirror` hears it: a PUB socket drops what it sends before a subscription reaches it. */
export async function clearUntilHeard(mirror: CacheMirror, url: string): Promise<void> {
  await eventually(
    async () => {
      await post(url, '/reset_prefix_cache');
      return mirror.live;
    },
    10_000,
    'the engine heard',
  );
}

/** A prompt of `count` distinct words, each `tag` and its position. */
export const words = (count: number, tag: string): string =>
  Array.from({ length: count }, (_, i) => `${tag}${i}`).join(' ');

/**
 * Sends the engine at `url` (blocks of 4 tokens, room for 12) five prompts of five blocks each and
 * expects `mirror` to hold exactly what the engine's cache holds after its evictions, then to
 * empty on a reset. Calls sent after {@link clearUntilHeard} come after its clears: the stream
 * keeps the engine's order.
 */
export async function expectMirrorFollows(mirror: CacheMirror, engine: SimEngine, url: string): Promise<void> {
  for (const tag of ['a', 'b', 'c', 'a', 'd'])
    await post(url, '/v1/completions', { prompt: words(21, tag), max_tokens: 1 });
  expect(engine.cachedBlockKeys()).toHaveLength(12);
  await eventually(
    () => [...mirror.keys()].sort().join() === engine.cachedBlockKeys().sort().join(),
    10_000,
    'the mirror matches the cache',
  );
  const before = mirror.epoch;
  await post(url, '/reset_prefix_cache');
  await eventually(() => mirror.epoch !== before, 10_000, 'the clear heard');
  expect(mirror.keys()).toEqual([]);
}
