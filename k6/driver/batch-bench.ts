/**
 * What the batch scenario (scenarios/batch.ts) drives and reads: interactive streamed calls sent
 * open loop with their time to first token, a batch uploaded, created and polled through the
 * gateway's Files and Batch APIs, and the engines' call logs read per request id.
 */
import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { countRequestRuns } from '../../runner/index.ts';

/** One interactive call: when it was sent (ms since the run's origin), its time to first token and its end. */
export interface InteractiveCall {
  sentAt: number;
  /** ms; undefined when no token came. */
  ttftMs: number | undefined;
  ok: boolean;
}

/**
 * Sends streamed chat calls of `maxTokens` tokens to `gateway` at `rate` a second until `until()`
 * says stop (or `signal` aborts); resolves with every call once all have ended.
 */
export async function interactiveLoad(
  gateway: string,
  rate: number,
  maxTokens: number,
  origin: number,
  until: () => boolean,
  signal: AbortSignal | undefined,
): Promise<InteractiveCall[]> {
  const calls: Promise<InteractiveCall>[] = [];
  const start = performance.now();
  for (let n = 0; !until() && !signal?.aborted; n++) {
    const due = start + (n * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    calls.push(streamOne(gateway, maxTokens, origin, n));
  }
  return Promise.all(calls);
}

async function streamOne(gateway: string, maxTokens: number, origin: number, n: number): Promise<InteractiveCall> {
  const sent = performance.now();
  const call: InteractiveCall = { sentAt: sent - origin, ttftMs: undefined, ok: false };
  try {
    const res = await fetch(`${gateway}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-small',
        messages: [{ role: 'user', content: `interactive ${n}` }],
        max_tokens: maxTokens,
        ignore_eos: true,
        stream: true,
      }),
    });
    const reader = res.body!.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (call.ttftMs === undefined && value && Buffer.from(value).toString().includes('"content"'))
        call.ttftMs = performance.now() - sent;
    }
    call.ok = res.status === 200;
  } catch {
    call.ok = false;
  }
  return call;
}

/** A JSONL batch input of `lines` chat requests of `maxTokens` tokens, custom ids `l0`…. */
export function batchInput(lines: number, maxTokens: number): Buffer {
  const text = Array.from({ length: lines }, (_, i) =>
    JSON.stringify({
      custom_id: `l${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: {
        model: 'sim-small',
        messages: [{ role: 'user', content: `line ${i}` }],
        max_tokens: maxTokens,
        ignore_eos: true,
      },
    }),
  ).join('\n');
  return Buffer.from(`${text}\n`);
}

/** Uploads `input` and creates a batch over it on `gateway`; resolves with the batch's id. */
export async function createBatch(gateway: string, input: Buffer): Promise<string> {
  const form = new FormData();
  form.set('purpose', 'batch');
  form.set('file', new Blob([input]), 'bench.jsonl');
  const file = (await (await fetch(`${gateway}/v1/files`, { method: 'POST', body: form })).json()) as { id: string };
  const res = await fetch(`${gateway}/v1/batches`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
  });
  const batch = (await res.json()) as { id?: string; error?: { message?: string } };
  if (!batch.id) throw new Error(`the batch was not created: ${batch.error?.message ?? res.status}`);
  return batch.id;
}

/** A batch as GET /v1/batches/{id} answers it (the fields read here). */
export interface BatchState {
  status: string;
  request_counts: { total: number; completed: number; failed: number };
  output_file_id: string | null;
  error_file_id: string | null;
}

export async function readBatch(gateway: string, id: string): Promise<BatchState> {
  return (await (await fetch(`${gateway}/v1/batches/${id}`)).json()) as BatchState;
}

/** The custom ids of a file's lines whose answer was 2xx. */
export async function answeredIds(gateway: string, fileId: string | null): Promise<string[]> {
  if (!fileId) return [];
  const text = await (await fetch(`${gateway}/v1/files/${fileId}/content`)).text();
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as { custom_id: string; response?: { status_code?: number } })
    .filter((line) => (line.response?.status_code ?? 0) < 300)
    .map((line) => line.custom_id);
}

/** Runs per request id over the engines' call logs at `paths` (a call's `request` line names its request). */
export async function runsByRequest(paths: readonly string[]): Promise<Map<string, number>> {
  return countRequestRuns(await Promise.all(paths.map((p) => readFile(p, 'utf8').catch(() => ''))));
}
