/**
 * Fault: a runner learnt its engine's models only from the engine's `/v1/models`; an engine whose
 * list route is broken (or absent) left the runner not ready for good, and the gateway refused its
 * model. With `--engine-models` (or `SLUICE_ENGINE_MODELS`) the runner serves the models declared,
 * which win over the list. Real processes on 127.0.0.1: an engine whose `/v1/models` answers 500,
 * two runners in front of it (one told by flag, one by environment), and a gateway over both.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { runnerArgs } from '../../placer/kernel/service-args.ts';
import { eventually, operatorEnv, postJson } from '../support/fleet.ts';

const quiet = ['--log-level', 'warn'];

describe('fault: an engine whose /v1/models fails, with the models declared to its runner', () => {
  const started: ChildService[] = [];
  const engine = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') return void res.end();
    if (req.url === '/v1/models') return void res.writeHead(500).end('model list broken');
    req.resume();
    req.once('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'chat.completion', choices: [{ index: 0, message: { content: 'ok' } }] }));
    });
  });
  let byFlag: ChildService;
  let byEnv: ChildService;
  let undeclared: ChildService;
  let gateway: ChildService;

  beforeAll(async () => {
    await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    const runner = (id: string, extra: string[], env?: NodeJS.ProcessEnv) =>
      startService(
        runnerArgs({ engine: url, kind: 'vllm', id }, [...quiet, '--engine-probe-interval', '200ms', ...extra]),
        {
          ...(env ? { env: { ...process.env, ...env } } : {}),
        },
      ).then((service) => {
        started.push(service);
        return service;
      });
    [byFlag, byEnv, undeclared] = await Promise.all([
      runner('declared-by-flag', ['--engine-models', 'model-a,org/model-b']),
      runner('declared-by-env', [], { SLUICE_ENGINE_MODELS: 'model-c' }),
      runner('undeclared', []),
    ]);
    gateway = await startService(
      [
        'gateway',
        '--port',
        '0',
        '--runners',
        [byFlag.url, byEnv.url].join(','),
        '--status-interval',
        '200ms',
        ...quiet,
      ],
      { env: operatorEnv() },
    );
    started.push(gateway);
  });
  afterAll(async () => {
    await Promise.all(started.map((service) => service.stop('SIGTERM', 5000)));
    engine.closeAllConnections();
    await new Promise<void>((resolve) => engine.close(() => resolve()));
  });

  const status = async (service: ChildService) =>
    (await (await request(`${service.url}/status`)).body.json()) as { ready: boolean; models: string[] };

  it('returns the declared models on the runner status, by flag and by environment', async () => {
    await eventually(async () => (await status(byFlag)).ready && (await status(byEnv)).ready, 10_000, 'ready runners');
    expect((await status(byFlag)).models).toEqual(['model-a', 'org/model-b']);
    expect((await status(byEnv)).models).toEqual(['model-c']);
  });

  it('returns not ready with no models for the runner told nothing', async () => {
    expect(await status(undeclared)).toMatchObject({ ready: false });
  });

  it('places a call for a declared model through the gateway', async () => {
    const listed = async () => {
      const res = await request(`${gateway.url}/v1/models`);
      return ((await res.body.json()) as { data?: Array<{ id: string }> }).data?.map((model) => model.id) ?? [];
    };
    await eventually(async () => (await listed()).includes('org/model-b'), 10_000, 'the gateway listing org/model-b');
    const res = await postJson(
      `${gateway.url}/v1/chat/completions`,
      JSON.stringify({ model: 'org/model-b', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(res.status).toBe(200);
    expect(res.headers['sluice-runner-id']).toBe('declared-by-flag');
  });
});
