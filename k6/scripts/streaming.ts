/**
 * Streaming chat: `stream: true` calls at a constant arrival rate, each checked to be a
 * well-formed SSE stream that ends with `data: [DONE]`.
 *
 * k6's http module is not streaming: `http.post` returns once the whole response is in, so
 * `http_req_duration` here is the whole stream. The Trend `stream_time_to_first_byte` is k6's
 * time to first byte (`timings.waiting`), the nearest k6 gets to a time to first chunk: the
 * runner and the simulated engine send the status and headers before the first token, so it is
 * a lower bound of the time to first token, not the time itself. The Node driver
 * (`sluice bench`) reads the body as it arrives and records the time to its first byte, which is
 * the time to first chunk; use it for that figure and for the gaps between chunks.
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:8080 -e MAX_TOKENS=32 k6/scripts/streaming.ts
 */
import { check } from 'k6';
import http from 'k6/http';
import { Trend } from 'k6/metrics';
import type { Options } from 'k6/options';
import {
  BASE_URL,
  CHAT_PATH,
  REQUEST_TIMEOUT,
  countSseEvents,
  endsWithDone,
  envInt,
  jsonHeaders,
  scriptOptions,
  streamBody,
  writeSummary,
} from './lib.ts';

/**
 * Output tokens per streamed call: one SSE event each, plus the final and `[DONE]` events. The
 * default is the driver's `streaming` scenario's (`STREAMING_REQUEST`), so the figures compare.
 */
const MAX_TOKENS = envInt('MAX_TOKENS', 40, 1, 4096);

/** Time to first byte of a stream, ms: a lower bound of time to first chunk (see the note at the top). */
const timeToFirstByte = new Trend('stream_time_to_first_byte', true);
/** SSE `data:` events per stream, `[DONE]` included. */
const streamEvents = new Trend('stream_events');

export const options: Options = scriptOptions('streaming', 'streaming', 20, {
  'stream_time_to_first_byte{scenario:streaming}': ['p(95)<500'],
  'http_req_duration{scenario:streaming}': ['p(95)<5000'],
});

/** One streamed chat call and its checks. Exported by name for mixed.ts. */
export function streaming(): void {
  const res = http.post(BASE_URL + CHAT_PATH, streamBody(MAX_TOKENS), {
    headers: { ...jsonHeaders(), accept: 'text/event-stream' },
    timeout: REQUEST_TIMEOUT,
    responseType: 'text',
    tags: { name: 'chat-stream' },
  });
  const body = typeof res.body === 'string' ? res.body : '';
  if (res.status === 200) {
    timeToFirstByte.add(res.timings.waiting);
    streamEvents.add(countSseEvents(body));
  }
  check(res, {
    'stream status is 200': (r) => r.status === 200,
    'stream is text/event-stream': (r) => (r.headers['Content-Type'] ?? '').startsWith('text/event-stream'),
    // At least one token event and the terminator.
    'stream has at least 2 events': () => countSseEvents(body) >= 2,
    'stream ends with data: [DONE]': () => endsWithDone(body),
  });
}

export default streaming;

export const handleSummary = writeSummary('streaming');
