/**
 * Fault: an engine answering a status that has no body (204 No Content, 304 Not Modified). The
 * runner declared its trailers on every sync answer, Node refuses trailers on a bodiless answer
 * (ERR_HTTP_TRAILER_INVALID), and the throw was uncaught: the runner process died. Now a bodiless
 * answer carries the execution time as a header instead, the client gets the engine's status, and
 * the runner keeps serving.
 */
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService } from '../../gateway/cli/processes.ts';
import type { ChildService } from '../../gateway/cli/processes.ts';

/** An engine that answers POST /invoke/... with the status named in the path, and no body. */
async function bodilessEngine(): Promise<{ url: string; calls: () => number; close: () => Promise<void> }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'quiet' }] }));
    calls++;
    req.resume();
    req.on('end', () => {
      res.writeHead(req.url?.endsWith('304') ? 304 : 204, { etag: '"v1"' });
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls: () => calls,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('an engine answering a status without a body', () => {
  let engine: Awaited<ReturnType<typeof bodilessEngine>>;
  let runner: ChildService;
  let gateway: ChildService;

  beforeAll(async () => {
    engine = await bodilessEngine();
    runner = await startService(['runner', '--port', '0', '--engine', engine.url, '--engine-kind', 'openai', '--log-level', 'error']);
    gateway = await startService(['gateway', '--port', '0', '--runners', runner.url, '--log-level', 'error']);
  }, 60_000);
  afterAll(async () => {
    await Promise.all([gateway?.stop(), runner?.stop()]);
    await engine?.close();
  });

  it.each([204, 304])('relays %i once, and the runner lives on', async (status) => {
    const before = engine.calls();
    const res = await fetch(`${gateway.url}/invoke/quiet-${status}`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(status);
    expect(await res.text()).toBe('');
    expect(res.headers.get('etag')).toBe('"v1"');
    expect(engine.calls()).toBe(before + 1);
    const status2 = await fetch(`${runner.url}/status`);
    expect(status2.status).toBe(200);
  });

  it('keeps serving calls after them', async () => {
    const res = await fetch(`${gateway.url}/invoke/quiet-204`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(204);
  });
});
