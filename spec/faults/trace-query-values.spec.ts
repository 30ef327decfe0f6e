/**
 * A client's query string never reaches telemetry. A gateway and a runner run as `sluice`
 * commands exporting OTLP/JSON to a receiver on 127.0.0.1, logging at debug; calls carry
 * `?api-key=<secret>` (and a bare query word). No exported span holds the secret or the query,
 * in any attribute or event, and no line either process wrote does (placer/kernel/redact.ts,
 * telemetryPath).
 */
import { readFileSync } from 'node:fs';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { telemetryPath } from '../../placer/kernel/index.ts';
import { chatBody, eventually } from '../support/fleet.ts';
import { startTracedFleet } from '../support/traced-fleet.ts';
import type { TracedFleet } from '../support/traced-fleet.ts';

const SECRET = 'sk-query-secret-7f3a9c21d4';
const BARE = 'barewordtoken5e1b';

/** Everything the gateway and the runner wrote. */
let written = '';
let traced: TracedFleet;

beforeAll(async () => {
  traced = await startTracedFleet({ logLevel: 'debug', onOutput: (text) => void (written += text) });
});

afterAll(async () => {
  await traced?.stop();
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
      const res = await request(`${traced.gw}/v1/chat/completions${query}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chatBody(),
      });
      expect(res.statusCode).toBe(200);
      await res.body.text();
      ids.push(String(res.headers['sluice-call-id']));
    }
    // Both calls' spans from both processes, the engine requests included, have arrived.
    await eventually(
      () =>
        ids.every(
          (id) =>
            traced.exports.some((body) => body.includes(id) && body.includes('sluice-gateway')) &&
            traced.exports.some((body) => body.includes(id) && body.includes('sluice-runner')),
          // Each call's inference spans: the gateway's offer and the runner's engine request.
        ) && traced.exports.join('').split('chat sim-small').length > 4,
      15_000,
      "both calls' spans at the receiver",
    );
    const spans = traced.exports.join('\n');
    expect(spans).toContain('"url.path"');
    expect(spans).toContain('/v1/chat/completions');
    for (const leak of [SECRET, BARE, 'api-key', '?'])
      expect(spans.includes(leak), `an exported span holds ${JSON.stringify(leak)}`).toBe(false);
    expect(written).not.toContain(SECRET);
    expect(written).not.toContain(BARE);
    // The engine served both calls.
    const calls = readFileSync(traced.callLog, 'utf8');
    for (const id of ids) expect(calls).toContain(id);
  });
});
