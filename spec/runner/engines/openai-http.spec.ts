/**
 * runner/engines/openai-http.ts: the adapter in front of an OpenAI-compatible engine, against a
 * scripted engine on a real socket (127.0.0.1, port 0). What it reports (state, models, load)
 * is what the runner admits calls and heartbeats by.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../placer/kernel/index.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';
import { engineKind } from '../../../runner/engines/kinds.ts';
import type { EngineKindName } from '../../../runner/engines/kinds.ts';
import { OpenAIHttpEngine } from '../../../runner/engines/openai-http.ts';
import { eventually } from '../../support/fleet.ts';

/** What the scripted engine answers; a spec changes it as it goes. */
interface Script {
  health: number;
  models: { status: number; body: unknown };
  metrics: { status: number; body: string };
  /** Requests other than the health, models and metrics GETs, with their bodies. */
  calls: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }>;
  gets: string[];
  /** The authorization header of each of those GETs, in order. */
  getAuthorizations: Array<string | undefined>;
}

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function scriptedEngine(): Promise<{ url: URL; script: Script; server: Server }> {
  const script: Script = {
    health: 200,
    models: { status: 200, body: { object: 'list', data: [{ id: 'm-1' }, { id: 7 }, { id: 'm-2' }] } },
    metrics: {
      status: 200,
      body: 'vllm:num_requests_running 3\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.25\n',
    },
    calls: [],
    gets: [],
    getAuthorizations: [],
  };
  const server = createServer((req, res) => {
    if (req.method === 'GET' && ['/health', '/v1/models', '/metrics'].includes(req.url ?? '')) {
      script.gets.push(req.url!);
      script.getAuthorizations.push(req.headers.authorization);
      if (req.url === '/health') return void res.writeHead(script.health).end();
      if (req.url === '/v1/models')
        return void res
          .writeHead(script.models.status, { 'content-type': 'application/json' })
          .end(JSON.stringify(script.models.body));
      return void res.writeHead(script.metrics.status, { 'content-type': 'text/plain' }).end(script.metrics.body);
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      script.calls.push({
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      res.end('data: two\n\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), script, server };
}

/** A logger that keeps every state change it is told of. */
function changes(into: LogFields[]): Logger {
  const logger: Logger = {
    debug: () => {},
    info: (msg, fields) => void (msg === 'engine state changed' && into.push(fields ?? {})),
    warn: (msg, fields) => void (msg === 'engine state changed' && into.push(fields ?? {})),
    error: () => {},
    child: () => logger,
  };
  return logger;
}

function adapter(
  url: URL,
  kind: EngineKindName,
  extra: {
    logger?: Logger;
    now?: () => number;
    probeInterval?: number;
    loadInterval?: number;
    apiKey?: string;
    models?: readonly string[];
  } = {},
): OpenAIHttpEngine {
  const engine = new OpenAIHttpEngine({
    url,
    kind: engineKind(kind),
    connectTimeout: 1000,
    probeInterval: extra.probeInterval ?? 60_000,
    loadInterval: extra.loadInterval ?? 60_000,
    logger: extra.logger ?? silentLogger,
    ...(extra.now ? { now: extra.now } : {}),
    ...(extra.apiKey ? { apiKey: extra.apiKey } : {}),
    ...(extra.models ? { models: extra.models } : {}),
  });
  cleanups.push(() => engine.close());
  return engine;
}

describe('OpenAIHttpEngine', () => {
  it('returns ready with the string model ids once health and the model list answer', async () => {
    const { url } = await scriptedEngine();
    const engine = adapter(url, 'vllm');
    expect(engine.state).toBe('starting');
    await engine.start();
    expect(engine.state).toBe('ready');
    expect(engine.models).toEqual(['m-1', 'm-2']);
  });

  const faults: Array<[string, (s: Script) => void, (s: Script) => void]> = [
    ['the health route answers 503', (s) => (s.health = 503), (s) => (s.health = 200)],
    [
      'the model list answers 500, health answering',
      (s) => (s.models = { status: 500, body: {} }),
      (s) => (s.models = { status: 200, body: { data: [{ id: 'm-1' }] } }),
    ],
  ];
  it.each(faults)(
    'returns starting while %s, then ready at the first probe after it is fixed',
    async (_what, fail, fix) => {
      const { url, script } = await scriptedEngine();
      fail(script);
      const engine = adapter(url, 'vllm');
      await engine.start();
      expect(engine.state).toBe('starting');
      expect(engine.models).toEqual([]);
      fix(script);
      await engine.probe();
      expect(engine.state).toBe('ready');
      expect(engine.models).toContain('m-1');
    },
  );

  it("uses the kind's routes: a plain OpenAI URL is checked by its model list alone", async () => {
    const { url, script } = await scriptedEngine();
    script.health = 500;
    const engine = adapter(url, 'openai');
    await engine.start();
    expect(engine.state).toBe('ready');
    expect(script.gets).not.toContain('/health');
    expect(script.gets).not.toContain('/metrics');
    expect(engine.load).toBeUndefined();
  });

  it('returns unreachable when a ready engine stops answering, and ready again when it is back', async () => {
    const { url, script } = await scriptedEngine();
    const seen: LogFields[] = [];
    const engine = adapter(url, 'vllm', { logger: changes(seen) });
    await engine.start();
    script.health = 500;
    await engine.probe();
    expect(engine.state).toBe('unreachable');
    script.health = 200;
    await engine.probe();
    expect(engine.state).toBe('ready');
    expect(seen.map((f) => [f.from, f.to])).toEqual([
      ['starting', 'ready'],
      ['ready', 'unreachable'],
      ['unreachable', 'ready'],
    ]);
  });

  it('returns unreachable after markUnreachable on a ready engine, but leaves a starting one starting', async () => {
    const { url, script } = await scriptedEngine();
    script.health = 503;
    const engine = adapter(url, 'vllm');
    await engine.start();
    engine.markUnreachable(new Error('connect ECONNREFUSED'));
    expect(engine.state).toBe('starting');
    script.health = 200;
    await engine.probe();
    engine.markUnreachable(new Error('connect ECONNREFUSED'));
    expect(engine.state).toBe('unreachable');
    engine.markStarting();
    expect(engine.state).toBe('starting');
  });

  it('returns healthy() true for a 200 health answer and false for any other answer or a refused connection', async () => {
    const { url, script, server } = await scriptedEngine();
    const engine = adapter(url, 'vllm');
    expect(await engine.healthy()).toBe(true);
    script.health = 503;
    expect(await engine.healthy()).toBe(false);
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(await engine.healthy()).toBe(false);
  });

  it('shares one probe among concurrent callers', async () => {
    const { url, script } = await scriptedEngine();
    const engine = adapter(url, 'openai');
    await Promise.all([engine.probe(), engine.probe(), engine.probe()]);
    // openai: one probe asks /v1/models twice (health, then the list).
    expect(script.gets).toEqual(['/v1/models', '/v1/models']);
  });

  it("forwards a call's method, path, headers and body, and streams the engine's answer back", async () => {
    const { url, script } = await scriptedEngine();
    const engine = adapter(url, 'vllm');
    const res = await engine.request({
      method: 'POST',
      path: '/v1/chat/completions?x=1',
      headers: { 'content-type': 'application/json', 'x-call': 'c-1' },
      body: '{"model":"m-1"}',
      signal: new AbortController().signal,
      timeout: 5000,
    });
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('data: one\n\ndata: two\n\n');
    expect(script.calls).toHaveLength(1);
    expect(script.calls[0]).toMatchObject({ method: 'POST', url: '/v1/chat/completions?x=1', body: '{"model":"m-1"}' });
    expect(script.calls[0]!.headers['x-call']).toBe('c-1');
  });

  it('sends the engine its own key on every probe and call, in place of any the call carried, and no key without one', async () => {
    const { url, script } = await scriptedEngine();
    const engine = adapter(url, 'vllm', { apiKey: 'engine-key-123' });
    await engine.start();
    await engine
      .request({
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json', authorization: 'Bearer someone-elses' },
        body: '{"model":"m-1"}',
        signal: new AbortController().signal,
        timeout: 5000,
      })
      .then((res) => res.body.dump());
    expect(script.gets.length).toBeGreaterThanOrEqual(2);
    expect(script.getAuthorizations.every((a) => a === 'Bearer engine-key-123')).toBe(true);
    expect(script.calls[0]!.headers.authorization).toBe('Bearer engine-key-123');

    const { url: plainUrl, script: plain } = await scriptedEngine();
    const keyless = adapter(plainUrl, 'vllm');
    await keyless.start();
    expect(plain.getAuthorizations.length).toBeGreaterThanOrEqual(2);
    expect(plain.getAuthorizations.every((a) => a === undefined)).toBe(true);
  });

  it("returns the load scraped from the kind's metrics page once ready, stamped by the injected clock", async () => {
    const { url } = await scriptedEngine();
    const engine = adapter(url, 'vllm', { now: () => 1_700_000_000_000 });
    await engine.start();
    await eventually(() => engine.load !== undefined, 5000, 'a load scrape');
    expect(engine.load).toEqual({ load: { running: 3, waiting: 1, kvCacheUsage: 0.25 }, at: 1_700_000_000_000 });
  });

  it('keeps the last load when a later scrape fails, so its age shows it is stale', async () => {
    const { url, script } = await scriptedEngine();
    let now = 1000;
    const engine = adapter(url, 'vllm', { now: () => now, loadInterval: 20 });
    await engine.start();
    await eventually(() => engine.load !== undefined, 5000, 'a load scrape');
    const first = engine.load;
    script.metrics = { status: 500, body: '' };
    now = 2000;
    const scrapes = script.gets.filter((g) => g === '/metrics').length;
    await eventually(() => script.gets.filter((g) => g === '/metrics').length >= scrapes + 2, 5000, 'failed scrapes');
    expect(engine.load).toEqual(first);
    expect(engine.load?.at).toBe(1000);
  });

  it('returns stopped after close and probes no more', async () => {
    const { url, script } = await scriptedEngine();
    const engine = adapter(url, 'vllm');
    await engine.start();
    await engine.close();
    expect(engine.state).toBe('stopped');
    const asked = script.gets.length;
    await engine.probe();
    expect(engine.state).toBe('stopped');
    expect(script.gets.length).toBe(asked);
    engine.markStarting();
    engine.markUnreachable(new Error('gone'));
    expect(engine.state).toBe('stopped');
  });

  describe('with declared models', () => {
    it.each([
      ['answers 500', { status: 500, body: { error: 'broken' } }],
      ['answers 404 (absent)', { status: 404, body: {} }],
    ])('returns ready with the declared models when the model list %s, and never reads it', async (_what, models) => {
      const { url, script } = await scriptedEngine();
      script.models = models;
      const undeclared = adapter(url, 'vllm');
      await undeclared.start();
      expect(undeclared.state).toBe('starting');
      script.gets.length = 0;

      const engine = adapter(url, 'vllm', { models: ['m-a', 'org/m-b'] });
      expect(engine.models).toEqual(['m-a', 'org/m-b']);
      await engine.start();
      expect(engine.state).toBe('ready');
      expect(engine.models).toEqual(['m-a', 'org/m-b']);
      expect(script.gets.filter((path) => path === '/v1/models')).toEqual([]);
    });

    it('returns the declared models over those the engine lists', async () => {
      const { url } = await scriptedEngine();
      const engine = adapter(url, 'vllm', { models: ['declared'] });
      await engine.start();
      expect(engine.models).toEqual(['declared']);
    });

    it('returns starting while the health route fails, declared models or not', async () => {
      const { url, script } = await scriptedEngine();
      script.health = 503;
      const engine = adapter(url, 'vllm', { models: ['m-a'] });
      await engine.start();
      expect(engine.state).toBe('starting');
    });

    it('returns ready for a plain OpenAI URL whose model list answers 404, and starting while it answers 500', async () => {
      const { url, script } = await scriptedEngine();
      script.models = { status: 404, body: {} };
      const absent = adapter(url, 'openai', { models: ['m-a'] });
      await absent.start();
      expect(absent.state).toBe('ready');
      script.models = { status: 503, body: {} };
      const failing = adapter(url, 'openai', { models: ['m-a'] });
      await failing.start();
      expect(failing.state).toBe('starting');
    });
  });
});
