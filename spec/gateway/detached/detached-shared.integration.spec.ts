/**
 * Detached calls across processes: signed callbacks to a real receiver, two gateways sharing
 * one real redis-server (status, result and cancel through the gateway that does not own the
 * call), a gateway killed mid-call, and the SSRF guard.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../../gateway/cli/entry.ts';
import type { ChildService } from '../../../placer/kernel/processes.ts';
import { createCallbackPolicy, createCallbackSender } from '../../../gateway/callbacks/index.ts';
import { createGateway } from '../../../gateway/server.ts';
import { startCallbackReceiver } from '../../support/callbacks.ts';
import type { CallbackReceiver } from '../../support/callbacks.ts';
import { chatBody, eventually, getJson, postJson, startFleet } from '../../support/fleet.ts';
import type { Fleet } from '../../support/fleet.ts';
import { startRedis } from '../../support/redis.ts';
import type { RedisServer } from '../../support/redis.ts';
import { finalRecord } from '../../support/faults.ts';
import { commandLine } from '../../support/command-line.ts';
import type { FlagValues } from '../../support/command-line.ts';
import { abortedCalls, cancelSeenByEngine } from './cancels.ts';

const ASYNC = { prefer: 'respond-async' };
const short = (extra: Record<string, unknown> = {}) => chatBody({ max_tokens: 10, ...extra });
const secretKey = randomBytes(32);
const secret = `whsec_${secretKey.toString('base64')}`;

describe('detached calls shared by two gateways over redis', () => {
  let redis: RedisServer;
  let fleet: Fleet;
  let other: ChildService;
  let hooks: CallbackReceiver;
  /** A second gateway over the fleet's runner and the shared store, with the callback secret. */
  const startPeer = (values: FlagValues, rest: readonly string[] = []) =>
    startService(
      commandLine(
        'gateway',
        { 'log-level': 'warn', runners: fleet.nodes[0]!.runner.url, store: redis.url, ...values },
        rest,
      ),
      { env: { ...process.env, SLUICE_CALLBACK_SECRET: secret } },
    );

  beforeAll(async () => {
    [redis, hooks] = await Promise.all([startRedis(), startCallbackReceiver()]);
    fleet = await startFleet({
      nodes: 1,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '30', '--output-tokens', '400'],
      gatewayArgs: [
        '--store',
        redis.url,
        '--gateway-id',
        'gw-a',
        '--call-timeout',
        '3s',
        '--detached-placer-timeout',
        '1s',
        '--execution-headroom',
        '0',
        '--callback-allow',
        hooks.url,
        '--callback-allow-private',
      ],
    });
    other = await startPeer({ 'gateway-id': 'gw-b' });
  }, 90_000);
  afterAll(async () => {
    await Promise.all([fleet?.stop(), other?.stop()]);
    await hooks?.close();
    await redis?.stop();
  });

  it('answers status and result for a call through the gateway that does not own it', async () => {
    // Longer than the runner's accept window (500 ms), so the call is still running at its 202.
    const accepted = await postJson(`${fleet.gateway.url}/v1/chat/completions`, short({ max_tokens: 40 }), ASYNC);
    expect(accepted.status).toBe(202);
    const id = accepted.json.id as string;
    const seen = await getJson(`${other.url}/v1/calls/${id}`);
    expect(seen.status).toBe(200);
    expect(seen.json.status).toBe('running');
    expect((await finalRecord(other.url, id)).status).toBe('succeeded');
    const result = await getJson(`${other.url}/v1/calls/${id}/result`);
    expect(result.status).toBe(200);
    expect(result.json.object).toBe('chat.completion');
  });

  it('reaches the owner with a cancel sent to the other gateway, and the engine sees the abort', async () => {
    const engine = fleet.nodes[0]!.engine;
    const before = await abortedCalls(engine);
    const accepted = await postJson(`${fleet.gateway.url}/v1/chat/completions`, short({ max_tokens: 60 }), ASYNC);
    const id = accepted.json.id as string;
    await cancelSeenByEngine(`${other.url}/v1/calls/${id}`, engine, before, 5000);
    expect((await getJson(`${fleet.gateway.url}/v1/calls/${id}`)).json.status).toBe('cancelled');
  });

  it('posts the result to the callback URL, signed the Standard Webhooks way', async () => {
    // gw-b has the secret; gw-a is run without one to show callbacks are off there.
    const refused = await postJson(`${fleet.gateway.url}/v1/chat/completions`, short(), {
      ...ASYNC,
      'sluice-callback-url': `${hooks.url}/done`,
    });
    expect(refused.json.error.code).toBe('GW_CALLBACKS_DISABLED');
    const b = await startPeer({ 'callback-allow': hooks.url }, ['--callback-allow-private']);
    try {
      const accepted = await postJson(`${b.url}/v1/chat/completions`, short(), {
        ...ASYNC,
        'sluice-callback-url': `${hooks.url}/done?token=abc`,
      });
      expect(accepted.status).toBe(202);
      await eventually(() => hooks.got.length === 1, 10_000, 'the callback');
      const { headers, body } = hooks.got[0]!;
      const id = headers['webhook-id'] as string;
      const timestamp = headers['webhook-timestamp'] as string;
      expect(id).toBe(accepted.json.id);
      expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(300);
      const expected = createHmac('sha256', secretKey).update(`${id}.${timestamp}.${body}`).digest('base64');
      expect((headers['webhook-signature'] as string).split(' ')).toContain(`v1,${expected}`);
      const payload = JSON.parse(body);
      expect(payload).toMatchObject({
        id,
        status: 'succeeded',
        result: { status: 200, contentType: expect.stringContaining('application/json') },
      });
      expect(JSON.parse(payload.result.body).object).toBe('chat.completion');

      const bad = await postJson(`${b.url}/v1/chat/completions`, short(), {
        ...ASYNC,
        'sluice-callback-url': 'not a url',
      });
      expect(bad.status).toBe(400);
      expect(bad.json.error.code).toBe('CALLBACK_URL_REFUSED');
      const elsewhere = await postJson(`${b.url}/v1/chat/completions`, short(), {
        ...ASYNC,
        'sluice-callback-url': 'http://127.0.0.1:9/hook',
      });
      expect(elsewhere.status).toBe(400);
      expect(elsewhere.json.error.code).toBe('CALLBACK_URL_REFUSED');
    } finally {
      await b.stop();
    }
  });

  it('marks a call failed once its lifetime passed when the gateway that ran it was killed', async () => {
    const accepted = await postJson(`${fleet.gateway.url}/v1/chat/completions`, short({ max_tokens: 300 }), ASYNC);
    const id = accepted.json.id as string;
    fleet.gateway.child.kill('SIGKILL');
    expect((await getJson(`${other.url}/v1/calls/${id}`)).json.status).toBe('running');
    // Lifetime: 1 s placer + 3 s call + 0 headroom, then a 5 s grace for a slow owner.
    const status = await finalRecord(other.url, id, 20_000);
    expect(status).toMatchObject({ status: 'failed', error: { code: 'GW_OWNER_LOST' } });
    expect(status.error.message).toContain('gw-a');
  });
});

describe('callback SSRF guard', () => {
  it('refuses a callback to a loopback or private address unless allowed', async () => {
    const gateway = createGateway({
      runners: ['http://127.0.0.1:1'],
      callbacks: createCallbackSender({
        secret,
        policy: createCallbackPolicy({ allow: ['http://127.0.0.1:8080', 'http://10.1.2.3', 'http://localhost:8080'] }),
      }),
    });
    const { url } = await gateway.listen();
    try {
      for (const target of ['http://127.0.0.1:8080/hook', 'http://10.1.2.3/hook', 'http://localhost:8080/hook']) {
        const res = await postJson(`${url}/invoke/fn`, '{}', { ...ASYNC, 'sluice-callback-url': target });
        expect(res.status).toBe(400);
        expect(res.json.error.code).toBe('CALLBACK_URL_REFUSED');
      }
    } finally {
      await gateway.close();
    }
  });
});
