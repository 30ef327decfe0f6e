import { existsSync, readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { OVERHEAD_REQUEST } from '../../k6/driver/scenarios/overhead.ts';
import { STREAMING_REQUEST } from '../../k6/driver/scenarios/streaming.ts';

// k6 modules (`k6/http`, `k6/metrics`) exist only inside the k6 binary, so the scripts cannot be
// imported here; their shape is checked on the source text, and their types by
// `tsc -p k6/tsconfig.json` in `npm test`. lib.ts imports only types from k6, so it can be loaded.
const dir = new URL('../../k6/scripts/', import.meta.url);
const read = (file: string): string => readFileSync(new URL(file, dir), 'utf8');
const SCRIPTS = ['sync-chat.ts', 'streaming.ts', 'detached.ts', 'mixed.ts'] as const;

describe('k6 scripts', () => {
  it.each(SCRIPTS)('%s exists and exports options, a default or exec functions and handleSummary', (file) => {
    expect(existsSync(new URL(file, dir))).toBe(true);
    const src = read(file);
    expect(src).toMatch(/^export const options: Options = (\{|scriptOptions\()/m);
    expect(src).toMatch(/^export const handleSummary = writeSummary\('[a-z-]+'\);$/m);
    expect(src).toContain(`writeSummary('${file.replace(/\.ts$/, '')}')`);
  });

  it.each(SCRIPTS)('%s runs only constant-arrival-rate scenarios whose exec functions it exports', (file) => {
    const src = read(file);
    const execs = [...src.matchAll(/(?:arrivalScenario\(\s*|scriptOptions\(\s*'\w+',\s*)'(\w+)'/g)].map((m) => m[1]!);
    expect(execs.length).toBeGreaterThan(0);
    // Any other executor written out in a script would bypass the arrival-rate helper.
    expect(src).not.toMatch(/executor:/);
    for (const exec of execs) expect(src).toMatch(new RegExp(`export (function ${exec}\\(|\\{ ${exec} \\} from)`));
  });

  it('builds every scenario with the constant-arrival-rate executor and a bounded graceful stop', () => {
    const lib = read('lib.ts');
    expect(lib).toContain("executor: 'constant-arrival-rate'");
    expect(lib).toContain('gracefulStop: REQUEST_TIMEOUT');
  });

  it.each(SCRIPTS)('%s has an error-rate threshold and a p(95) latency threshold', (file) => {
    const src = read(file);
    // scriptOptions adds the error-rate threshold itself (its own test, below).
    if (!src.includes('export const options: Options = scriptOptions('))
      expect(src).toContain("http_req_failed: ['rate<0.01']");
    expect(src).toMatch(/'http_req_duration\{scenario:[\w,:-]+\}': \['p\(95\)<\d+'\]/);
  });

  it.each(SCRIPTS.filter((f) => f !== 'mixed.ts'))('%s sets a timeout on every request', (file) => {
    const src = read(file);
    const calls = [...src.matchAll(/http\.(get|post|request)\(/g)];
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls) {
      const args = src.slice(call.index, src.indexOf(');', call.index));
      expect(args, `${file}: ${args}`).toContain('timeout: REQUEST_TIMEOUT');
    }
  });

  it('streams with stream: true, a text response, an event count and a [DONE] check', () => {
    const src = read('streaming.ts');
    expect(src).toContain("responseType: 'text'");
    expect(src).toContain('new Trend(');
    expect(src).toContain('countSseEvents(body)');
    expect(src).toContain('endsWithDone(body)');
    expect(read('lib.ts')).toMatch(/stream: true/);
  });

  it('detaches with Prefer: respond-async, checks 202 and Location, and bounds its polls', () => {
    const src = read('detached.ts');
    expect(src).toContain("prefer: 'respond-async'");
    expect(src).toContain('r.status === 202');
    expect(src).toContain('post.headers.Location');
    expect(src).toMatch(/while \(polls < MAX_POLLS\)/);
    expect(src).toContain('/result`');
  });
});

type Lib = {
  REQUEST_TIMEOUT: string;
  BASE_URL: string;
  MODEL: string;
  chatBody(maxTokens?: number): string;
  streamBody(maxTokens: number): string;
  envInt(name: string, fallback: number, min: number, max: number): number;
  envDuration(name: string, fallback: string): string;
  scriptOptions(scenario: string, exec: string, rate: number, thresholds: Record<string, string[]>): any;
  SUMMARY_TREND_STATS: string[];
  countSseEvents(body: string): number;
  endsWithDone(body: string): boolean;
  isChatCompletion(body: unknown): boolean;
};

describe('k6/scripts/lib.ts', () => {
  const env: Record<string, string> = {};
  let lib: Lib;
  beforeAll(async () => {
    (globalThis as { __ENV?: Record<string, string> }).__ENV = env;
    // A computed specifier keeps the root tsc (types: node, no k6 globals) out of k6/scripts.
    const specifier = new URL('lib.ts', dir).href;
    lib = (await import(specifier)) as Lib;
  });

  it('defaults to this machine, sim-small and a timeout above k6s 60 s default', () => {
    expect(lib.BASE_URL).toBe('http://127.0.0.1:8080');
    expect(lib.MODEL).toBe('sim-small');
    expect(Number.parseInt(lib.REQUEST_TIMEOUT, 10)).toBeGreaterThan(60);
    expect(lib.REQUEST_TIMEOUT).toMatch(/^\d+s$/);
  });

  it('sends the same bodies as the driver overhead and streaming scenarios', () => {
    expect(lib.chatBody()).toBe(OVERHEAD_REQUEST.body);
    const driverTokens = (JSON.parse(STREAMING_REQUEST.body) as { max_tokens: number }).max_tokens;
    expect(lib.streamBody(driverTokens)).toBe(STREAMING_REQUEST.body);
    expect(read('streaming.ts')).toContain(`envInt('MAX_TOKENS', ${driverTokens},`);
  });

  it('reads bounded settings from __ENV and refuses values out of bounds', () => {
    expect(lib.envInt('K6_SPEC_RATE', 7, 1, 10)).toBe(7);
    env.K6_SPEC_RATE = '9';
    expect(lib.envInt('K6_SPEC_RATE', 7, 1, 10)).toBe(9);
    env.K6_SPEC_RATE = '11';
    expect(() => lib.envInt('K6_SPEC_RATE', 7, 1, 10)).toThrow(
      'K6_SPEC_RATE must be a whole number between 1 and 10, got "11"',
    );
    env.K6_SPEC_DURATION = '2m';
    expect(lib.envDuration('K6_SPEC_DURATION', '30s')).toBe('2m');
    env.K6_SPEC_DURATION = '11m';
    expect(() => lib.envDuration('K6_SPEC_DURATION', '30s')).toThrow(
      'K6_SPEC_DURATION must be a duration from 1s to 10m',
    );
  });

  it('builds a one-scenario script’s options with the error-rate and checks thresholds, which the script cannot loosen', () => {
    const options = lib.scriptOptions('spec_run', 'specRun', 5, {
      'http_req_duration{scenario:spec_run}': ['p(95)<500'],
      http_req_failed: ['rate<0.5'],
      checks: ['rate>0.5'],
    });
    expect(options.thresholds).toEqual({
      'http_req_duration{scenario:spec_run}': ['p(95)<500'],
      http_req_failed: ['rate<0.01'],
      checks: ['rate>0.99'],
    });
    expect(Object.keys(options.scenarios)).toEqual(['spec_run']);
    expect(options.scenarios.spec_run).toMatchObject({
      executor: 'constant-arrival-rate',
      exec: 'specRun',
      rate: 5,
      duration: '30s',
      preAllocatedVUs: 20,
      maxVUs: 200,
    });
    expect(options.summaryTrendStats).toEqual(lib.SUMMARY_TREND_STATS);
  });

  it('counts SSE events and finds the [DONE] terminator', () => {
    const stream = 'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n';
    expect(lib.countSseEvents(stream)).toBe(3);
    expect(lib.endsWithDone(stream)).toBe(true);
    expect(lib.endsWithDone('data: {"a":1}\n\n')).toBe(false);
  });

  it('recognises a chat completion body and nothing else', () => {
    expect(lib.isChatCompletion('{"object":"chat.completion","choices":[{"index":0}]}')).toBe(true);
    expect(lib.isChatCompletion('{"object":"chat.completion","choices":[]}')).toBe(false);
    expect(lib.isChatCompletion('not json')).toBe(false);
  });
});
