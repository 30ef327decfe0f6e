/**
 * In-process servers a spec starts on 127.0.0.1:0, and what to undo after each test: a spec
 * calls {@link serversForEach} once at its top level.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach } from 'vitest';

/** What {@link serversForEach} gives a spec. */
export interface SpecServers {
  /** Undone after each test, last first; a failing one is ignored. */
  readonly cleanups: Array<() => Promise<unknown>>;
  /** Listens on 127.0.0.1 and a free port, closed after the test; resolves with the URL. */
  listen(server: Server): Promise<string>;
}

/** Registers the after-each undo and returns the list and `listen`. */
export function serversForEach(): SpecServers {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
  });
  return {
    cleanups,
    async listen(server) {
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      cleanups.push(() => new Promise((r) => server.close(r)));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
  };
}

/** What a {@link recordingEngine} answers every call with. */
export interface EngineAnswer {
  readonly status: number;
  readonly body: unknown;
}

/**
 * A stand-in OpenAI-style engine serving `sim-small`: healthy, listing its one model, recording
 * the headers of every call in `seen` and answering it `answer` (JSON) once its body has arrived.
 * Hand it to `listen`.
 */
export function recordingEngine(seen: IncomingHttpHeaders[], answer: EngineAnswer): Server {
  return createServer((req, res) => {
    if (req.url === '/health') return res.end();
    if (req.url === '/v1/models') return res.end(JSON.stringify({ data: [{ id: 'sim-small' }] }));
    seen.push(req.headers);
    req.resume();
    req.on('end', () => {
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(answer.body));
    });
  });
}
