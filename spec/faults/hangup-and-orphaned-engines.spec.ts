/**
 * Fault: SIGHUP killed without draining, and a dead runner left its engine behind. A gateway
 * without reloadable files exited 129 on SIGHUP (a closed terminal sends it) and a runner had no
 * handler at all; a runner that had launched an engine and died without running its exit hook
 * (SIGHUP's default action, SIGKILL) left the engine listening, so a new runner with the same
 * profile could not start ("profile.port ... is not free").
 *
 * Real processes on 127.0.0.1: a sim engine, a runner and a gateway started here, and a runner
 * that launches its own sim engine from a profile.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../placer/kernel/processes.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { runnerArgs, simEngineArgs } from '../../placer/kernel/service-args.ts';
import { chatBody, eventually, postJson, runnerStatus, servicesForSuite } from '../support/fleet.ts';

/** Process groups of engines the runners here launched: killed at the end if a test failed to see them go. */
const engineGroups: number[] = [];
afterAll(() => {
  for (const group of engineGroups) {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // Gone, as it should be.
    }
  }
});
// Registered after the kill above, so its stops run first (hooks after tests run last-first).
const service = servicesForSuite();

function exited(service: ChildService): boolean {
  return service.child.exitCode !== null || service.child.signalCode !== null;
}

/**
 * The live processes of process group `group`, from /proc; a zombie (dead, waiting for its new
 * parent to reap it) is not live.
 */
function liveMembers(group: number): number[] {
  const members: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended while we looked
    }
    // After the command's name in parentheses: state, parent pid, process group.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === group && state !== 'Z') members.push(Number(entry));
  }
  return members;
}

describe('SIGHUP to a serving gateway and runner', () => {
  it('is logged and ignored: both keep serving', async () => {
    const engine = await service(simEngineArgs({}, ['--log-level', 'warn']));
    const runner = await service(runnerArgs({ engine: engine.url, id: 'r-hup' }, ['--log-level', 'info']));
    const gateway = await service([
      'gateway',
      '--port',
      '0',
      '--runners',
      runner.url,
      '--status-interval',
      '100ms',
      '--log-level',
      'info',
    ]);
    for (const target of [gateway, runner]) {
      target.child.kill('SIGHUP');
      // Either event settles it: the line that says the signal was handled, or the exit.
      await eventually(
        () => target.output().includes('sighup ignored: nothing to reload') || exited(target),
        10_000,
        'SIGHUP to be handled',
      );
      expect(exited(target)).toBe(false);
    }
    const answer = await postJson(`${gateway.url}/v1/chat/completions`, chatBody());
    expect(answer.status).toBe(200);
    expect(answer.headers['sluice-runner-id']).toBe('r-hup');
    expect((await runnerStatus(runner)).calls.served).toBe(1);
  });
});

describe('a runner that launched an engine and is killed with SIGKILL', () => {
  it('takes its engine with it, so a new runner with the same profile starts', async () => {
    const profile = JSON.stringify({
      kind: 'sim',
      model: 'sim-small',
      port: await freePort(),
      args: ['--ttft-ms', '0', '--itl-ms', '0'],
    });
    const args = ['runner', '--port', '0', '--log-level', 'warn', '--profile', profile];
    const first = await service(args);
    await expect.poll(async () => (await runnerStatus(first)).ready, { timeout: 20_000, interval: 100 }).toBe(true);
    // The engine leads its own process group: its workers, if it had any, are in it too.
    const pid = (await runnerStatus(first)).engines[0].supervised.pid as number;
    engineGroups.push(pid);
    expect(liveMembers(pid)).toContain(pid);

    expect(await first.stop('SIGKILL')).toBe(null);
    await eventually(() => liveMembers(pid).length === 0, 10_000, "the dead runner's engine to go");

    const second = await service(args);
    await expect.poll(async () => (await runnerStatus(second)).ready, { timeout: 20_000, interval: 100 }).toBe(true);
    expect((await postJson(`${second.url}/v1/chat/completions`, chatBody())).status).toBe(200);
    engineGroups.push((await runnerStatus(second)).engines[0].supervised.pid as number);
  });
});
