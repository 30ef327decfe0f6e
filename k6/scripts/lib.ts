/**
 * What the k6 scripts share: settings read from `__ENV` with bounded defaults, the request
 * shapes (the same bodies the Node driver's `sluice bench` scenarios send, so figures from the
 * two tools can be set side by side), the options of a one-scenario script with the thresholds
 * every script keeps, and the JSON summary every script writes.
 *
 * k6 runs these files as TypeScript (k6 1.x strips the types itself); `npm test` type-checks
 * them with @types/k6 through k6/tsconfig.json, since k6 is not installable on the build machines.
 */
import type { ConstantArrivalRateScenario, Options } from 'k6/options';

/** k6's own default is 60 s; a long generation behind a busy fleet can take longer than that. */
export const REQUEST_TIMEOUT = '120s';

/** Where load goes. Only this machine by default: set BASE_URL to aim elsewhere on purpose. */
export const BASE_URL = (__ENV.BASE_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');

/** The model (the call's function) every request names. */
export const MODEL = __ENV.MODEL ?? 'sim-small';

/** The path every chat call goes to. */
export const CHAT_PATH = '/v1/chat/completions';

/**
 * The sync chat body: one short prompt, one output token. The same body as the driver's
 * `overhead` scenario (`OVERHEAD_REQUEST` in k6/driver/scenarios/overhead.ts).
 */
export function chatBody(maxTokens = 1): string {
  return JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens });
}

/** The streaming body: the chat body with `stream: true`, long enough for several events. */
export function streamBody(maxTokens: number): string {
  return JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: maxTokens,
    stream: true,
  });
}

/** Headers for a JSON call, plus any extra ones (`Prefer` for detached calls). */
export function jsonHeaders(extra: Record<string, string> = {}): Record<string, string> {
  return { 'content-type': 'application/json', ...extra };
}

/**
 * A whole number from `__ENV[name]`, or `fallback` when unset. A value outside [min, max] stops
 * the script at init: a typo must not turn a bounded run into an unbounded one.
 */
export function envInt(name: string, fallback: number, min: number, max: number): number {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${name} must be a whole number between ${min} and ${max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/** A k6 duration (`30s`, `2m`) from `__ENV[name]`, bounded to 10 minutes. */
export function envDuration(name: string, fallback: string): string {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') return fallback;
  const match = /^(\d+)(s|m)$/.exec(raw);
  const seconds = match ? Number(match[1]) * (match[2] === 'm' ? 60 : 1) : NaN;
  if (!(seconds >= 1 && seconds <= 600))
    throw new Error(`${name} must be a duration from 1s to 10m such as 30s or 2m, got ${JSON.stringify(raw)}`);
  return raw;
}

/** Defaults for one constant-arrival-rate scenario; each is overridable from `__ENV`. */
export type ArrivalDefaults = {
  /** Iterations started per second. */
  rate: number;
  /** How long arrivals go on (k6 duration). */
  duration: string;
  preAllocatedVUs: number;
  maxVUs: number;
};

/**
 * A constant-arrival-rate scenario: open loop, so a slow gateway gets more concurrent calls,
 * not fewer (a closed loop would hide its latency by slowing down the arrivals).
 *
 * `prefix` scopes the variables for the mixed script: `SYNC_RATE`, `STREAM_DURATION`, ...;
 * plain `RATE`, `DURATION`, `PRE_VUS` and `MAX_VUS` serve the single-scenario scripts.
 */
export function arrivalScenario(exec: string, defaults: ArrivalDefaults, prefix = ''): ConstantArrivalRateScenario {
  return {
    executor: 'constant-arrival-rate',
    exec,
    rate: envInt(`${prefix}RATE`, defaults.rate, 1, 5000),
    timeUnit: '1s',
    duration: envDuration(`${prefix}DURATION`, defaults.duration),
    preAllocatedVUs: envInt(`${prefix}PRE_VUS`, defaults.preAllocatedVUs, 1, 5000),
    maxVUs: envInt(`${prefix}MAX_VUS`, defaults.maxVUs, 1, 5000),
    // Let calls in flight at the end finish (up to the request timeout) rather than count as cut.
    gracefulStop: REQUEST_TIMEOUT,
  };
}

/** A one-scenario script's arrivals but for its rate: 30 s of them, with room for up to 200 VUs. */
const SCRIPT_ARRIVALS: Omit<ArrivalDefaults, 'rate'> = Object.freeze({
  duration: '30s',
  preAllocatedVUs: 20,
  maxVUs: 200,
});

/** The trend stats every summary keeps: the percentiles the driver reports, plus p(95) for thresholds. */
export const SUMMARY_TREND_STATS = ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'];

/**
 * The options of a script with one scenario: `scenario` runs `exec` at a constant arrival rate,
 * `rate` iterations a second by default over {@link SCRIPT_ARRIVALS} (see {@link arrivalScenario}),
 * under the script's own `thresholds` and the two every script keeps (under 1% of requests
 * failed, over 99% of checks passed), which a script cannot loosen.
 */
export function scriptOptions(
  scenario: string,
  exec: string,
  rate: number,
  thresholds: Record<string, string[]>,
): Options {
  return {
    scenarios: { [scenario]: arrivalScenario(exec, { ...SCRIPT_ARRIVALS, rate }) },
    thresholds: { ...thresholds, http_req_failed: ['rate<0.01'], checks: ['rate>0.99'] },
    summaryTrendStats: SUMMARY_TREND_STATS,
  };
}

/** Number of `data:` events in an SSE body, `data: [DONE]` included. */
export function countSseEvents(body: string): number {
  let n = 0;
  for (const line of body.split('\n')) if (line.startsWith('data:')) n++;
  return n;
}

/** Whether an SSE body ends with the OpenAI terminator, ignoring the blank lines after it. */
export function endsWithDone(body: string): boolean {
  return body.trimEnd().endsWith('data: [DONE]');
}

/** `JSON.parse` that answers `undefined` instead of throwing, for checks on bodies. */
export function parseJson(body: unknown): unknown {
  if (typeof body !== 'string') return undefined;
  try {
    return JSON.parse(body) as unknown;
  } catch {
    return undefined;
  }
}

/** Whether a body is an OpenAI chat completion with at least one choice. */
export function isChatCompletion(body: unknown): boolean {
  const parsed = parseJson(body) as { object?: unknown; choices?: unknown } | undefined;
  return parsed?.object === 'chat.completion' && Array.isArray(parsed.choices) && parsed.choices.length > 0;
}

/**
 * A `handleSummary` that writes k6's end-of-test data to `summary-<script>.json` in the working
 * directory and a one-line pointer to stdout (returning a file replaces k6's text summary).
 */
export function writeSummary(script: string): (data: Record<string, unknown>) => Record<string, string> {
  return function handleSummary(data) {
    const file = `summary-${script}.json`;
    return { [file]: JSON.stringify(data, null, 2), stdout: `k6 ${script}: summary written to ${file}\n` };
  };
}
