import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { runSimEngineCommand, SimOptionError, type SimEngine } from '../../../../runner/engines/sim/index.ts';

let engine: SimEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

describe('runSimEngineCommand', () => {
  it('listens and logs one JSON line with its url and port', async () => {
    const lines: string[] = [];
    engine = await runSimEngineCommand({ port: 0, host: '127.0.0.1', engineId: 'sim-cli', ttftMs: 1 }, (line) =>
      lines.push(line),
    );
    expect(lines).toHaveLength(1);
    const entry = JSON.parse(lines[0]!);
    expect(entry).toMatchObject({
      msg: 'sim engine listening',
      port: expect.any(Number),
      url: `http://127.0.0.1:${entry.port}`,
      engineId: 'sim-cli',
    });
    const res = await request(`${entry.url}/health`);
    expect(res.statusCode).toBe(200);
    expect(res.headers['sluice-engine-id']).toBe('sim-cli');
    await res.body.dump();
  });

  it('throws SimOptionError before listening on a bad option', async () => {
    const lines: string[] = [];
    await expect(
      runSimEngineCommand({ port: 0, host: '127.0.0.1', maxNumSeqs: 0 }, (line) => lines.push(line)),
    ).rejects.toBeInstanceOf(SimOptionError);
    expect(lines).toEqual([]);
  });
});
