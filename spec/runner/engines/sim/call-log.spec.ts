import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { countCallRuns, countRequestRuns } from '../../../../runner/engines/sim/call-log.ts';
import {
  runSimEngineCommand,
  SimOptionError,
  type SimEngine,
  type SimEngineCommandOptions,
} from '../../../../runner/engines/sim/index.ts';

let dir: string;
let engines: SimEngine[] = [];
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sim-call-log-'));
});
afterEach(async () => {
  await Promise.all(engines.map((e) => e.close()));
  engines = [];
  await rm(dir, { recursive: true, force: true });
});

const fast = { prefillOverheadMs: 1, itlMs: 0, outputTokens: 2 };

async function start(options: Partial<SimEngineCommandOptions>): Promise<string> {
  let url = '';
  const engine = await runSimEngineCommand(
    { port: 0, host: '127.0.0.1', ...fast, ...options },
    (line) => (url = JSON.parse(line).url),
  );
  engines.push(engine);
  return url;
}

/** A chat call carrying `id` as the gateway's call id (none when undefined); resolves with the status, 0 when the connection died. */
async function call(url: string, id: string | undefined): Promise<number> {
  try {
    const res = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(id === undefined ? {} : { 'sluice-call-id': id }) },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.body.dump();
    return res.statusCode;
  } catch {
    return 0;
  }
}

describe('sim engine call log', () => {
  it('appends one start line per call that carries a call id, and none for calls without one', async () => {
    const path = join(dir, 'calls.log');
    const url = await start({ callLog: path });
    expect(await call(url, 'call-a')).toBe(200);
    expect(await call(url, 'call-b')).toBe(200);
    expect(await call(url, undefined)).toBe(200);
    expect(await readFile(path, 'utf8')).toBe('call-a start\ncall-b start\n');
  });

  it('marks a call refused with 503 so that it does not count as run', async () => {
    const path = join(dir, 'calls.log');
    const url = await start({ callLog: path, failureRate: { 503: 1 } });
    expect(await call(url, 'call-busy')).toBe(503);
    const text = await readFile(path, 'utf8');
    expect(text).toBe('call-busy start\ncall-busy refused\n');
    expect(countCallRuns([text]).get('call-busy')).toBe(0);
  });

  it('logs the call that crashes the engine before the crash, so it counts as run', async () => {
    const path = join(dir, 'calls.log');
    // The CLI's crash exits the process: whatever is not in the file when it fires is never written.
    const atCrash: string[] = [];
    const url = await start({
      callLog: path,
      crashOnCall: 1,
      onCrash: () => void atCrash.push(readFileSync(path, 'utf8')),
    });
    expect(await call(url, 'call-crash')).toBe(0);
    expect(atCrash).toEqual(['call-crash start\n']);
    expect(countCallRuns(atCrash).get('call-crash')).toBe(1);
  });

  it('appends across engines sharing a file, so a call run by two of them counts twice', async () => {
    const path = join(dir, 'calls.log');
    const first = await start({ callLog: path });
    const second = await start({ callLog: path });
    expect(await call(first, 'call-twice')).toBe(200);
    expect(await call(second, 'call-twice')).toBe(200);
    expect(await call(second, 'call-once')).toBe(200);
    const runs = countCallRuns([await readFile(path, 'utf8')]);
    expect(runs.get('call-twice')).toBe(2);
    expect(runs.get('call-once')).toBe(1);
  });

  it('refuses a call log it cannot open, naming the option and the path', async () => {
    const path = join(dir, 'missing', 'calls.log');
    const failure = start({ callLog: path });
    await expect(failure).rejects.toBeInstanceOf(SimOptionError);
    await expect(failure).rejects.toMatchObject({
      code: 'SIM_INVALID_OPTION',
      option: 'callLog',
      message: expect.stringContaining(path),
    });
  });
});

describe('countCallRuns', () => {
  it('sums starts less refusals over several logs and skips lines it does not know', () => {
    const runs = countCallRuns(['a start\nb start\nb refused\n', 'garbage\n\na start\nc start\nc something\n']);
    expect(Object.fromEntries(runs)).toEqual({ a: 2, b: 0, c: 1 });
  });
});

describe('countRequestRuns', () => {
  it("counts each call's runs under the request id it carried, across logs, and a call without one under its own id", () => {
    const one = 'a start\na request batch_1:x\na refused\nb start\nb request batch_1:x\n';
    const two = 'c start\nc request batch_1:y\nd start\n';
    expect(countRequestRuns([one, two])).toEqual(
      new Map([
        ['batch_1:x', 1],
        ['batch_1:y', 1],
        ['d', 1],
      ]),
    );
  });
});
