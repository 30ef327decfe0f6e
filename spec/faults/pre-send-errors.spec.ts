/**
 * Fault: an error raised before any byte reached a runner was reported as a failure after commit
 * ("502 GW_RUNNER_FAILED_AFTER_COMMIT ... may have run"): undici refuses some requests (an
 * `Expect` header, for one) before it sends anything. Such an error is now a 400 that says
 * nothing reached a runner, and no runner is offered the call.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { HttpRunner } from '../../gateway/fleet/http-runner.ts';
import { RunnerEntry } from '../../gateway/fleet/runner-entry.ts';
import { systemClock } from '../../placer/kernel/index.ts';
import { serversForEach } from '../support/servers.ts';
import { gatewayCall } from '../support/gateway-call.ts';

const { cleanups } = serversForEach();

describe('a call the HTTP client refuses to send', () => {
  it('is refused with 400 GW_REQUEST_NOT_FORWARDABLE, and nothing reaches the runner', async () => {
    let received = 0;
    const server = createServer((req, res) => {
      received++;
      req.resume();
      res.end('ran');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const clock = systemClock;
    const transport = new HttpRunner(url, {
      connectTimeout: 2000,
      responseTimeout: 5000,
      streamIdleTimeout: 60_000,
      clock,
    });
    const runner = new RunnerEntry(url.host, transport, {
      clock,
      breaker: { threshold: 5, openFor: 30_000, closeAfter: 2 },
      streamIdleTimeout: 60_000,
      onChange: () => {},
    });
    cleanups.push(() => runner.close({ abortCalls: true }));
    const call = gatewayCall(Date.now(), {
      // undici sends no request with an Expect header at all.
      headers: { 'content-type': 'application/json', expect: '100-continue' },
      body: Buffer.from('{"model":"sim-small"}'),
    });
    const error = await runner.tryExec(call).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: 'GW_REQUEST_NOT_FORWARDABLE', status: 400 });
    expect((error as Error).message).toContain('nothing reached a runner');
    expect(received).toBe(0);
    // Not the runner's fault: its breaker and health are untouched.
    expect(runner.breaker.state).toBe('closed');
    expect(runner.health.reachable).toBe(true);
  });
});
