import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lineChart } from '../../k6/driver/line-chart.ts';
import { nginxConfig } from '../../k6/driver/nginx.ts';
import { counter } from '../../k6/driver/placement-fleet.ts';
import { baselineOf, crossing, findCapacity, formatPlacement } from '../../k6/driver/scenarios/placement.ts';
import type { PlacementRun } from '../../k6/driver/scenarios/placement.ts';
import { TraceTarget, placementFigures, replay } from '../../k6/driver/trace-run.ts';
import type { CallRecord } from '../../k6/driver/trace-run.ts';
import { PLACEMENT_WORKLOAD, bodyOf, messagesOf, promptTokensOf, traceCalls } from '../../k6/driver/workload.ts';
import type { TraceCall, WorkloadShape } from '../../k6/driver/workload.ts';
import { renderChatPrompt, tokenize } from '../../runner/engines/sim/text.ts';

const shape = PLACEMENT_WORKLOAD;

describe('traceCalls', () => {
  const calls = [...traceCalls(shape, { rate: 40, durationMs: 60_000, seed: 3 })];

  it('is in due order, inside the trace, at about the asked rate once every turn is present', () => {
    expect(calls.every((c, i) => i === 0 || calls[i - 1]!.at <= c.at)).toBe(true);
    expect(calls.every((c) => c.at >= 0 && c.at < 60_000)).toBe(true);
    // Sessions arrive at random, so the count is near, not at, 40/s over the 51 s after the lead.
    const steady = calls.filter((c) => c.at >= (shape.turns - 1) * shape.thinkMs).length / 51;
    expect(steady).toBeGreaterThan(34);
    expect(steady).toBeLessThan(46);
  });

  it('spaces a session’s turns by the think time, one system prompt per session', () => {
    const bySession = new Map<number, TraceCall[]>();
    for (const c of calls) bySession.set(c.session, [...(bySession.get(c.session) ?? []), c]);
    const whole = [...bySession.values()].filter((turns) => turns.length === shape.turns);
    expect(whole.length).toBeGreaterThan(100);
    for (const turns of whole) {
      expect(turns.map((c) => c.turn)).toEqual([1, 2, 3, 4]);
      expect(turns[3]!.at - turns[0]!.at).toBeCloseTo(3 * shape.thinkMs, 6);
      expect(new Set(turns.map((c) => c.system)).size).toBe(1);
    }
  });

  it('starts sessions before the trace, so later turns are due from the first second', () => {
    expect(calls.filter((c) => c.at < 1_000).some((c) => c.turn === shape.turns)).toBe(true);
  });

  it('keeps arrivals and system prompts for another first session, with other words', () => {
    const other = [...traceCalls(shape, { rate: 40, durationMs: 60_000, seed: 3, firstSession: 77_000_000 })];
    expect(other.map((c) => [c.at, c.turn, c.system])).toEqual(calls.map((c) => [c.at, c.turn, c.system]));
    expect(other[0]!.session).not.toBe(calls[0]!.session);
    expect(messagesOf(shape, other[0]!)[1]!.content).not.toBe(messagesOf(shape, calls[0]!)[1]!.content);
    expect(messagesOf(shape, other[0]!)[0]!.content).toBe(messagesOf(shape, calls[0]!)[0]!.content);
  });

  it('stops at maxCalls', () => {
    expect([...traceCalls(shape, { rate: 40, durationMs: 60_000, seed: 3, maxCalls: 25 })]).toHaveLength(25);
  });
});

describe('messages and prompt tokens', () => {
  const call = (turn: number): TraceCall => ({ at: 0, session: 42, turn, system: 2 });

  it('count as the simulated engine counts them, the system message being the shared part', () => {
    for (const turn of [1, 2, 4]) {
      const tokens = tokenize(renderChatPrompt(messagesOf(shape, call(turn))));
      expect(promptTokensOf(shape, turn).total).toBe(tokens.length);
    }
    const system = tokenize(renderChatPrompt(messagesOf(shape, call(1)).slice(0, 1)));
    expect(promptTokensOf(shape, 1).shared).toBe(system.length);
  });

  it('make each turn’s prompt a prefix of the next turn’s, which is what the prefix cache rewards', () => {
    const turn2 = tokenize(renderChatPrompt(messagesOf(shape, call(2))));
    const turn3 = tokenize(renderChatPrompt(messagesOf(shape, call(3))));
    expect(turn3.slice(0, turn2.length)).toEqual(turn2);
    expect(turn3.length).toBeGreaterThan(turn2.length);
  });

  it('ask for exactly the output tokens, streamed with usage, the session as the user', () => {
    const body = JSON.parse(bodyOf(shape, call(1)));
    expect(body).toMatchObject({
      model: shape.model,
      max_tokens: shape.outputTokens,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
      user: 'session-42',
    });
  });
});

describe('placementFigures', () => {
  const ok = (at: number, ttft: number): CallRecord => ({
    at,
    turn: 1,
    status: 200,
    ttft,
    latency: ttft + 500,
    tokens: 64,
  });
  const records: CallRecord[] = [
    ok(500, 1), // warm-up: left out
    ok(1_000, 100),
    ok(1_500, 200),
    { at: 2_000, turn: 2, status: 429, ttft: Number.NaN, latency: Number.NaN, tokens: 0, error: 'status 429' },
    { at: 2_500, turn: 2, status: 200, ttft: 300, latency: Number.NaN, tokens: 10, error: 'incomplete' },
    ok(3_000, 9_999), // after the window: left out
  ];

  it('counts the window only: calls, errors by reason, ttft of calls with a token, tokens per second', () => {
    const f = placementFigures(records, 1_000, 2_000);
    expect(f.calls).toBe(4);
    expect(f.errors).toEqual({ 'status 429': 1, incomplete: 1 });
    expect(f.errorCount).toBe(2);
    expect(f.ttft.count).toBe(3);
    expect(f.ttft.max).toBe(300);
    expect(f.latency.count).toBe(2);
    expect(f.tokensPerSecond).toBe((64 + 64 + 10) / 2);
  });
});

describe('capacity search', () => {
  // A fleet whose p90 grows sharply past 50 calls/s.
  const p90At = (rate: number): number => (rate < 50 ? 300 + rate * 10 : 800 + (rate - 50) * 40);

  it('steps up, brackets the 1 s crossing and narrows it down', async () => {
    const probes = await findCapacity(async (rate) => p90At(rate));
    expect(probes[0]!.rate).toBe(20);
    const rate = crossing(probes, 1_000);
    // The exact crossing of p90At is 55; linear interpolation between the narrowed probes lands close.
    expect(rate).toBeGreaterThan(54);
    expect(rate).toBeLessThan(56);
    expect(probes.length).toBeLessThanOrEqual(12);
  });

  it('steps down when the first rate is already over', async () => {
    const probes = await findCapacity(async (rate) => (rate < 8 ? 500 : 2_000));
    expect(probes[1]!.rate).toBeLessThan(probes[0]!.rate);
    const rate = crossing(probes, 1_000);
    expect(rate).toBeGreaterThan(7);
    expect(rate).toBeLessThan(10);
  });

  it('takes an errored probe (infinite p90) as the upper rate', () => {
    expect(
      crossing(
        [
          { rate: 10, p90: 400 },
          { rate: 13, p90: Infinity },
        ],
        1_000,
      ),
    ).toBe(13);
  });

  it('says so when nothing crosses', async () => {
    await expect(findCapacity(async () => 10)).rejects.toThrow(/no rate between/);
  });
});

describe('placement report', () => {
  const run = (contender: string, level: number, p90: number): PlacementRun => ({
    level,
    rate: level * 40,
    seed: 1,
    firstSession: 1,
    contender,
    cacheHitShare: 0.9,
    figures: placementFigures([{ at: 0, turn: 1, status: 200, ttft: p90, latency: p90 + 1, tokens: 64 }], 0, 1_000),
  });

  it('compares every contender with nginx round-robin when it ran, else with sluice round-robin', () => {
    const runs = [run('round-robin', 0.5, 200), run('prefix-affinity', 0.5, 100), run('nginx round-robin', 0.5, 400)];
    expect(baselineOf(runs)).toBe('nginx round-robin');
    expect(baselineOf(runs.slice(0, 2))).toBe('round-robin');
    const table = formatPlacement(runs);
    expect(table).toMatch(/prefix-affinity .* 0\.25x +0\.25x/);
    expect(table).toMatch(/base = nginx round-robin/);
  });

  it('draws one line per contender in every panel', () => {
    const svg = lineChart(
      [
        {
          heading: 'p90',
          yLabel: 'ms',
          series: [
            {
              name: 'a',
              points: [
                { x: 50, y: 10 },
                { x: 100, y: 30 },
              ],
            },
            {
              name: 'b',
              points: [
                { x: 50, y: 5 },
                { x: 100, y: Number.NaN },
              ],
            },
          ],
        },
      ],
      'title',
      'sub',
      'load',
      (v) => `${v}%`,
    );
    expect(svg.match(/<polyline/g)).toHaveLength(2);
    expect(svg.match(/<circle/g)).toHaveLength(3);
    expect(svg).toContain('100%');
  });
});

describe('nginx in front of several engines', () => {
  const upstreams = [new URL('http://127.0.0.1:9001'), new URL('http://127.0.0.1:9002')];

  it('lists every upstream, with least_conn and unbuffered streams when asked', () => {
    const conf = nginxConfig('/tmp/x', 8080, upstreams, { method: 'least_conn', buffering: false });
    expect(conf).toContain('server 127.0.0.1:9001;');
    expect(conf).toContain('server 127.0.0.1:9002;');
    expect(conf).toMatch(/upstream runner \{\s+least_conn;/);
    expect(conf).toContain('proxy_buffering off;');
  });

  it('keeps the default round-robin, buffered, for one upstream', () => {
    const conf = nginxConfig('/tmp/x', 8080, upstreams[0]!);
    expect(conf).not.toContain('least_conn');
    expect(conf).not.toContain('proxy_buffering');
    expect(conf.match(/server 127/g)).toHaveLength(1);
  });
});

describe('counter', () => {
  it('sums a counter’s samples across labels and ignores longer names', () => {
    const page = [
      '# TYPE vllm:prefix_cache_hits counter',
      'vllm:prefix_cache_hits_total{model_name="a"} 10',
      'vllm:prefix_cache_hits_total{model_name="b"} 5.5',
      'vllm:prefix_cache_hits_total_other 99',
    ].join('\n');
    expect(counter(page, 'vllm:prefix_cache_hits_total')).toBe(15.5);
    expect(counter(page, 'vllm:missing')).toBe(0);
  });
});

describe('replay', () => {
  // A stand-in engine: streams two events and usage, or answers 429 for session 13's calls.
  let server: ReturnType<typeof createServer>;
  let base = '';
  const seen: number[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c));
      req.on('end', () => {
        const { user } = JSON.parse(body) as { user: string };
        seen.push(Date.now());
        if (user === 'session-13') {
          res.writeHead(429).end();
          return;
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
        setTimeout(() => res.end('data: {"choices":[],"usage":{"completion_tokens":64}}\n\ndata: [DONE]\n\n'), 20);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('sends each call at its due time and records first token, tokens and failures', async () => {
    const target = new TraceTarget('stub', base, 8);
    const small: WorkloadShape = { ...shape, systemWords: 5, userWords: 3 };
    const calls: TraceCall[] = [
      { at: 0, session: 12, turn: 1, system: 0 },
      { at: 150, session: 13, turn: 1, system: 0 },
      { at: 300, session: 14, turn: 1, system: 0 },
    ];
    seen.length = 0;
    const started = Date.now();
    const records = await replay(target, small, calls, { timeoutMs: 5_000, maxInFlight: 10 });
    await target.close();
    expect(records.map((r) => r.error)).toEqual([undefined, 'status 429', undefined]);
    expect(records[0]!.tokens).toBe(64);
    expect(records[0]!.latency).toBeGreaterThan(records[0]!.ttft);
    // Open loop: the third call left at its due time, 300 ms in, not as soon as the first finished.
    expect(seen[2]! - started).toBeGreaterThanOrEqual(295);
  });

  it('records calls past maxInFlight as dropped instead of queueing them', async () => {
    const target = new TraceTarget('stub', base, 8);
    const calls: TraceCall[] = [0, 1, 2].map((i) => ({ at: 0, session: 20 + i, turn: 1, system: 0 }));
    const records = await replay(target, { ...shape, systemWords: 5, userWords: 3 }, calls, {
      timeoutMs: 5_000,
      maxInFlight: 2,
    });
    await target.close();
    expect(records.filter((r) => r.error === 'dropped')).toHaveLength(1);
  });

  it('refuses a target off this machine', () => {
    expect(() => new TraceTarget('x', 'http://example.com', 1)).toThrow(/127\.0\.0\.1/);
  });
});
