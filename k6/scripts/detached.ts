/**
 * Detached chat: `Prefer: respond-async`, then poll the status URL until the call is final, then
 * fetch the stored result (docs/api.md, "Detached calls"). What it measures: how long the `202`
 * takes (placement, since the gateway answers once a runner commits), and the whole round trip
 * to a fetched result, in the Trend `detached_time_to_result`, which includes the poll interval.
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:8080 -e POLL_INTERVAL_MS=100 k6/scripts/detached.ts
 */
import { check, fail, sleep } from 'k6';
import http from 'k6/http';
import { Counter, Trend } from 'k6/metrics';
import type { Options } from 'k6/options';
import {
  BASE_URL,
  CHAT_PATH,
  REQUEST_TIMEOUT,
  chatBody,
  envInt,
  isChatCompletion,
  jsonHeaders,
  parseJson,
  scriptOptions,
  writeSummary,
} from './lib.ts';

/** Output tokens per call: a few, so there is something to poll for. */
const MAX_TOKENS = envInt('MAX_TOKENS', 8, 1, 4096);
/** Pause between status polls. */
const POLL_INTERVAL_MS = envInt('POLL_INTERVAL_MS', 200, 10, 10_000);
/** Polls before the call counts as stuck: bounds how long one iteration can hold a VU. */
const MAX_POLLS = envInt('MAX_POLLS', 300, 1, 10_000);

/** The statuses a call never leaves (docs/api.md, "Statuses"). */
const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** From the POST to the fetched result, ms. */
const timeToResult = new Trend('detached_time_to_result', true);
/** Status polls per call. */
const pollsPerCall = new Trend('detached_polls');
/** Calls still not final after MAX_POLLS polls. */
const stuck = new Counter('detached_stuck');

export const options: Options = scriptOptions('detached', 'detached', 20, {
  'http_req_duration{scenario:detached,name:detached-post}': ['p(95)<500'],
  'http_req_duration{scenario:detached,name:detached-status}': ['p(95)<200'],
  'detached_time_to_result{scenario:detached}': ['p(95)<5000'],
  detached_stuck: ['count<1'],
});

/** One detached call: post, poll until final, fetch the result. Exported by name for mixed.ts. */
export function detached(): void {
  const startedAt = Date.now();
  const post = http.post(BASE_URL + CHAT_PATH, chatBody(MAX_TOKENS), {
    headers: jsonHeaders({ prefer: 'respond-async' }),
    timeout: REQUEST_TIMEOUT,
    responseType: 'text',
    tags: { name: 'detached-post' },
  });
  const location = post.headers.Location ?? '';
  const accepted = check(post, {
    'detached post status is 202': (r) => r.status === 202,
    'detached post has a Location': () => location.startsWith('/v1/calls/'),
    'detached post body is running': (r) =>
      (parseJson(r.body) as { status?: unknown } | undefined)?.status === 'running',
  });
  if (!accepted) return;

  let status = '';
  let polls = 0;
  while (polls < MAX_POLLS) {
    sleep(POLL_INTERVAL_MS / 1000);
    polls++;
    const res = http.get(BASE_URL + location, {
      timeout: REQUEST_TIMEOUT,
      responseType: 'text',
      tags: { name: 'detached-status' },
    });
    if (!check(res, { 'detached status is 200': (r) => r.status === 200 })) return;
    status = String((parseJson(res.body) as { status?: unknown } | undefined)?.status ?? '');
    if (FINAL.has(status)) break;
  }
  pollsPerCall.add(polls);
  if (!FINAL.has(status)) {
    stuck.add(1);
    // Cancel so a stuck call does not hold a runner slot after the test; the threshold reports it.
    http.post(`${BASE_URL}${location}/cancel`, null, { timeout: REQUEST_TIMEOUT, tags: { name: 'detached-cancel' } });
    fail(`detached call ${location} still ${status || 'unknown'} after ${MAX_POLLS} polls`);
  }
  check(status, { 'detached call succeeded': (s) => s === 'succeeded' });

  const result = http.get(`${BASE_URL}${location}/result`, {
    timeout: REQUEST_TIMEOUT,
    responseType: 'text',
    tags: { name: 'detached-result' },
  });
  timeToResult.add(Date.now() - startedAt);
  check(result, {
    'detached result status is 200': (r) => r.status === 200,
    'detached result is a chat.completion': (r) => isChatCompletion(r.body),
  });
}

export default detached;

export const handleSummary = writeSummary('detached');
