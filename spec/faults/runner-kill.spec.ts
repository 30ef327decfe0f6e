/**
 * Fault: a runner killed with SIGKILL, during calls, after a call it committed had ended, and
 * before calls reach it. Real processes: two sim engines, a runner in front of each, a gateway.
 *
 * What must hold: calls in flight on the killed runner fail clearly (a 502, or a stream's final
 * SSE error event, with GW_RUNNER_FAILED_AFTER_COMMIT) and are never run again elsewhere;
 * detached calls running on it end `failed` with a reason, none left `running`; calls sent
 * while it is dead go to the other runner and succeed. Every case counts the engines' calls
 * (sluice_sim_requests_total, and the engines' shared call log by call id): each call ran once.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { chatBody, eventually, postJson, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';
import { flags } from '../support/command-line.ts';
import { QUICK_RUNNER_CHECKS } from './quick-checks.ts';
import { callRuns, engineRequests, engineRunning, finalRecord, openStream, sum } from '../support/faults.ts';

const ASYNC = { prefer: 'respond-async' };
/**
 * 300 tokens 20 ms apart: about 6 s on the engine, so still running when the runner is killed,
 * however slowly a busy machine takes the steps between starting the calls and the kill.
 */
const long = (extra: Record<string, unknown> = {}) => chatBody({ ignore_eos: true, max_tokens: 300, ...extra });
const RUNNER_ARGS = ['--slots', '8'];

describe('fault: a runner killed with SIGKILL', () => {
  let fleet: Fleet;
  let gw: string;
  let callLog: string;
  /** Runner 1 as restarted after a kill; stopped at the end. */
  let restarted: ChildService | undefined;
  const engines = () => fleet.nodes.map((n) => n.engine);

  beforeAll(async () => {
    callLog = join(mkdtempSync(join(tmpdir(), 'sluice-runner-kill-')), 'calls.log');
    fleet = await startFleet({
      nodes: 2,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '20', '--call-log', callLog],
      runnerArgs: RUNNER_ARGS,
      gatewayArgs: flags(QUICK_RUNNER_CHECKS),
    });
    gw = fleet.gateway.url;
  }, 60_000);
  afterAll(async () => {
    await restarted?.stop('SIGTERM', 5000);
    await fleet?.stop();
  });

  /** Every call id given ran exactly once on the engines, by their call log. */
  function ranOnce(ids: string[]): void {
    const runs = callRuns(callLog);
    for (const id of ids) expect(runs.get(id), `runs of call ${id}`).toBe(1);
  }

  it('fails the calls in flight on it with GW_RUNNER_FAILED_AFTER_COMMIT, streamed or not, and runs none of them again', async () => {
    const before = await engineRequests(engines());
    const url = `${gw}/v1/chat/completions`;
    // Round-robin over two runners puts one stream on each, and spreads the plain calls.
    const streams = await Promise.all([
      openStream(url, long({ stream: true })),
      openStream(url, long({ stream: true })),
    ]);
    const plain = Array.from({ length: 4 }, () => postJson(url, long()));
    await eventually(
      async () => sum(await Promise.all(engines().map(engineRunning))) === 6,
      15_000,
      'all six calls running',
    );
    await Promise.all(streams.map((s) => s.flowing));
    const onKilled = await engineRunning(fleet.nodes[0]!.engine);

    await fleet.nodes[0]!.runner.stop('SIGKILL');

    const streamed = await Promise.all(streams.map((s) => s.done));
    const answered = await Promise.all(plain);
    const killedStreams = streamed.filter((s) => s.headers['sluice-runner-id'] === 'runner-1');
    expect(killedStreams).toHaveLength(1);
    for (const s of streamed) {
      expect(s.status).toBe(200);
      if (s.headers['sluice-runner-id'] === 'runner-1') {
        const last = JSON.parse(s.events.at(-1)!);
        expect(last.error).toMatchObject({ code: 'GW_RUNNER_FAILED_AFTER_COMMIT', type: 'server_error' });
        expect(last.error.message).toMatch(/not retried/);
        expect(s.events).not.toContain('[DONE]');
      } else {
        expect(s.events.at(-1)).toBe('[DONE]');
      }
    }
    const failed = answered.filter((r) => r.status === 502);
    // The plain calls the killed runner held are the ones its engine was running, less its stream.
    expect(failed).toHaveLength(onKilled - 1);
    expect(failed.length).toBeGreaterThan(0);
    for (const r of failed) {
      expect(r.json.error).toMatchObject({ code: 'GW_RUNNER_FAILED_AFTER_COMMIT', type: 'server_error' });
    }
    for (const r of answered.filter((a) => a.status !== 502)) {
      expect(r.status).toBe(200);
      expect(r.headers['sluice-runner-id']).toBe('runner-2');
    }

    const after = await engineRequests(engines());
    expect(after[0]! - before[0]!).toBe(onKilled);
    expect(sum(after) - sum(before)).toBe(6);
    ranOnce([
      ...streamed.map((s) => String(s.headers['sluice-call-id'])),
      ...answered.map((r) => String(r.headers['sluice-call-id'])),
    ]);
  }, 60_000);

  it('ends the detached calls running on it failed with a reason, after a call it committed had ended, and places the next calls elsewhere', async () => {
    // Runner 1 back on its port, where the gateway's --runners list points.
    const { port } = new URL(fleet.nodes[0]!.runner.url);
    restarted = await startService([
      'runner',
      ...flags({ port, engine: fleet.nodes[0]!.engine.url, 'engine-kind': 'sim', id: 'runner-1', 'log-level': 'warn' }),
      ...RUNNER_ARGS,
    ]);
    const before = await engineRequests(engines());
    const url = `${gw}/v1/chat/completions`;
    const ids: string[] = [];
    // A call runner 1 committed and finished: its answer ended before the kill.
    let committed = 0;
    await eventually(
      async () => {
        const r = await postJson(url, chatBody({ max_tokens: 3 }));
        expect(r.status).toBe(200);
        ids.push(String(r.headers['sluice-call-id']));
        committed++;
        return r.headers['sluice-runner-id'] === 'runner-1';
      },
      15_000,
      'a call on the restarted runner',
    );

    const accepted = await Promise.all(Array.from({ length: 4 }, () => postJson(url, long(), ASYNC)));
    for (const a of accepted) expect(a.status).toBe(202);
    const detached = accepted.map((a) => a.json.id as string);
    ids.push(...detached);
    await eventually(
      async () => sum(await Promise.all(engines().map(engineRunning))) === 4,
      15_000,
      'the detached calls running',
    );
    const records = await Promise.all(
      detached.map(async (id) => (await request(`${gw}/v1/calls/${id}`)).body.json() as Promise<any>),
    );
    const onKilled = new Set(records.filter((r) => r.runner === 'runner-1').map((r) => r.id as string));
    expect(onKilled.size).toBeGreaterThan(0);

    await restarted.stop('SIGKILL');

    // The next calls go to the other runner, at once.
    const next = await Promise.all(Array.from({ length: 6 }, () => postJson(url, chatBody({ max_tokens: 3 }))));
    for (const r of next) {
      expect(r.status).toBe(200);
      expect(r.headers['sluice-runner-id']).toBe('runner-2');
      ids.push(String(r.headers['sluice-call-id']));
    }
    // Nothing is left running: the ones on the killed runner fail with a reason, the others succeed.
    for (const id of detached) {
      const record = await finalRecord(gw, id, 20_000);
      if (onKilled.has(id)) {
        expect(record.status).toBe('failed');
        expect(record.error.code).toBe('GW_RUNNER_FAILED_AFTER_COMMIT');
        expect(record.error.message.length).toBeGreaterThan(0);
        expect(record.completedAt).toBeDefined();
      } else {
        expect(record.status).toBe('succeeded');
        const result = await request(`${gw}/v1/calls/${id}/result`);
        expect(result.statusCode).toBe(200);
        expect(((await result.body.json()) as any).usage.completion_tokens).toBe(300);
      }
    }

    const after = await engineRequests(engines());
    expect(sum(after) - sum(before)).toBe(committed + 4 + 6);
    ranOnce(ids);
  }, 60_000);

  it('sends calls made while it is dead to the other runner: all succeed, detached ones too', async () => {
    const before = await engineRequests(engines());
    const url = `${gw}/v1/chat/completions`;
    const [streamed, plain, accepted] = await Promise.all([
      Promise.all(
        Array.from({ length: 4 }, async () => (await openStream(url, chatBody({ stream: true, max_tokens: 5 }))).done),
      ),
      Promise.all(Array.from({ length: 4 }, () => postJson(url, chatBody({ max_tokens: 5 })))),
      Promise.all(Array.from({ length: 2 }, () => postJson(url, chatBody({ max_tokens: 5 }), ASYNC))),
    ]);
    for (const s of streamed) {
      expect(s.status).toBe(200);
      expect(s.headers['sluice-runner-id']).toBe('runner-2');
      expect(s.events.at(-1)).toBe('[DONE]');
    }
    for (const r of plain) {
      expect(r.status).toBe(200);
      expect(r.headers['sluice-runner-id']).toBe('runner-2');
    }
    for (const a of accepted) {
      expect(a.status).toBe(202);
      expect((await finalRecord(gw, a.json.id)).status).toBe('succeeded');
    }

    const after = await engineRequests(engines());
    expect(after[0]).toBe(before[0]);
    expect(after[1]! - before[1]!).toBe(10);
    ranOnce([
      ...streamed.map((s) => String(s.headers['sluice-call-id'])),
      ...plain.map((r) => String(r.headers['sluice-call-id'])),
      ...accepted.map((a) => a.json.id as string),
    ]);
  }, 60_000);
});
