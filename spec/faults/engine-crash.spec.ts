/**
 * Fault: the engine behind a runner dies mid-call (SIGKILL of the process the runner launched
 * from its profile). Real processes: a runner supervising a sim engine, and a gateway.
 *
 * What must hold: every call in flight gets a clear failure, a stream its final SSE error event,
 * a plain call a 502, both GW_RUNNER_FAILED_AFTER_COMMIT, and a detached call ends `failed`
 * with the runner's RUNNER_ENGINE_FAILED; the runner relaunches the engine and later calls
 * succeed; no call ran twice (the engine's call log, which outlives the killed process, and the
 * relaunched engine's own counters).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../placer/kernel/processes.ts';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { chatBody, eventually, postJson } from '../support/fleet.ts';
import { commandLine } from '../support/command-line.ts';
import { alive, callRuns, engineRequests, engineRunning, finalRecord, openStream, signal } from '../support/faults.ts';

describe('fault: a supervised engine killed mid-call', () => {
  const started: ChildService[] = [];
  let runner: ChildService;
  let gw: string;
  let engine: { url: string };
  let callLog: string;

  const supervised = async () =>
    ((await (await request(`${runner.url}/status`)).body.json()) as any).engines[0].supervised;

  beforeAll(async () => {
    callLog = join(mkdtempSync(join(tmpdir(), 'sluice-engine-crash-')), 'calls.log');
    const port = await freePort();
    engine = { url: `http://127.0.0.1:${port}` };
    const profile = {
      kind: 'sim',
      model: 'sim-small',
      port,
      args: ['--ttft-ms', '0', '--itl-ms', '20', '--call-log', callLog],
    };
    runner = await startService(
      commandLine('runner', {
        'log-level': 'error',
        slots: 8,
        'engine-restart-backoff': '50ms',
        profile: JSON.stringify(profile),
      }),
    );
    started.push(runner);
    const gateway = await startService(
      commandLine('gateway', { 'log-level': 'error', runners: runner.url, 'status-interval': '300ms' }),
    );
    started.push(gateway);
    gw = gateway.url;
    await eventually(
      async () => ((await (await request(`${runner.url}/status`)).body.json()) as any).ready === true,
      20_000,
      'the engine to be ready',
    );
  }, 60_000);
  afterAll(() => Promise.all(started.map((s) => s.stop('SIGTERM', 15_000))));

  it('fails the calls in flight clearly, relaunches the engine, serves later calls, and runs nothing twice', async () => {
    const url = `${gw}/v1/chat/completions`;
    const first = await supervised();
    // About 6 s each on the engine: still in flight at the kill, however slowly a busy machine
    // takes the steps before it.
    const long = (extra: Record<string, unknown> = {}) => chatBody({ ignore_eos: true, max_tokens: 300, ...extra });
    const stream = await openStream(url, long({ stream: true }));
    const plain = postJson(url, long());
    const accepted = await postJson(url, long(), { prefer: 'respond-async' });
    expect(accepted.status).toBe(202);
    await eventually(async () => (await engineRunning(engine)) === 3, 15_000, 'the three calls running');
    await stream.flowing;

    signal(first.pid, 'SIGKILL');

    const streamed = await stream.done;
    expect(streamed.status).toBe(200);
    const last = JSON.parse(streamed.events.at(-1)!);
    expect(last.error).toMatchObject({ code: 'GW_RUNNER_FAILED_AFTER_COMMIT', type: 'server_error' });
    expect(last.error.message).toContain('RUNNER_ENGINE_FAILED');
    expect(streamed.events).not.toContain('[DONE]');

    const failed = await plain;
    expect(failed.status).toBe(502);
    expect(failed.json.error).toMatchObject({ code: 'GW_RUNNER_FAILED_AFTER_COMMIT', type: 'server_error' });
    expect(failed.json.error.message).toContain('RUNNER_ENGINE_FAILED');

    const record = await finalRecord(gw, accepted.json.id, 10_000);
    expect(record.status).toBe('failed');
    expect(record.error.code).toBe('RUNNER_ENGINE_FAILED');
    expect(record.error.message).toMatch(/engine failed/);

    // Relaunched by the runner: a new process, the kill recorded.
    await eventually(async () => (await supervised()).state === 'ready', 20_000, 'the relaunched engine to be ready');
    const now = await supervised();
    expect(now.pid).not.toBe(first.pid);
    expect(now.restarts).toBe(first.restarts + 1);
    expect(now.lastExit).toMatchObject({ signal: 'SIGKILL' });
    expect(alive(first.pid)).toBe(false);

    const later = await Promise.all(Array.from({ length: 4 }, () => postJson(url, chatBody({ max_tokens: 3 }))));
    for (const r of later) expect(r.status).toBe(200);

    // The new engine counts only the later calls: none of the three was offered to it again.
    expect(await engineRequests([engine])).toEqual([4]);
    const runs = callRuns(callLog);
    const ids = [
      String(streamed.headers['sluice-call-id']),
      String(failed.headers['sluice-call-id']),
      accepted.json.id as string,
      ...later.map((r) => String(r.headers['sluice-call-id'])),
    ];
    for (const id of ids) expect(runs.get(id), `runs of call ${id}`).toBe(1);
    expect(runs.size).toBe(ids.length);
  }, 60_000);
});
