/**
 * Fault: `Expect: 100-continue`. curl (for any body over 1 MiB), .NET, Java and libcurl send it by
 * themselves. The gateway's Node server answers `100 Continue` itself; the header is hop-by-hop
 * and must not travel on to the runner or the engine, whose HTTP client (undici) refuses it. Before
 * the fix every such call failed with 502 GW_RUNNER_FAILED_AFTER_COMMIT although nothing ran.
 */
import { execFile } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { chatBody, eventually, metrics, metricValue, startFleet } from '../support/fleet.ts';
import type { Fleet } from '../support/fleet.ts';

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** True when the server sent `100 Continue` before the client sent its body. */
  continued: boolean;
}

/**
 * POSTs `body` the way curl does past 1 MiB: headers with `Expect: 100-continue`, then the body
 * only once the server said `100 Continue`.
 */
function postExpecting(url: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let continued = false;
    const req = httpRequest(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
        expect: '100-continue',
        ...headers,
      },
    });
    req.once('continue', () => {
      continued = true;
      req.end(body);
    });
    req.once('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, continued }));
      res.once('error', reject);
    });
    req.once('error', reject);
    req.flushHeaders();
  });
}

/** Calls the engine was offered, completed, on its /metrics page. */
async function engineCalls(fleet: Fleet): Promise<{ received: number; completed: number }> {
  const page = await metrics(fleet.nodes[0]!.engine);
  return {
    received: metricValue(page, 'sluice_sim_requests_total'),
    completed: metricValue(page, 'sluice_sim_requests_completed_total'),
  };
}

/** A 1.5 MiB body: past curl's threshold for sending Expect by itself. */
const bigInvokeBody = Buffer.alloc(1.5 * 1024 * 1024, 'a');

describe('fault: Expect: 100-continue', () => {
  let fleet: Fleet;
  let gw: string;
  /** Engine counters before each case, to count only that case's calls. */
  let before: { received: number; completed: number };

  beforeAll(async () => {
    fleet = await startFleet({ nodes: 1, engineArgs: ['--ttft-ms', '0', '--itl-ms', '0', '--output-tokens', '3'] });
    gw = fleet.gateway.url;
  });
  afterAll(() => fleet?.stop());

  const ranOnce = async () => {
    // The engine's counters settle as its answer leaves; the client may see the end first.
    await eventually(
      async () => (await engineCalls(fleet)).completed === before.completed + 1,
      5000,
      'the engine to count the call',
    );
    expect(await engineCalls(fleet)).toEqual({ received: before.received + 1, completed: before.completed + 1 });
  };

  it('answers 100 Continue itself and runs a sync chat call once', async () => {
    before = await engineCalls(fleet);
    const answer = await postExpecting(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
    expect(answer.continued).toBe(true);
    expect(answer.status, answer.text).toBe(200);
    expect(JSON.parse(answer.text).object).toBe('chat.completion');
    await ranOnce();
  });

  it('relays a body over 1 MiB whole, once', async () => {
    before = await engineCalls(fleet);
    const answer = await postExpecting(`${gw}/invoke/echo`, bigInvokeBody, {
      'content-type': 'application/octet-stream',
    });
    expect(answer.continued).toBe(true);
    expect(answer.status, answer.text).toBe(200);
    // The engine describes what it got: every byte, nothing lost on the way.
    expect(JSON.parse(answer.text)).toMatchObject({ fn: 'echo', bytes: bigInvokeBody.length });
    await ranOnce();
  });

  it('accepts a detached call with 202 and keeps its result', async () => {
    before = await engineCalls(fleet);
    const answer = await postExpecting(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }), {
      prefer: 'respond-async',
    });
    expect(answer.continued).toBe(true);
    expect(answer.status, answer.text).toBe(202);
    const id = JSON.parse(answer.text).id as string;
    let status = '';
    await eventually(
      async () => {
        const res = await request(`${gw}/v1/calls/${id}`);
        status = ((await res.body.json()) as { status: string }).status;
        return status !== 'running';
      },
      10_000,
      'the detached call to finish',
    );
    expect(status).toBe('succeeded');
    const result = await request(`${gw}/v1/calls/${id}/result`);
    expect(result.statusCode).toBe(200);
    expect(((await result.body.json()) as { object: string }).object).toBe('chat.completion');
    await ranOnce();
  });

  it('serves curl posting a body over 1 MiB (curl sends Expect by itself)', async (ctx) => {
    const curl = await new Promise<boolean>((resolve) => execFile('curl', ['--version'], (error) => resolve(!error)));
    if (!curl) {
      ctx.skip('curl is not installed on this machine: the raw-client cases above cover the same path');
      return;
    }
    before = await engineCalls(fleet);
    const dir = await mkdtemp(join(tmpdir(), 'sluice-expect-'));
    try {
      const file = join(dir, 'body.bin');
      await writeFile(file, bigInvokeBody);
      const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
        execFile(
          'curl',
          [
            '-sS',
            '-v',
            '-X',
            'POST',
            '-H',
            'content-type: application/octet-stream',
            '--data-binary',
            `@${file}`,
            '-w',
            '\n%{http_code}',
            `${gw}/invoke/echo`,
          ],
          { maxBuffer: 4 * 1024 * 1024 },
          (error, out, err) => (error ? reject(error) : resolve({ stdout: out, stderr: err })),
        ),
      );
      // curl -v shows the request headers it sent and the interim answer it got.
      expect(stderr).toMatch(/^> Expect: 100-continue/im);
      expect(stderr).toMatch(/^< HTTP\/1\.1 100 Continue/im);
      const [json, code] = stdout.split('\n');
      expect(code, stdout).toBe('200');
      expect(JSON.parse(json!)).toMatchObject({ fn: 'echo', bytes: bigInvokeBody.length });
      await ranOnce();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
