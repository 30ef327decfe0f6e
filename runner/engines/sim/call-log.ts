/**
 * The call log: an optional file the simulated engine appends one line to for every call that
 * carries a `sluice-call-id`, so a test or a benchmark can count the calls that ran twice, across
 * engines and across restarts of one engine. The counters on /metrics die with the process; a
 * file appended to by every incarnation of every engine does not.
 *
 * Two lines per call at most, written synchronously so that an engine killed with SIGKILL has
 * already logged every call it had started:
 * - `<id> start` when the request arrives, before anything else handles it (a crash knob
 *   included);
 * - `<id> refused` when it was answered 429 or 503: the runner turns those into a busy answer
 *   and the gateway offers the call elsewhere, which is not a second run.
 * A call therefore ran as many times as its `start` lines outnumber its `refused` lines.
 * A call that carries a W3C `traceparent` also gets `<id> trace <traceparent>` after its start,
 * so a test can see that the trace reached the engine, and one with an `x-request-id` gets
 * `<id> request <x-request-id>`, so runs can be counted per request (the counts skip both).
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import type { Server } from 'node:http';
import { CALL_ID_HEADER } from '../../protocol/index.ts';
import { SimOptionError } from './errors.ts';

/** Statuses after which nothing ran, as the runner reads them. */
const REFUSED = new Set([429, 503]);

/** A W3C trace context header, version 00: nothing else is written to the log. */
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** Longest id kept; the gateway's are 36-character UUIDs, anything longer is not ours. */
const MAX_ID_LENGTH = 128;

/**
 * Appends the call lines of every request `server` receives to the file at `path`, created if
 * missing; the file is closed when the server closes.
 * @throws {SimOptionError} (option `callLog`) when the file cannot be opened for appending.
 */
export function attachCallLog(server: Server, path: string): void {
  if (typeof path !== 'string' || path === '')
    throw new SimOptionError('callLog', `callLog must be a file path, got ${JSON.stringify(path)}`);
  let fd: number | undefined;
  try {
    fd = openSync(path, 'a');
  } catch (error) {
    throw new SimOptionError(
      'callLog',
      `callLog ${JSON.stringify(path)} cannot be opened for appending (${(error as { code?: string }).code ?? (error as Error).message})`,
    );
  }
  const append = (line: string): void => {
    // A log that cannot be written must not take calls down with it: the count is then short,
    // which the reader of the log sees as fewer starts than the calls it sent.
    if (fd === undefined) return;
    try {
      writeSync(fd, line);
    } catch {
      // ignored, as above
    }
  };
  // Prepended, so the line is written before the engine's own handler runs: a crash knob
  // exits the process from inside it.
  server.prependListener('request', (req, res) => {
    const raw = req.headers[CALL_ID_HEADER];
    const id = typeof raw === 'string' ? sanitize(raw) : '';
    if (id === '') return;
    append(`${id} start\n`);
    // The client's request id (a batch line's is `<batch id>:<custom_id>`), so runs can be counted per request.
    const requestId = req.headers['x-request-id'];
    if (typeof requestId === 'string' && requestId !== '') append(`${id} request ${sanitize(requestId)}\n`);
    const traceparent = req.headers.traceparent;
    if (typeof traceparent === 'string' && TRACEPARENT.test(traceparent)) append(`${id} trace ${traceparent}\n`);
    res.once('close', () => {
      if (res.headersSent && REFUSED.has(res.statusCode)) append(`${id} refused\n`);
    });
  });
  server.once('close', () => {
    if (fd !== undefined) closeSync(fd);
    fd = undefined;
  });
}

/**
 * Reads call logs (the text of one or several files, concatenated or not): how many times each
 * call id ran, that is its `start` lines less its `refused` lines. Unknown lines are skipped.
 */
export function countCallRuns(texts: Iterable<string>): Map<string, number> {
  const runs = new Map<string, number>();
  for (const text of texts) {
    for (const line of text.split('\n')) {
      const space = line.lastIndexOf(' ');
      if (space <= 0) continue;
      const id = line.slice(0, space);
      const what = line.slice(space + 1);
      if (what === 'start') runs.set(id, (runs.get(id) ?? 0) + 1);
      else if (what === 'refused') runs.set(id, (runs.get(id) ?? 0) - 1);
    }
  }
  return runs;
}

// One line per call: no whitespace inside an id, and a bound on what a stray header can write.
function sanitize(id: string): string {
  return id.slice(0, MAX_ID_LENGTH).replace(/\s/g, '_');
}

/**
 * Reads call logs as {@link countCallRuns} does, counting the runs of each call under the request
 * id its `request` line names (a batch line's `<batch id>:<custom_id>`), or under its call id when
 * it has none.
 */
export function countRequestRuns(texts: Iterable<string>): Map<string, number> {
  const all = [...texts];
  const requestOf = new Map<string, string>();
  for (const text of all) {
    for (const match of text.matchAll(/^(\S+) request (\S+)$/gm)) requestOf.set(match[1]!, match[2]!);
  }
  const runs = new Map<string, number>();
  for (const [call, n] of countCallRuns(all)) {
    const request = requestOf.get(call) ?? call;
    runs.set(request, (runs.get(request) ?? 0) + n);
  }
  return runs;
}
