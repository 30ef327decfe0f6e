/**
 * Fault: a runner stopped with SIGSTOP after a call it committed had ended, and while it holds
 * detached calls (hung-runner.spec.ts covers a stop before commit and mid-stream). Real
 * processes: two sim engines, a runner in front of each, a gateway with small bounds.
 *
 * What must hold: the call that ended keeps its answer and is not run again; the next calls go
 * to the other runner within the response bound; a detached call the stopped runner holds ends
 * `failed` with GW_RUNNER_STALLED within the idle bound instead of staying `running`, while the
 * other runner's detached calls succeed; after SIGCONT the runner serves again. Each call ran
 * once (the engines' counters and their call log).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatBody, eventually, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { flags } from '../support/command-line.ts';
import { QUICK_RUNNER_CHECKS } from './quick-checks.ts';
import { callRecord, callRuns, engineRequests, engineRunning, finalRecord, signal, sum } from '../support/faults.ts';

const RESPONSE_TIMEOUT_MS = 1000;
const IDLE_TIMEOUT_MS = 1500;
const ASYNC = { prefer: 'respond-async' };

describe('fault: a runner stopped with SIGSTOP after commit', () => {
  let fleet: Fleet;
  let gw: string;
  let callLog: string;
  let stopped = false;
  const engines = () => fleet.nodes.map((n) => n.engine);
  const runner1 = () => fleet.nodes[0]!.runner;
  const stop = () => {
    signal(runner1().child.pid, 'SIGSTOP');
    stopped = true;
  };
  const resume = () => {
    if (stopped) signal(runner1().child.pid, 'SIGCONT');
    stopped = false;
  };

  beforeAll(async () => {
    callLog = join(mkdtempSync(join(tmpdir(), 'sluice-runner-stop-')), 'calls.log');
    fleet = await startFleet({
      nodes: 2,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '20', '--call-log', callLog],
      runnerArgs: ['--slots', '8'],
      gatewayArgs: flags({
        'runner-response-timeout': `${RESPONSE_TIMEOUT_MS}ms`,
        'stream-idle-timeout': `${IDLE_TIMEOUT_MS}ms`,
        ...QUICK_RUNNER_CHECKS,
      }),
    });
    gw = fleet.gateway.url;
  }, 60_000);
  afterEach(resume);
  afterAll(async () => {
    resume();
    await fleet?.stop();
  });

  /** Sync calls until one lands on runner 1 (round-robin gets there within two); their ids. */
  async function callOnRunner1(): Promise<string[]> {
    const ids: string[] = [];
    await eventually(
      async () => {
        const r = await postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
        expect(r.status).toBe(200);
        ids.push(String(r.headers['sluice-call-id']));
        return r.headers['sluice-runner-id'] === 'runner-1';
      },
      15_000,
      'a call on runner 1',
    );
    return ids;
  }

  function ranOnce(ids: string[]): void {
    const runs = callRuns(callLog);
    for (const id of ids) expect(runs.get(id), `runs of call ${id}`).toBe(1);
  }

  it('keeps the answer of a call that ended before the stop, sends the next calls elsewhere, and serves again after SIGCONT', async () => {
    const before = await engineRequests(engines());
    const ids = await callOnRunner1();
    const ranOn1 = (await engineRequests(engines()))[0]!;
    stop();

    const started = Date.now();
    const next = await Promise.all(
      Array.from({ length: 6 }, () => postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }))),
    );
    for (const r of next) {
      expect(r.status).toBe(200);
      expect(r.headers['sluice-runner-id']).toBe('runner-2');
      ids.push(String(r.headers['sluice-call-id']));
    }
    // At most one response bound spent on the stopped runner, not a call timeout (minutes);
    // 8 s over the bound is room for a busy machine.
    expect(Date.now() - started).toBeLessThan(RESPONSE_TIMEOUT_MS + 8000);
    expect((await engineRequests(engines()))[0]).toBe(ranOn1);

    resume();
    // For a moment after it wakes it answers busy (runner/stall-watch.ts); then it takes calls.
    ids.push(...(await callOnRunner1()));
    const after = await engineRequests(engines());
    expect(sum(after) - sum(before)).toBe(ids.length);
    ranOnce(ids);
  }, 60_000);

  it("ends a detached call the stopped runner holds with GW_RUNNER_STALLED within the idle bound; the other runner's succeed", async () => {
    await callOnRunner1();
    const before = await engineRequests(engines());
    // Streamed, so a runner that is not stopped sends a chunk every 20 ms; 400 tokens take 8 s,
    // so the calls still run when the runner is stopped, however slowly the steps below go.
    const body = chatBody({ stream: true, ignore_eos: true, max_tokens: 400 });
    const accepted = await Promise.all(
      Array.from({ length: 4 }, () => postJson(`${gw}/v1/chat/completions`, body, ASYNC)),
    );
    for (const a of accepted) expect(a.status).toBe(202);
    const ids = accepted.map((a) => a.json.id as string);
    await eventually(
      async () => sum(await Promise.all(engines().map(engineRunning))) === 4,
      15_000,
      'the detached calls running',
    );
    const held = new Set(
      (await Promise.all(ids.map((id) => callRecord(gw, id))))
        .filter((r) => r.runner === 'runner-1')
        .map((r) => r.id as string),
    );
    expect(held.size).toBeGreaterThan(0);

    stop();
    const stoppedAt = Date.now();
    for (const id of [...held]) {
      const record = await finalRecord(gw, id, IDLE_TIMEOUT_MS + 10_000);
      const waited = Date.now() - stoppedAt;
      expect(record.status).toBe('failed');
      expect(record.error.code).toBe('GW_RUNNER_STALLED');
      expect(record.error.message).toContain('streamIdleTimeout');
      // The idle bound counts from the gateway's last byte, which can come a little before the
      // stop: half the bound shows it was waited for. Above: cut by that bound, not the call's
      // timeout (minutes), with 8 s of room for a busy machine.
      expect(waited).toBeGreaterThanOrEqual(IDLE_TIMEOUT_MS / 2);
      expect(waited).toBeLessThan(IDLE_TIMEOUT_MS + 8000);
    }
    for (const id of ids.filter((i) => !held.has(i))) {
      const record = await finalRecord(gw, id, 30_000);
      expect(record.status).toBe('succeeded');
      const result = await request(`${gw}/v1/calls/${id}/result`);
      expect(result.statusCode).toBe(200);
      expect(await result.body.text()).toContain('data: [DONE]');
    }

    resume();
    const again = await callOnRunner1();
    const after = await engineRequests(engines());
    expect(sum(after) - sum(before)).toBe(4 + again.length);
    ranOnce([...ids, ...again]);
  }, 90_000);

  // A runner sends a detached call's 202 at its accept window and then nothing until its
  // engine's whole answer: that silence is not a stall. This failed while the gateway bounded a
  // detached body by streamIdleTimeout; it is now bounded by the runner's liveness.
  it("does not end a healthy runner's non-streamed detached call that outlasts the idle bound", async () => {
    // The engine's answer comes in one piece after 3 s: silence on the wire that is not a stall.
    const accepted = await postJson(
      `${gw}/v1/chat/completions`,
      chatBody({ ignore_eos: true, max_tokens: 150 }),
      ASYNC,
    );
    expect(accepted.status).toBe(202);
    const record = await finalRecord(gw, accepted.json.id, 20_000);
    expect(record.error).toBeUndefined();
    expect(record.status).toBe('succeeded');
  });
});
