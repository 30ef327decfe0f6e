/**
 * runner/engine.ts without processes: an engine behind a URL (a small server on 127.0.0.1:0
 * standing in for it) and an on-demand runner's engine before any order. Launched engines are
 * spec/runner/hosting.integration.spec.ts's.
 */
import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../placer/kernel/index.ts';
import { RunnerEngine } from '../../runner/engine.ts';
import { EngineFailedError } from '../../runner/errors.ts';
import { resolveRunnerOptions } from '../../runner/options.ts';
import { serversForEach } from '../support/servers.ts';

const { cleanups, listen } = serversForEach();

/** An OpenAI-compatible engine listing `models`, answering 200 to every call. */
function fakeEngine(models: readonly string[]) {
  return createServer((req, res) => {
    if (req.url === '/v1/models') return res.end(JSON.stringify({ data: models.map((id) => ({ id })) }));
    res.setHeader('content-type', 'application/json');
    res.end('{"ok":true}');
  });
}

/** A RunnerEngine in front of `url`, probing rarely so that only the test moves its state. */
function engineAt(url: string): RunnerEngine {
  const engine = new RunnerEngine(resolveRunnerOptions({ engine: url, engineProbeInterval: 60_000 }), silentLogger);
  cleanups.push(() => engine.close());
  return engine;
}

describe('RunnerEngine behind a URL', () => {
  it('returns starting before its first probe, and nothing once the engine answers it', async () => {
    const engine = engineAt(await listen(fakeEngine(['m1', 'm2'])));
    expect(engine.busyReason()).toBe('starting');
    await engine.start({ source: 'none', gpus: [], reason: 'spec' });
    expect(engine.busyReason()).toBeUndefined();
    expect(engine.status()).toMatchObject({ kind: 'openai', state: 'ready', models: ['m1', 'm2'] });
    expect(engine.gpus).toEqual([]);
  });

  it('returns engine-unreachable once a call could not connect, until a probe gets an answer', async () => {
    const engine = engineAt(await listen(fakeEngine(['m1'])));
    await engine.start({ source: 'none', gpus: [], reason: 'spec' });
    engine.markUnreachable(new Error('connect ECONNREFUSED'));
    expect(engine.busyReason()).toBe('engine-unreachable');
    expect(engine.status()?.state).toBe('unreachable');
    await engine.adapter!.probe();
    expect(engine.busyReason()).toBeUndefined();
  });

  it('forwards a call to the engine and answers with its response', async () => {
    const engine = engineAt(await listen(fakeEngine(['m1'])));
    await engine.start({ source: 'none', gpus: [], reason: 'spec' });
    const response = await engine.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: {},
      body: '{}',
      signal: new AbortController().signal,
      timeout: 5_000,
    });
    expect(response.statusCode).toBe(200);
    expect(await response.body.json()).toEqual({ ok: true });
  });

  it('returns starting while the engine does not answer its first probe', async () => {
    const down = createServer((_req, res) => {
      res.statusCode = 503;
      res.end();
    });
    const engine = engineAt(await listen(down));
    await engine.start({ source: 'none', gpus: [], reason: 'spec' });
    expect(engine.busyReason()).toBe('starting');
    expect(engine.status()?.state).toBe('starting');
  });
});

describe('RunnerEngine of an on-demand runner', () => {
  it('returns no-engine, no status and a refused request before any order', async () => {
    const engine = new RunnerEngine(resolveRunnerOptions({}), silentLogger);
    expect(engine.busyReason()).toBe('no-engine');
    expect(engine.status()).toBeUndefined();
    expect(engine.origin).toBe('none');
    await expect(
      engine.request({
        method: 'POST',
        path: '/',
        headers: {},
        body: '',
        signal: new AbortController().signal,
        timeout: 1000,
      }),
    ).rejects.toBeInstanceOf(EngineFailedError);
    await engine.close();
  });
});
