/**
 * Fault: a hung runner (SIGSTOP), before and during a call. It used to stall calls until their
 * 10-minute timeout, keep getting new ones, and hold detached calls past their placer deadline.
 * Now: a call it never acknowledged goes elsewhere within the response bound, the runner is
 * reported hung and passed over until it answers again, a stream it stopped mid-way ends with
 * GW_RUNNER_STALLED after the idle bound, and no call ever runs twice.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { asOperator, chatBody, eventually, metrics, metricValue, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { flags } from '../support/command-line.ts';
import { QUICK_RUNNER_CHECKS } from './quick-checks.ts';

// Bounds long enough that a busy machine's delays stay well inside them: an assertion that a
// bound was not waited out has the whole bound as slack.
const RESPONSE_TIMEOUT_MS = 5000;
const IDLE_TIMEOUT_MS = 1500;
/** Past the response bound, so both runners are found hung before a detached call gives up. */
const DETACHED_DEADLINE_MS = 7000;

/** The calls each engine was offered (refused ones included), by node index. */
async function engineCalls(fleet: Fleet): Promise<number[]> {
  return Promise.all(fleet.nodes.map(async (n) => metricValue(await metrics(n.engine), 'sluice_sim_requests_total')));
}

async function runnersView(fleet: Fleet): Promise<Array<Record<string, any>>> {
  const res = await request(`${fleet.gateway.url}/v1/runners`, { headers: asOperator });
  return ((await res.body.json()) as { data: Array<Record<string, any>> }).data;
}

describe('a hung runner', () => {
  let fleet: Fleet;
  const stopped = new Set<number>();
  const stop = (i: number) => {
    process.kill(fleet.nodes[i]!.runner.child.pid!, 'SIGSTOP');
    stopped.add(i);
  };
  const resume = (i: number) => {
    if (stopped.delete(i)) process.kill(fleet.nodes[i]!.runner.child.pid!, 'SIGCONT');
  };

  beforeAll(async () => {
    fleet = await startFleet({
      nodes: 2,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '20', '--output-tokens', '5'],
      runnerArgs: ['--slots', '8'],
      gatewayArgs: flags({
        'runner-response-timeout': `${RESPONSE_TIMEOUT_MS}ms`,
        'stream-idle-timeout': `${IDLE_TIMEOUT_MS}ms`,
        'detached-placer-timeout': `${DETACHED_DEADLINE_MS}ms`,
        ...QUICK_RUNNER_CHECKS,
      }),
    });
  }, 60_000);
  afterEach(async () => {
    for (const i of [...stopped]) resume(i);
    // Back to a fleet where both runners answer, for the next case.
    await eventually(
      async () => (await runnersView(fleet)).every((r) => r.health !== 'hung'),
      20_000,
      'both runners answering',
    );
  });
  afterAll(async () => {
    for (const i of [...stopped]) resume(i);
    await fleet?.stop();
  });

  it('sends calls it never acknowledged elsewhere, reports it hung, and takes it back once it answers', async () => {
    const before = await engineCalls(fleet);
    stop(0);
    const results = await Promise.all(
      Array.from({ length: 10 }, () => postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody())),
    );
    expect(results.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(new Set(results.map((r) => r.headers['sluice-runner-id']))).toEqual(new Set(['runner-2']));

    const view = await runnersView(fleet);
    const hung = view.find((r) => r.url === new URL(fleet.nodes[0]!.runner.url).origin)!;
    expect(hung.health).toBe('hung');
    expect(hung.lastError).toMatch(/responseTimeout|unanswered/);
    // New calls pass it over without waiting on it: an offer sent to it would wait out the whole
    // response bound (a timer: never less), so the bound itself separates the two, with all of
    // it as room for a busy machine.
    const started = Date.now();
    expect((await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody())).status).toBe(200);
    expect(Date.now() - started).toBeLessThan(RESPONSE_TIMEOUT_MS);

    const after = await engineCalls(fleet);
    expect(after[0]).toBe(before[0]);
    expect(after[1]! - before[1]!).toBe(11);

    resume(0);
    await eventually(
      async () => (await runnersView(fleet)).every((r) => r.health === 'ok'),
      20_000,
      'the runner answering again',
    );
    // For a moment after it wakes it answers busy (see runner/stall-watch.ts); then it takes calls.
    let toRunner1 = 0;
    await eventually(
      async () => {
        const r = await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody());
        expect(r.status).toBe(200);
        if (r.headers['sluice-runner-id'] === 'runner-1') toRunner1++;
        return toRunner1 > 0;
      },
      10_000,
      'a call on the runner that woke',
    );
    // The calls it held while stopped were given up by the gateway, and it ran none of them
    // when it woke: its engine saw only the calls placed on it since.
    expect((await engineCalls(fleet))[0]! - before[0]!).toBe(toRunner1);
  }, 60_000);

  it('ends a stream its runner stopped mid-way with GW_RUNNER_STALLED after the idle bound, and runs it nowhere else', async () => {
    const before = await engineCalls(fleet);
    // About 10 s of tokens (ignore_eos: the engine would stop at its 5): still streaming when this
    // client stops the runner, however late a busy machine lets it read the first event.
    const body = chatBody({ stream: true, ignore_eos: true, max_tokens: 500 });
    const res = await request(`${fleet.gateway.url}/v1/chat/completions`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(200);
    const runner = String(res.headers['sluice-runner-id']);
    const index = runner === 'runner-1' ? 0 : 1;
    let text = '';
    let stoppedAt = 0;
    for await (const chunk of res.body) {
      text += String(chunk);
      if (!stoppedAt && text.includes('data: ')) {
        stop(index);
        stoppedAt = Date.now();
      }
    }
    const waited = Date.now() - stoppedAt;
    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    const last = JSON.parse(events.at(-1)!);
    expect(last.error.code).toBe('GW_RUNNER_STALLED');
    expect(last.error.message).toContain('streamIdleTimeout');
    // The idle bound counts from the gateway's last byte, which may come a little before this
    // client saw the first one and stopped the runner: half the bound shows it was waited for.
    // Above, cut by that bound, not left to the call's 10-minute timeout; 8 s is room for load.
    expect(waited).toBeGreaterThanOrEqual(IDLE_TIMEOUT_MS / 2);
    expect(waited).toBeLessThan(IDLE_TIMEOUT_MS + 8000);
    resume(index);
    const after = await engineCalls(fleet);
    expect(after.reduce((a, b) => a + b, 0) - before.reduce((a, b) => a + b, 0)).toBe(1);
  }, 60_000);

  it('answers detached calls within their placer deadline when the only live runner is hung', async () => {
    stop(0);
    stop(1);
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 4 }, () =>
        postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody(), { prefer: 'respond-async' }),
      ),
    );
    const elapsed = Date.now() - started;
    for (const r of results) {
      expect(r.status).toBe(503);
      expect(r.json.error.code).toBe('PLACER_TIMEOUT');
      expect(r.json.error.runners.map((x: { reason: string }) => x.reason)).toEqual(['hung', 'hung']);
    }
    // The deadline holds (the PLACER_TIMEOUT above), give or take the machine's scheduling: not
    // the runners' silence, which lasts until the test resumes them.
    expect(elapsed).toBeGreaterThanOrEqual(DETACHED_DEADLINE_MS - 100);
    expect(elapsed).toBeLessThan(DETACHED_DEADLINE_MS + 8000);
  }, 60_000);
});
