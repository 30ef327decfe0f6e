/**
 * Mixed: the sync, streaming and detached calls at once, each at its own constant arrival rate,
 * so a gateway's cost is seen under the blend a fleet serves rather than one call kind alone.
 * Thresholds are per scenario (k6 tags each request with its scenario's name).
 *
 * Rates and durations come from prefixed variables: SYNC_RATE, STREAM_RATE, DETACHED_RATE,
 * SYNC_DURATION, ... (and *_PRE_VUS, *_MAX_VUS); MAX_TOKENS and the poll settings as in the
 * single scripts.
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:8080 -e SYNC_RATE=100 k6/scripts/mixed.ts
 */
import type { Options } from 'k6/options';
import { SUMMARY_TREND_STATS, arrivalScenario, writeSummary } from './lib.ts';

// k6 calls a scenario's `exec` function by its export name from this module.
export { syncChat } from './sync-chat.ts';
export { streaming } from './streaming.ts';
export { detached } from './detached.ts';

export const options: Options = {
  scenarios: {
    sync_chat: arrivalScenario('syncChat', { rate: 30, duration: '60s', preAllocatedVUs: 10, maxVUs: 100 }, 'SYNC_'),
    streaming: arrivalScenario('streaming', { rate: 10, duration: '60s', preAllocatedVUs: 10, maxVUs: 100 }, 'STREAM_'),
    detached: arrivalScenario('detached', { rate: 5, duration: '60s', preAllocatedVUs: 10, maxVUs: 100 }, 'DETACHED_'),
  },
  thresholds: {
    http_req_failed: ['rate<0.01'],
    'http_req_duration{scenario:sync_chat}': ['p(95)<500'],
    'http_req_duration{scenario:streaming}': ['p(95)<5000'],
    'stream_time_to_first_byte{scenario:streaming}': ['p(95)<500'],
    'http_req_duration{scenario:detached,name:detached-post}': ['p(95)<500'],
    'detached_time_to_result{scenario:detached}': ['p(95)<5000'],
    detached_stuck: ['count<1'],
    checks: ['rate>0.99'],
  },
  summaryTrendStats: SUMMARY_TREND_STATS,
};

export const handleSummary = writeSummary('mixed');
