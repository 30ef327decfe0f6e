/**
 * What the fault specs check after every fault, read from real processes: how often each engine
 * ran a call (its counters and, across restarts, its call log), what a streaming client got, and
 * the final record of every detached call.
 */
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import { countCallRuns } from '../../runner/engines/sim/call-log.ts';
import { textOrEmpty } from './files.ts';
import { eventually, metrics, metricValue, postRequest } from './fleet.ts';

/** The calls each engine was offered (`sluice_sim_requests_total`, refused ones included), in order. */
export async function engineRequests(engines: ReadonlyArray<{ url: string }>): Promise<number[]> {
  return Promise.all(engines.map(async (e) => metricValue(await metrics(e), 'sluice_sim_requests_total')));
}

/** The calls running on an engine right now (`vllm:num_requests_running`). */
export async function engineRunning(engine: { url: string }): Promise<number> {
  return metricValue(await metrics(engine), 'vllm:num_requests_running');
}

/** The sum of a list of counts. */
export function sum(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

/**
 * How many times each call id ran, from one or more engine call logs (`--call-log`); the count
 * holds across engines and engine restarts, where /metrics counters start again at 0.
 */
export function callRuns(...paths: string[]): Map<string, number> {
  return countCallRuns(paths.map(textOrEmpty));
}

/** What a streaming client got: the status, headers, and every SSE `data:` payload in order. */
export interface StreamResult {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  events: string[];
  /** Set when the connection failed rather than ending; the events before it are kept. */
  error?: Error;
}

/** A stream being read in the background. */
export interface OpenStream {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** Resolves once the first `data:` event arrived (or the stream ended without one). */
  flowing: Promise<void>;
  /** Resolves when the stream ended, however it ended. */
  done: Promise<StreamResult>;
}

/** POSTs a streaming call and reads its SSE body in the background. */
export async function openStream(
  url: string,
  body: string,
  headers: Record<string, string> = {},
  dispatcher?: Dispatcher,
): Promise<OpenStream> {
  const res = await postRequest(url, body, headers, dispatcher);
  let firstEvent!: () => void;
  const flowing = new Promise<void>((resolve) => (firstEvent = resolve));
  const done = (async (): Promise<StreamResult> => {
    let text = '';
    let error: Error | undefined;
    try {
      for await (const chunk of res.body) {
        text += String(chunk);
        if (text.includes('data: ')) firstEvent();
      }
    } catch (e) {
      error = e as Error;
    }
    firstEvent();
    return { status: res.statusCode, headers: res.headers, events: sseEvents(text), ...(error ? { error } : {}) };
  })();
  return { status: res.statusCode, headers: res.headers, flowing, done };
}

/** The `data:` payloads of an SSE body, in order. */
export function sseEvents(text: string): string[] {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
}

/** A detached call's record, as `GET /v1/calls/:id` returns it. */
export async function callRecord(gateway: string, id: string): Promise<any> {
  const res = await request(`${gateway}/v1/calls/${id}`);
  return res.body.json();
}

/** Polls a detached call until it leaves `running`, for at most `timeout` ms; returns its record. */
export async function finalRecord(gateway: string, id: string, timeout = 10_000): Promise<any> {
  let record: any;
  await eventually(
    async () => {
      record = await callRecord(gateway, id);
      return record.status !== 'running' && record.status !== 'queued';
    },
    timeout,
    `detached call ${id} to end`,
  );
  return record;
}

/** Sends a signal to a process that may already be gone. */
export function signal(pid: number | undefined, sig: NodeJS.Signals): void {
  try {
    if (pid !== undefined) process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** Whether a process is still there (signal 0 reaches it). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
