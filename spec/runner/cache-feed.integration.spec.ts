/**
 * A runner launching the simulated engine as a real process, and a gateway's registration and
 * cache routes on 127.0.0.1: the engine's cached tokens are relayed as the engine gave them, its
 * KV events reach the gateway as cache updates, and a crash starts the feed over.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../placer/kernel/processes.ts';
import { SLUICE_BIN } from '../../gateway/cli/entry.ts';
import { createSimEngine } from '../../runner/engines/sim/index.ts';
import { REGISTER_PATH, unpackBlockKeys } from '../../runner/protocol/index.ts';
import { createRunner } from '../../runner/server.ts';
import { eventually, metricValue, postJson } from '../support/fleet.ts';

const TOKEN = 'runner-token-for-specs-0123456789';
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A gateway that takes every registration and heartbeat, and records every cache update. */
async function recordingGateway(): Promise<{ url: string; updates: any[]; beats: any[] }> {
  const updates: any[] = [];
  const beats: any[] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      if (req.method === 'DELETE') return void res.writeHead(204).end();
      const body = JSON.parse(text);
      if (req.url?.endsWith('/cache')) updates.push(body);
      else if (req.url !== REGISTER_PATH) beats.push(body);
      const answer = req.url === REGISTER_PATH ? { gatewayId: 'gw', heartbeatInterval: 50 } : {};
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, updates, beats };
}

const words = (count: number): string => Array.from({ length: count }, (_, i) => `w${i}`).join(' ');

describe('a runner carrying its engine’s cache truth', () => {
  it('relays cached_tokens, feeds the stored blocks, and starts the feed over when the engine crashes', async () => {
    const gw = await recordingGateway();
    const runner = createRunner(
      {
        id: 'r-cache',
        profile: {
          kind: 'sim',
          model: 'sim-small',
          port: await freePort(),
          args: ['--ttft-ms', '0', '--itl-ms', '0', '--crash-on-call', '3'],
        },
        simCommand: [process.execPath, SLUICE_BIN],
        gateways: [gw.url],
        runnerToken: TOKEN,
        heartbeatInterval: 50,
        cacheFeedInterval: 20,
        engineRestartBackoff: 50,
      },
      { readInventory: async () => ({ gpus: [], source: 'none', reason: 'no GPUs in this spec' }) },
    );
    const { url } = await runner.listen(0, '127.0.0.1');
    cleanups.push(() => runner.close({ drainTimeout: 0 }));

    await eventually(() => gw.updates.some((u) => u.engineFeed === 'live'), 20_000, 'the feed live');
    const epoch = gw.updates.find((u) => u.engineFeed === 'live').epoch;
    expect(gw.beats.at(-1).cache).toMatchObject({ tokenizer: 'sluice-sim', events: true });

    // "user", ":" and 80 words: 82 tokens, 5 full blocks; the second time 80 come from the cache.
    const body = JSON.stringify({
      model: 'sim-small',
      max_tokens: 1,
      messages: [{ role: 'user', content: words(80) }],
    });
    const cached: number[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await postJson(`${url}/v1/chat/completions`, body);
      expect(res.status).toBe(200);
      cached.push(res.json.usage.prompt_tokens_details.cached_tokens);
    }
    expect(cached).toEqual([0, 80]);
    const storedIn = (e: string) =>
      gw.updates.filter((u) => u.epoch === e && u.stored).flatMap((u) => unpackBlockKeys(u.stored)!);
    await eventually(() => storedIn(epoch).length === 5, 10_000, 'five blocks fed');
    // What the feed costs is counted per gateway.
    const metrics = await (await request(`${url}/metrics`)).body.text();
    const sent = (name: string) => metricValue(metrics, name, { gateway: gw.url });
    expect(sent('sluice_runner_cache_feed_updates_total')).toBeGreaterThanOrEqual(2);
    expect(sent('sluice_runner_cache_feed_bytes_total')).toBeGreaterThan(50);

    // The third call crashes the engine: the feed goes down under a new epoch, then live again, empty.
    await postJson(`${url}/v1/chat/completions`, body).catch(() => undefined);
    await eventually(
      () => gw.updates.some((u) => u.epoch !== epoch && u.engineFeed === 'live' && u.reset),
      20_000,
      'live again after the restart',
    );
    const after = gw.updates.slice(gw.updates.findIndex((u) => u.epoch !== epoch));
    expect(after[0]).toMatchObject({ engineFeed: 'down', reset: true, seq: 1 });
    expect(after.find((u) => u.engineFeed === 'live')).not.toHaveProperty('stored');
  });

  it('follows an engine it did not launch from the endpoint that engine binds (--engine-kv-events)', async () => {
    const gw = await recordingGateway();
    const dir = await mkdtemp(join(tmpdir(), 'sluice-kv-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const endpoint = `ipc://${join(dir, 'events.sock')}`;
    const engine = createSimEngine({
      hashSeed: '7',
      enablePromptTokensDetails: true,
      kvEventsConfig: { enable_kv_cache_events: true, publisher: 'zmq', endpoint },
    });
    const { url: engineUrl } = await engine.listen(0, '127.0.0.1');
    cleanups.push(() => engine.close());
    const runner = createRunner({
      id: 'r-external',
      engine: engineUrl,
      engineKind: 'sim',
      engineKvEvents: endpoint,
      hashSeed: '7',
      gateways: [gw.url],
      runnerToken: TOKEN,
      heartbeatInterval: 50,
      cacheFeedInterval: 20,
    });
    const { url } = await runner.listen(0, '127.0.0.1');
    cleanups.push(() => runner.close({ drainTimeout: 0 }));

    await eventually(() => gw.beats.at(-1)?.cache !== undefined, 10_000, 'announced');
    expect(gw.beats.at(-1).cache).toEqual({
      tokenizer: 'sluice-sim',
      scheme: { algorithm: 'sha256_cbor', seed: '7', blockSize: 16 },
      events: true,
    });
    // Down until the engine is heard: a clear (sent until one arrives) makes it heard.
    await eventually(
      async () => {
        await request(`${engineUrl}/reset_prefix_cache`, { method: 'POST' }).then((r) => r.body.dump());
        return gw.updates.some((u) => u.engineFeed === 'live');
      },
      10_000,
      'the feed live',
    );
    const body = JSON.stringify({
      model: 'sim-small',
      max_tokens: 1,
      messages: [{ role: 'user', content: words(80) }],
    });
    expect((await postJson(`${url}/v1/chat/completions`, body)).status).toBe(200);
    await eventually(
      () => {
        const last = [...gw.updates].reverse().find((u) => u.reset)!;
        const since = gw.updates.slice(gw.updates.lastIndexOf(last)).filter((u) => u.stored);
        const keys = since.flatMap((u) => unpackBlockKeys(u.stored)!).sort();
        return keys.length === 5 && keys.join() === engine.cachedBlockKeys().sort().join();
      },
      10_000,
      "the engine's five blocks fed",
    );
  });
});
