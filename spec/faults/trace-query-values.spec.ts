/**
 * A client's query string never reaches telemetry. A gateway and a runner run as `sluice`
 * commands exporting OTLP/JSON to a receiver on 127.0.0.1, logging at debug; calls carry
 * `?api-key=<secret>` (and a bare query word). No exported span holds the secret or the query,
 * in any attribute or event, and no line either process wrote does (placer/kernel/redact.ts,
 * telemetryPath).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../placer/kernel/processes.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { telemetryPath } from '../../placer/kernel/index.ts';
import { chatBody, eventually, operatorEnv } from '../support/fleet.ts';

const SECRET = 'sk-query-secret-7f3a9c21d4';
const BARE = 'barewordtoken5e1b';

/** Every OTLP/JSON export request's body, as received. */
const exports: string[] = [];
/** Everything the gateway and the runner wrote. */
let written = '';
let receiver: Server;
const started: ChildService[] = [];
let dir: string;
let gw: string;

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') exports.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  dir = mkdtempSync(join(tmpdir(), 'sluice-trace-query-'));
  const onOutput = (text: string): void => void (written += text);
  const engine = await startService(['sim-engine', '--port', '0', '--call-log', join(dir, 'calls.log'), '--log-level', 'warn']);
  started.push(engine);
  const runner = await startService(['runner', '--port', '0', '--engine', engine.url, '--engine-kind', 'sim', '--id', 'runner-1', '--log-level', 'debug'], {
    env: { ...process.env, ...otel },
    onOutput,
  });
  started.push(runner);
  const gateway = await startService(['gateway', '--port', '0', '--runner-networks', '127.0.0.0/8', '--runners', runner.url, '--log-level', 'debug'], {
    env: operatorEnv({ ...process.env, ...otel }),
    onOutput,
  });
  started.push(gateway);
  gw = gateway.url;
});

afterAll(async () => {
  await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
  await new Promise((r) => receiver?.close(r));
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('telemetryPath', () => {
  it.each([
    ['/v1/chat/completions?api-key=secret', '/v1/chat/completions'],
    ['/v1/chat/completions?secret', '/v1/chat/completions'],
    ['/invoke/fn#frag', '/invoke/fn'],
    ['/v1/models', '/v1/models'],
    ['/?', '/'],
  ])('renders %j as %j', (target, path) => {
    expect(telemetryPath(target)).toBe(path);
  });
});

describe('a traced call with a secret in its query', () => {
  it('leaves no query value in exported spans nor in logs', async () => {
    const ids: string[] = [];
    for (const query of [`?api-key=${SECRET}&stream=false`, `?${BARE}`]) {
      const res = await request(`${gw}/v1/chat/completions${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chatBody() });
      expect(res.statusCode).toBe(200);
      await res.body.text();
      ids.push(String(res.headers['sluice-call-id']));
    }
    // Both calls' spans from both processes, the engine requests included, have arrived.
    await eventually(
      () => ids.every((id) => exports.some((body) => body.includes(id) && body.includes('sluice.call')) && exports.some((body) => body.includes(id) && body.includes('sluice.runner.call'))) && exports.join('').split('sluice.engine.request').length > 2,
      15_000,
      'both calls\' spans at the receiver',
    );
    const spans = exports.join('\n');
    expect(spans).toContain('"url.path"');
    expect(spans).toContain('/v1/chat/completions');
    for (const leak of [SECRET, BARE, 'api-key', '?']) expect(spans.includes(leak), `an exported span holds ${JSON.stringify(leak)}`).toBe(false);
    expect(written).not.toContain(SECRET);
    expect(written).not.toContain(BARE);
    // The engine served both calls.
    const calls = readFileSync(join(dir, 'calls.log'), 'utf8');
    for (const id of ids) expect(calls).toContain(id);
  });
});
