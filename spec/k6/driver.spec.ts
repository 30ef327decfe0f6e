import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BenchOptionError,
  BenchTargetError,
  LoadClient,
  Recorder,
  UnknownScenarioError,
  assertLocalTarget,
  combine,
  distribution,
  percentile,
  ratio,
  resolveBenchOptions,
  runBench,
  runClosedLoop,
  runOpenLoop,
  summarize,
} from '../../k6/driver/index.ts';
import type { BenchOptions } from '../../k6/driver/index.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { startService } from '../../gateway/cli/entry.ts';

describe('percentile', () => {
  const oneToHundred = Float64Array.from({ length: 100 }, (_, i) => i + 1);

  it.each([
    [0, 1],
    [1, 1],
    [50, 50],
    [90, 90],
    [99, 99],
    [99.9, 100],
    [100, 100],
  ])('returns the nearest-rank sample when p is %d over 1..100', (p, expected) => {
    expect(percentile(oneToHundred, p)).toBe(expected);
  });

  it('returns a sample, never an interpolated value, when there are few samples', () => {
    expect(percentile([1, 10], 50)).toBe(1);
    expect(percentile([1, 10], 51)).toBe(10);
    expect(percentile([7], 99)).toBe(7);
  });

  it('returns NaN when there are no samples', () => {
    expect(percentile([], 50)).toBeNaN();
  });

  it.each([-1, 101, Number.NaN])('throws RangeError when p is %d', (p) => {
    expect(() => percentile([1], p)).toThrow(RangeError);
  });
});

describe('distribution', () => {
  it('returns percentiles of the values sorted numerically when given them out of order', () => {
    // 10 before 9 as strings: a default sort would get this wrong.
    const d = distribution([10, 2, 9, 1, 100, 3, 4, 5, 6, 7, 8]);
    expect(d).toMatchObject({ count: 11, min: 1, p50: 6, p90: 10, p99: 100, max: 100 });
    expect(d.mean).toBeCloseTo(155 / 11);
  });

  it('returns NaN everywhere when there are no samples', () => {
    expect(distribution([])).toEqual({ count: 0, min: NaN, mean: NaN, p50: NaN, p90: NaN, p99: NaN, max: NaN });
  });
});

describe('ratio', () => {
  it('returns a / b when both are positive and finite', () => expect(ratio(1, 4)).toBe(0.25));
  it.each([
    [1, 0],
    [NaN, 1],
    [1, Infinity],
  ])('returns NaN when given %d / %d', (a, b) => expect(ratio(a, b)).toBeNaN());
});

describe('summarize', () => {
  it('counts only 2xx as throughput and everything else as errors when a run had failures', () => {
    const rec = new Recorder();
    for (let i = 1; i <= 8; i++) rec.response(200, i, i / 2, 0);
    rec.response(503, 50, 50, 0);
    rec.failure(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), 0);
    const s = summarize(
      rec.result({
        target: 't',
        mode: 'open',
        connections: 4,
        rate: 10,
        durationMs: 1000,
        elapsedMs: 2000,
        sent: 11,
        dropped: 1,
      }),
    );
    expect(s).toMatchObject({
      ok: 8,
      rps: 4,
      non2xx: 1,
      transportErrors: 1,
      dropped: 1,
      errors: 3,
      errorKinds: { ECONNREFUSED: 1 },
    });
    expect(s.latency).toMatchObject({ count: 9, p50: 5, max: 50 });
  });

  it('pools samples and time when rounds are combined', () => {
    const run = (latency: number) => {
      const rec = new Recorder();
      rec.response(200, latency, latency, 0);
      return rec.result({
        target: 't',
        mode: 'closed',
        connections: 1,
        durationMs: 500,
        elapsedMs: 500,
        sent: 1,
        dropped: 0,
      });
    };
    const s = summarize(combine([run(1), run(3)]));
    expect(s).toMatchObject({ ok: 2, rps: 2, sent: 2, statuses: { 200: 2 } });
    expect(s.latency).toMatchObject({ count: 2, p50: 1, max: 3 });
  });
});

describe('assertLocalTarget', () => {
  it.each(['http://127.0.0.1:8080/v1/chat/completions', 'http://localhost/x'])(
    'returns the parsed URL when given %s',
    (url) => {
      expect(assertLocalTarget(url).href).toBe(new URL(url).href);
    },
  );

  it.each([
    'http://example.com/',
    'http://10.0.0.1:8080/',
    'http://127.0.0.2/',
    'http://127.0.0.1.nip.io/',
    'https://127.0.0.1/',
    'http://[::ffff:7f00:1]/',
    'not a url',
  ])('throws BenchTargetError when given %s', (url) => {
    expect(() => assertLocalTarget(url)).toThrow(BenchTargetError);
  });

  it('refuses a remote target before any connection is made when building a client', () => {
    expect(() => new LoadClient({ name: 'x', url: 'http://192.0.2.1/' })).toThrow(/only loads this machine/);
  });
});

describe('resolveBenchOptions', () => {
  it('returns frozen defaults when given nothing', () => {
    const o = resolveBenchOptions();
    expect(o).toMatchObject({ duration: 10_000, connections: 32, rate: 500, rounds: 1, nginx: true });
    expect(Object.isFrozen(o)).toBe(true);
  });

  it.each<[BenchOptions, string]>([
    [{ duration: 150_000 }, 'duration must be between 1s and 120s, got 150s'],
    [{ rate: 20_001 }, 'rate must be between 1 and 20000, got 20001'],
    [{ connections: 1_025 }, 'connections must be between 1 and 1024, got 1025'],
    [{ connections: 1.5 }, 'connections must be an integer, got 1.5'],
    [{ rounds: 0 }, 'rounds must be between 1 and 10, got 0'],
    [{ warmup: 500.5 }, 'warmup must be an integer of ms, got 500.5'],
    [{ nginx: 'yes' as unknown as boolean }, 'nginx must be true or false, got "yes"'],
  ])('throws BenchOptionError naming the option when given %j', (options, message) => {
    expect(() => resolveBenchOptions(options)).toThrow(BenchOptionError);
    expect(() => resolveBenchOptions(options)).toThrow(message);
  });
});

describe('runBench', () => {
  const ctx = { env: {}, logger: createJsonLogger({ level: 'silent' }), startService };
  it('throws UnknownScenarioError listing the scenarios when the name is unknown', async () => {
    await expect(runBench(['nope'], {}, ctx)).rejects.toThrow(
      new UnknownScenarioError(
        'unknown scenario "nope"; scenarios: overhead, streaming, placement, scale, memory, simulate, soak, serverless, tokens, feed, batch',
      ),
    );
  });
  it('throws UnknownScenarioError when no scenario is named', async () => {
    await expect(runBench([], {}, ctx)).rejects.toThrow(UnknownScenarioError);
  });
});

describe('load loops', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = createServer((req, res) => req.resume().on('end', () => res.end('ok')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('stops at maxRequests when the closed loop reaches it before the duration', async () => {
    const client = new LoadClient({ name: 'local', url, body: '{}' }, { connections: 4 });
    const result = await runClosedLoop(client, { duration: 60_000, maxRequests: 40 });
    await client.close();
    expect(result.sent).toBe(40);
    expect(summarize(result)).toMatchObject({ ok: 40, errors: 0 });
    expect(result.ttfb).toHaveLength(40);
  });

  it('sends rate x duration requests on schedule when the open loop runs', async () => {
    const client = new LoadClient({ name: 'local', url }, { connections: 2 });
    const result = await runOpenLoop(client, { rate: 100, duration: 200 });
    await client.close();
    expect(result).toMatchObject({ mode: 'open', sent: 20, dropped: 0, rate: 100 });
    expect(summarize(result).ok).toBe(20);
  });
});
