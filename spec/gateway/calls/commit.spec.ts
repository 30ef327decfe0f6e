/**
 * Commit semantics, in-process over real sockets: a runner that took a call and then failed
 * gives the client 502 and the call is never offered to another runner; a runner that
 * refused the connection is skipped.
 */
import { describe, expect, it } from 'vitest';
import type { GatewayOptions } from '../../../gateway/options.ts';
import { createGateway } from '../../../gateway/server.ts';
import { freePort } from '../../../placer/kernel/processes.ts';
import type { Placer, Runner, RunnerCall } from '../../../placer/types.ts';
import { createSimEngine } from '../../../runner/engines/sim/server.ts';
import type { SimEngineOptions } from '../../../runner/engines/sim/options.ts';
import type { SimEngine } from '../../../runner/engines/sim/server.ts';
import { createRunner } from '../../../runner/server.ts';
import type { RunnerServer } from '../../../runner/server.ts';
import { chatBody, postJson } from '../../support/fleet.ts';
import { startScriptedEngine } from '../../support/scripted-engine.ts';
import { serversForEach } from '../../support/servers.ts';

const { cleanups } = serversForEach();

/** An engine that is healthy and lists a model, but drops every call's connection unanswered. */
async function droppingEngine(): Promise<string> {
  const engine = await startScriptedEngine(['sim-small'], (req) => req.socket.destroy());
  cleanups.push(() => engine.close());
  return engine.url;
}

/** A simulated engine on port 0, closed after the test. */
async function simEngine(options: SimEngineOptions): Promise<{ engine: SimEngine; url: string }> {
  const engine = createSimEngine(options);
  const { url } = await engine.listen();
  cleanups.push(() => engine.close());
  return { engine, url };
}

async function runnerFor(engine: string): Promise<{ runner: RunnerServer; url: string }> {
  const runner = createRunner({ engine });
  const { url } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return { runner, url };
}

/** A runner in front of a simulated engine of `options`, both closed after the test. */
async function simRunner(options: SimEngineOptions) {
  const { engine, url } = await simEngine(options);
  return { engine, runner: await runnerFor(url) };
}

/** Offers runners in the order their URLs were given to the gateway. */
function inOrder(urls: string[]): Placer {
  const rank = (r: Runner<unknown>) => urls.findIndex((u) => new URL(u).host === r.id);
  return {
    name: 'in-order',
    order: <R extends Runner<unknown>>(_call: RunnerCall, runners: readonly R[]) =>
      [...runners].sort((a, b) => rank(a) - rank(b)),
  };
}

/** A gateway with `options` on port 0, closed after the test; resolves with its URL. */
async function gatewayWith(options: GatewayOptions): Promise<string> {
  const gateway = createGateway(options);
  const { url } = await gateway.listen();
  cleanups.push(() => gateway.close());
  return url;
}

/** A gateway offering the runners at `urls` in that order, with `callTimeout` when given. */
function gatewayOver(urls: string[], callTimeout?: number): Promise<string> {
  return gatewayWith({ runners: urls, placer: inOrder(urls), ...(callTimeout ? { callTimeout } : {}) });
}

describe('commit semantics', () => {
  it('answers 502 when the runner took the call and its engine failed, without trying the next runner', async () => {
    const bad = await runnerFor(await droppingEngine());
    const { engine, runner: good } = await simRunner({ ttftMs: 0, itlMs: 0 });
    const url = await gatewayOver([bad.url, good.url]);

    const res = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(502);
    expect(res.json.error.code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');
    expect(res.json.error.message).toContain('RUNNER_ENGINE_FAILED');
    expect(engine.stats().received).toBe(0);
    expect(good.runner.status().calls.served).toBe(0);
    expect(bad.runner.status().calls.failed).toBe(1);
  });

  it('skips a runner whose port refuses connections and places on the next', async () => {
    const goneUrl = `http://127.0.0.1:${await freePort()}`;
    const { engine, runner: good } = await simRunner({ ttftMs: 0, itlMs: 0 });
    const url = await gatewayOver([goneUrl, good.url]);

    const res = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(200);
    expect(engine.stats().received).toBe(1);
  });
});

describe('call timeout', () => {
  it('stops a call at its deadline: 504 before any output, an error event mid-stream, and the engine aborts', async () => {
    const { engine, runner } = await simRunner({ ttftMs: 0, itlMs: 40, outputTokens: 100 });
    const url = await gatewayOver([runner.url], 300);

    const whole = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(whole.status).toBe(504);
    expect(whole.json.error.code).toBe('GW_CALL_TIMEOUT');

    const streamed = await postJson(`${url}/v1/chat/completions`, chatBody({ stream: true }));
    expect(streamed.status).toBe(200);
    expect(streamed.text).toContain('GW_CALL_TIMEOUT');
    expect(streamed.text).not.toContain('[DONE]');
    await expect.poll(() => engine.stats().aborted, { timeout: 5000 }).toBe(2);
  });
});

describe('a runner whose engine is still starting', () => {
  it('is not taken for serving no models: the call waits for it and succeeds once the engine is up', async () => {
    const enginePort = await freePort();
    const runner = createRunner({ engine: `http://127.0.0.1:${enginePort}`, engineProbeInterval: 1000 });
    const { url: runnerUrl } = await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    const url = await gatewayWith({ runners: [runnerUrl], statusInterval: 50 });

    const pending = postJson(`${url}/v1/chat/completions`, chatBody());
    await expect.poll(() => runner.status().calls.rejected, { timeout: 5000, interval: 10 }).toBeGreaterThan(0);
    const engine = createSimEngine({ ttftMs: 0, itlMs: 0 });
    await engine.listen(enginePort);
    cleanups.push(() => engine.close());
    const res = await pending;
    expect(res.status).toBe(200);
    expect(engine.stats().received).toBe(1);
  });
});

describe('maxInFlight', () => {
  it('refuses a call past the cap with 503 GW_OVERLOADED and Retry-After, and serves again once below it', async () => {
    const { engine, runner } = await simRunner({ ttftMs: 0, itlMs: 30, outputTokens: 20 });
    const url = await gatewayWith({ runners: [runner.url], maxInFlight: 1 });
    const first = postJson(`${url}/v1/chat/completions`, chatBody());
    await expect.poll(() => engine.stats().running, { timeout: 5000, interval: 5 }).toBe(1);
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('GW_OVERLOADED');
    expect(refused.headers['retry-after']).toBe('1');
    expect((await first).status).toBe(200);
    expect((await postJson(`${url}/v1/chat/completions`, chatBody())).status).toBe(200);
  });
});
