/**
 * The driver's side of the memory scenario: many slow SSE streams held open at once against one
 * proxy. Streams are opened in bounded batches (the next batch leaves once this one's headers
 * came), so thousands of connects never land on the proxy in the same instant, and every body
 * is read to its end with its chunks counted and dropped, so the driver holds no payload.
 *
 * One undici Pool with a connection per stream: with pipelining 1 a stream never waits behind
 * another on a connection, so the streams open are the connections open.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool } from 'undici';
import { assertLocalTarget } from './load.ts';

/** What the streams of one level did, counted as it happens. */
export interface StreamTally {
  /** Streams whose 200 headers came. */
  opened: number;
  /** Streams open now: headers came, body not yet ended. */
  open: number;
  /** Streams read to their `[DONE]`. */
  completed: number;
  /** Body chunks read, all streams together. */
  chunks: number;
  /** Failed streams by kind: `status 503`, an undici or socket code, `ended without [DONE]`. */
  errors: Record<string, number>;
}

/** How one level's streams are opened. */
export interface HeldStreamsOptions {
  /** The proxy's streaming endpoint: http on 127.0.0.1 or localhost only. */
  url: string;
  streams: number;
  /** Streams opened at once; the next batch waits for this one's headers. */
  batch: number;
  /** No batch leaves after this `performance.now()` time: a slow ramp is cut rather than run past the streams' end. */
  rampDeadline: number;
  /** The request body of a stream sent now, so its length can depend on when it leaves. */
  body: (now: number) => string;
  /** Longest wait for headers, and between two body chunks, ms. */
  timeoutMs: number;
  signal?: AbortSignal;
  /** Called with the tally before the first stream leaves, for whoever watches the count during the ramp. */
  onOpen?: (tally: StreamTally) => void;
}

/** A level's streams, opened. */
export interface HeldStreams {
  tally: StreamTally;
  /** ms the ramp took, first batch out to last batch's headers. */
  rampMs: number;
  /** True when the ramp deadline stopped it before every stream was sent. */
  rampCut: boolean;
  /**
   * Resolves when every stream ended or `deadline` (a `performance.now()` time) passed; then
   * closes the connections (destroying the ones still streaming), so the proxy sees its clients go.
   */
  finish(deadline: number): Promise<void>;
}

/** Opens `options.streams` streams in batches and returns once the last batch's headers came. */
export async function openHeldStreams(options: HeldStreamsOptions): Promise<HeldStreams> {
  const url = assertLocalTarget(options.url);
  const pool = new Pool(url.origin, { connections: options.streams, pipelining: 1, keepAliveTimeout: 60_000 });
  const tally: StreamTally = { opened: 0, open: 0, completed: 0, chunks: 0, errors: {} };
  options.onOpen?.(tally);
  const done: Promise<void>[] = [];
  const started = performance.now();
  let rampCut = false;
  for (let sent = 0; sent < options.streams; ) {
    if (options.signal?.aborted) break;
    if (performance.now() > options.rampDeadline) {
      rampCut = true;
      break;
    }
    const size = Math.min(options.batch, options.streams - sent);
    const batch = Array.from({ length: size }, () =>
      holdStream(pool, url.pathname, options.body(performance.now()), options.timeoutMs, tally),
    );
    done.push(...batch.map((s) => s.done));
    await Promise.all(batch.map((s) => s.headers));
    sent += size;
  }
  const rampMs = performance.now() - started;
  const finish = async (deadline: number): Promise<void> => {
    const all = Promise.all(done);
    const left = Math.max(0, deadline - performance.now());
    await Promise.race([all, delay(left, undefined, { ref: false })]);
    // Streams still open past the deadline are cut: the level stays bounded in time.
    await pool.destroy().catch(() => undefined);
    await all;
  };
  return { tally, rampMs, rampCut, finish };
}

/** One stream: `headers` settles when its headers came or it failed first; `done` when it ended. Neither rejects. */
function holdStream(
  pool: Pool,
  path: string,
  body: string,
  timeoutMs: number,
  tally: StreamTally,
): { headers: Promise<void>; done: Promise<void> } {
  let headersCame = (): void => {};
  const headers = new Promise<void>((resolve) => (headersCame = resolve));
  const done = (async () => {
    let open = false;
    try {
      const res = await pool.request({
        method: 'POST',
        path,
        headers: { 'content-type': 'application/json' },
        body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      headersCame();
      if (res.statusCode !== 200) {
        await res.body.dump();
        countError(tally, `status ${res.statusCode}`);
        return;
      }
      open = true;
      tally.opened++;
      tally.open++;
      // The last two chunks are kept: `data: [DONE]` may be split across them.
      let previous: Buffer = Buffer.alloc(0);
      let last: Buffer = Buffer.alloc(0);
      for await (const chunk of res.body) {
        tally.chunks++;
        previous = last;
        last = chunk as Buffer;
      }
      if (Buffer.concat([previous, last]).includes('[DONE]')) tally.completed++;
      else countError(tally, 'ended without [DONE]');
    } catch (error) {
      const e = error as { code?: unknown; name?: unknown };
      countError(tally, typeof e?.code === 'string' ? e.code : typeof e?.name === 'string' ? e.name : 'unknown');
    } finally {
      headersCame();
      if (open) tally.open--;
    }
  })();
  return { headers, done };
}

function countError(tally: StreamTally, kind: string): void {
  tally.errors[kind] = (tally.errors[kind] ?? 0) + 1;
}
