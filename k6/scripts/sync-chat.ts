/**
 * Sync chat: the small chat call of the driver's `overhead` scenario (one prompt, one output
 * token) at a constant arrival rate. What it measures is the gateway's added latency on top of
 * the engine, so compare its `http_req_duration` with the same script aimed at a runner directly
 * (BASE_URL=http://127.0.0.1:<runner port>).
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:8080 -e RATE=200 -e DURATION=30s k6/scripts/sync-chat.ts
 */
import { check } from 'k6';
import http from 'k6/http';
import type { Options } from 'k6/options';
import {
  BASE_URL,
  CHAT_PATH,
  REQUEST_TIMEOUT,
  chatBody,
  isChatCompletion,
  jsonHeaders,
  scriptOptions,
  writeSummary,
} from './lib.ts';

export const options: Options = scriptOptions('sync_chat', 'syncChat', 50, {
  'http_req_duration{scenario:sync_chat}': ['p(95)<500'],
});

/** One sync chat call and its checks. Exported by name for mixed.ts. */
export function syncChat(): void {
  const res = http.post(BASE_URL + CHAT_PATH, chatBody(), {
    headers: jsonHeaders(),
    timeout: REQUEST_TIMEOUT,
    responseType: 'text',
    tags: { name: 'chat' },
  });
  check(res, {
    'chat status is 200': (r) => r.status === 200,
    'chat body is a chat.completion': (r) => isChatCompletion(r.body),
  });
}

export default syncChat;

export const handleSummary = writeSummary('sync-chat');
