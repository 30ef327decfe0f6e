/**
 * Detached calls in-process, over real sockets: what happens when the store cannot keep a
 * result, and /invoke calls made detached.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import { createMemoryStore } from '../../gateway/store/memory.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import { createRunner } from '../../runner/server.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

async function gatewayOverSim(options: Partial<GatewayOptions>) {
  const engine = createSimEngine({ ttftMs: 0, itlMs: 1, outputTokens: 400 });
  const { url: engineUrl } = await engine.listen();
  cleanups.push(() => engine.close());
  const runner = createRunner({ engine: engineUrl, engineKind: 'sim' });
  const { url: runnerUrl } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  const gateway = createGateway({ runners: [runnerUrl], ...options });
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

const status = async (url: string) => ((await (await request(url)).body.json()) as any);

describe('detached calls in-process', () => {
  it('fails the call with GW_RESULT_NOT_STORED when the store refuses its result', async () => {
    const url = await gatewayOverSim({ store: createMemoryStore({ maxBytes: 2000 }) });
    const accepted = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 300 }), { prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    const monitor = `${url}/v1/calls/${accepted.json.id}`;
    await eventually(async () => (await status(monitor)).status !== 'running', 10_000, 'the call to end');
    expect(await status(monitor)).toMatchObject({ status: 'failed', error: { code: 'GW_RESULT_NOT_STORED' } });
  });

  it('runs an /invoke call detached and keeps its result with its content type', async () => {
    const url = await gatewayOverSim({});
    const accepted = await postJson(`${url}/invoke/resize`, '{"w":1}', { prefer: 'respond-async', 'sluice-callback-url': '' });
    // An empty callback URL is not a URL: refused before anything runs.
    expect(accepted.status).toBe(400);
    const ok = await postJson(`${url}/invoke/resize`, '{"w":1}', { 'sluice-invoke-type': 'detached' });
    expect(ok.status).toBe(202);
    await eventually(async () => (await status(`${url}/v1/calls/${ok.json.id}`)).status === 'succeeded', 10_000, 'the call');
    const result = await request(`${url}/v1/calls/${ok.json.id}/result`);
    expect(result.statusCode).toBe(200);
    expect(result.headers['content-type']).toContain('application/json');
    expect(await result.body.json()).toMatchObject({ fn: 'resize', bytes: 7 });
  });
});
