/**
 * The soak's client: one undici Pool of keep-alive connections to the gateway, sending the three
 * kinds of call a real client sends (sync, streamed, detached) and reading each answer as such a
 * client must to know what it got: the body's error code on a non-2xx, the error event that ends
 * a stream cut after its headers, the id of a detached call; then, at the end, each detached
 * call's final status.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import { assertLocalTarget } from '../load.ts';
import type { CallKind } from './ledger.ts';
import type { DetachedFate } from './ledger.ts';
import { SOAK_FLEET, SOAK_MODEL } from './fleet.ts';

/** What came back for one call. */
export interface CallAnswer {
  status: number;
  code?: string;
  callId?: string;
}

/** One reading of a detached call's status. */
export type FateReading = { kind: 'final'; fate: DetachedFate } | { kind: 'running' } | { kind: 'unreadable' };

/** Longest wait for an answer's headers, and between two chunks: the gateway's placer timeout plus a stopped runner's pause, with room. */
export const CALL_TIMEOUT_MS = 90_000;

/** Most bytes of a body kept for reading its error code or id. */
const BODY_LIMIT = 64 * 1024;

/** The call mix, by sequence number: of every 20 calls, 3 detached, 5 streamed, 12 sync. */
export function kindOf(seq: number): CallKind {
  const slot = seq % 20;
  return slot < 3 ? 'detached' : slot < 8 ? 'stream' : 'sync';
}

/** Keep-alive connections to the gateway. */
export class SoakClient {
  readonly #pool: Pool;

  /** @throws {BenchTargetError} unless `gatewayUrl` is http on 127.0.0.1 or localhost. */
  constructor(gatewayUrl: string, connections: number) {
    const url = assertLocalTarget(gatewayUrl);
    this.#pool = new Pool(url.origin, { connections, pipelining: 1, keepAliveTimeout: 30_000 });
  }

  /** Sends call `seq` of `kind`; never rejects: a failure is an answer with status 0 and a code. */
  async call(kind: CallKind, seq: number, signal?: AbortSignal): Promise<CallAnswer> {
    const body = JSON.stringify({
      model: SOAK_MODEL,
      messages: [{ role: 'user', content: `soak call ${seq}` }],
      max_tokens: SOAK_FLEET.maxTokens,
      ...(kind === 'stream' ? { stream: true } : {}),
    });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...(kind === 'detached' ? { prefer: 'respond-async' } : {}),
    };
    try {
      const res = await this.#pool.request({
        method: 'POST',
        path: '/v1/chat/completions',
        headers,
        body,
        headersTimeout: CALL_TIMEOUT_MS,
        bodyTimeout: CALL_TIMEOUT_MS,
        ...(signal ? { signal } : {}),
      });
      const callId = headerOf(res, 'sluice-call-id');
      const text = await readText(res.body);
      const answer: CallAnswer = { status: res.statusCode, ...(callId ? { callId } : {}) };
      if (res.statusCode >= 300) return withCode(answer, errorCode(text) ?? 'no-error-code');
      if (kind === 'stream') {
        // A stream cut after its 200 ends with an error event, not a status.
        const event = /^data: (\{"error".*)$/m.exec(text);
        if (event) return withCode(answer, errorCode(event[1]!) ?? 'stream-error');
        return text.includes('data: [DONE]') ? answer : withCode(answer, 'stream-incomplete');
      }
      const parsed = parseJson(text) as { id?: unknown } | undefined;
      if (parsed === undefined) return withCode(answer, 'body-not-json');
      if (kind === 'detached' && !answer.callId && typeof parsed.id === 'string') answer.callId = parsed.id;
      return answer;
    } catch (error) {
      const e = error as { code?: unknown; name?: unknown };
      return { status: 0, code: typeof e.code === 'string' ? e.code : typeof e.name === 'string' ? e.name : 'unknown' };
    }
  }

  /**
   * Reads a detached call's status once: `final` when it is final or unknown to the gateway
   * (404), `running` while it runs, `unreadable` when the gateway could not say (a 503 from a
   * store that is down, no answer).
   */
  async fate(id: string, signal?: AbortSignal): Promise<FateReading> {
    const got = await this.#get(`/v1/calls/${encodeURIComponent(id)}`, signal);
    if (got === undefined || got.status !== 200)
      return got?.status === 404 ? { kind: 'final', fate: { id, status: 'not-found' } } : { kind: 'unreadable' };
    const record = parseJson(got.text) as { status?: unknown; error?: { code?: unknown } } | undefined;
    const status = typeof record?.status === 'string' ? record.status : undefined;
    if (status === undefined) return { kind: 'unreadable' };
    if (status === 'running' || status === 'queued') return { kind: 'running' };
    const code = typeof record?.error?.code === 'string' ? record.error.code : undefined;
    const fate: DetachedFate = { id, status, ...(code ? { code } : {}) };
    if (status !== 'succeeded') return { kind: 'final', fate };
    const result = await this.#get(`/v1/calls/${encodeURIComponent(id)}/result`, signal);
    if (result === undefined) return { kind: 'unreadable' };
    return { kind: 'final', fate: { ...fate, result: result.status >= 200 && result.status < 300 } };
  }

  /** Closes the connections. */
  close(): Promise<void> {
    return this.#pool.close();
  }

  async #get(path: string, signal?: AbortSignal): Promise<{ status: number; text: string } | undefined> {
    try {
      const res = await this.#pool.request({
        method: 'GET',
        path,
        headersTimeout: 10_000,
        bodyTimeout: 10_000,
        ...(signal ? { signal } : {}),
      });
      return { status: res.statusCode, text: await readText(res.body) };
    } catch {
      return undefined;
    }
  }
}

function withCode(answer: CallAnswer, code: string): CallAnswer {
  return { ...answer, code };
}

function headerOf(res: Dispatcher.ResponseData, name: string): string | undefined {
  const value = res.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The body as text, its first {@link BODY_LIMIT} bytes kept and the rest read and dropped. */
async function readText(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    if (size >= BODY_LIMIT) continue;
    chunks.push(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The OpenAI-shaped `error.code` of a body, when it has one. */
function errorCode(text: string): string | undefined {
  const parsed = parseJson(text) as { error?: { code?: unknown } } | undefined;
  const code = parsed?.error?.code;
  return typeof code === 'string' && code !== '' ? code : undefined;
}
