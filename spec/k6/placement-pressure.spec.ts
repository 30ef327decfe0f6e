import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BenchOptionError } from '../../k6/driver/errors.ts';
import { placement } from '../../k6/driver/scenarios/placement-workloads.ts';
import {
  LIVE_PRESSURE,
  checkLiveGateways,
  fleetGateways,
  formatLivePressure,
} from '../../k6/driver/scenarios/placement-pressure.ts';
import type { LivePressureRun } from '../../k6/driver/scenarios/placement-pressure.ts';
import {
  CACHE_PRESSURE,
  bodyOf,
  cachePressureWorkload,
  onTenants,
  traceCalls,
  warmBodyOf,
} from '../../k6/driver/workload.ts';
import type { ChatMessage } from '../../k6/driver/workload.ts';
import { simChatPrompt, simTokens } from '../../runner/protocol/sim-prompt.ts';
import { RotatingTarget } from '../../k6/driver/trace-run.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { startService } from '../../gateway/cli/entry.ts';

const shape = cachePressureWorkload(8, 27_000);
const messagesIn = (body: string): ChatMessage[] => (JSON.parse(body) as { messages: ChatMessage[] }).messages;
const tokensOf = (message: ChatMessage): number => simTokens(simChatPrompt([message])).length;

describe('the cache-pressure workload rendered live', () => {
  const calls = [...onTenants(traceCalls(shape, { rate: 40, durationMs: 20_000, seed: 7, firstSession: 1 }), 840)];

  it('is sized as the simulator sizes it: 420 tenants on 8 engines, contexts and queries of its token counts', () => {
    expect(shape.systemPrompts).toBe(420);
    const [system, user, ...rest] = messagesIn(bodyOf(shape, calls[0]!));
    expect(rest).toEqual([]);
    expect(tokensOf(system!)).toBe(CACHE_PRESSURE.contextTokens);
    expect(tokensOf(user!)).toBe(CACHE_PRESSURE.queryTokens);
  });

  it('moves every call onto the tenants from the offset, keeping arrivals', () => {
    const plain = [...traceCalls(shape, { rate: 40, durationMs: 20_000, seed: 7, firstSession: 1 })];
    expect(calls.map((c) => c.at)).toEqual(plain.map((c) => c.at));
    expect(calls.every((c, i) => c.system === plain[i]!.system + 840)).toBe(true);
  });

  it('gives a tenant’s calls one context text and each call a query of its own; other tenants other contexts', () => {
    const byTenant = new Map<number, string[]>();
    for (const call of calls) {
      const [system, user] = messagesIn(bodyOf(shape, call));
      const texts = byTenant.get(call.system) ?? [];
      texts.push(system!.content);
      byTenant.set(call.system, texts);
      expect(user!.content).not.toBe(system!.content.slice(0, user!.content.length));
    }
    const shared = [...byTenant.values()].filter((texts) => texts.length > 1);
    expect(shared.length).toBeGreaterThan(10);
    for (const texts of shared) expect(new Set(texts).size).toBe(1);
    expect(new Set([...byTenant.values()].map((texts) => texts[0])).size).toBe(byTenant.size);
    const queries = calls.map((c) => messagesIn(bodyOf(shape, c))[1]!.content);
    expect(new Set(queries).size).toBe(queries.length);
  });

  it('warms a tenant with its calls’ very context, one token out', () => {
    const call = calls[0]!;
    const warm = JSON.parse(warmBodyOf(shape, call.system)) as { messages: ChatMessage[]; max_tokens: number };
    expect(warm.messages[0]).toEqual(messagesIn(bodyOf(shape, call))[0]);
    expect(warm.max_tokens).toBe(1);
    expect(tokensOf(warm.messages[1]!)).toBeLessThan(16);
  });
});

describe('live cache-pressure options', () => {
  it('takes gateway counts as numbers or strings, always with one gateway', () => {
    expect(checkLiveGateways(undefined)).toEqual([1]);
    expect(checkLiveGateways(['1', '3'])).toEqual([1, 3]);
    expect(checkLiveGateways([3])).toEqual([1, 3]);
  });

  it('refuses a gateway count that is not a whole number from 1 to the bound, naming the option', () => {
    for (const bad of [0, LIVE_PRESSURE.maxGateways + 1, 1.5, 'three']) {
      expect(() => checkLiveGateways([bad])).toThrow(BenchOptionError);
      try {
        checkLiveGateways([bad]);
      } catch (error) {
        expect((error as BenchOptionError).option).toBe('gateways');
        expect((error as Error).message).toContain(JSON.stringify(typeof bad === 'string' ? Number.NaN : bad));
      }
    }
  });

  it('starts a gateway per placer and kv-aware’s further ones for the largest count', () => {
    expect(fleetGateways([1, 3]).map((g) => `${g.name}=${g.placer}`)).toEqual([
      'round-robin=round-robin',
      'prefix-affinity=prefix-affinity',
      'kv-aware=kv-aware',
      'kv-aware 2=kv-aware',
      'kv-aware 3=kv-aware',
    ]);
  });

  it('refuses an unknown workload before starting anything', async () => {
    const run = placement.run({ workload: 'sessions' } as never, {
      env: {},
      logger: createJsonLogger({ level: 'silent' }),
      startService,
    });
    await expect(run).rejects.toThrow(/invalid workload "sessions"/);
  });

  it('refuses a goodput target out of range', async () => {
    const run = placement.run({ workload: 'cache-pressure', ttftTarget: -1 } as never, {
      env: {},
      logger: createJsonLogger({ level: 'silent' }),
      startService,
    });
    await expect(run).rejects.toThrow(/invalid ttftTarget -1/);
  });
});

describe('live cache-pressure table', () => {
  const figures = (p50: number, p90: number) => ({
    calls: 100,
    errors: {},
    errorCount: 0,
    ttft: { p50, p90, p99: p90 * 2 },
    latency: { p50, p90, p99: p90 },
    tokensPerSecond: 1,
  });
  const run = (contender: string, gateways: number, p50: number, p90: number): LivePressureRun =>
    ({
      level: 1,
      rate: 30,
      contender,
      gateways,
      figures: figures(p50, p90),
      goodput: 0.9,
      shed: 0,
      cacheHitShare: 0.7,
    }) as never;

  it('gives each contender’s p50 and p90 over nginx round-robin’s and prefix-affinity’s at the same load', () => {
    const table = formatLivePressure([
      run('prefix-affinity', 1, 1000, 2000),
      run('kv-aware', 1, 250, 500),
      run('nginx round-robin', 0, 2000, 4000),
    ]);
    const line = table.split('\n').find((l) => l.includes('kv-aware'))!;
    expect(line).toMatch(/0\.13x\s+0\.13x\s+0\.25x\s+0\.25x/);
    expect(line).toContain('90%');
    expect(table.split('\n').find((l) => l.includes('nginx round-robin'))).toMatch(/nginx round-robin\s+-\s+30\.0/);
  });
});

describe('RotatingTarget', () => {
  // Three stand-in gateways, each answering a streamed call and counting what it got.
  const servers: Server[] = [];
  const urls: string[] = [];
  const counts = [0, 0, 0];
  beforeAll(async () => {
    for (const i of [0, 1, 2]) {
      const server = createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          counts[i]! += 1;
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.end(
            'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[],"usage":{"completion_tokens":4}}\n\ndata: [DONE]\n\n',
          );
        });
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      servers.push(server);
      urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    }
  });
  afterAll(() => Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r())))));

  it('sends calls to its gateways in turn, each call recorded', async () => {
    const target = new RotatingTarget('kv-aware x3', urls, 6);
    const small = { ...shape, systemWords: 5, userWords: 3, outputTokens: 4 };
    try {
      for (let i = 0; i < 7; i++) {
        const record = await target.call(small, { at: 0, session: i, turn: 1, system: 0 }, performance.now(), 5_000);
        expect(record.tokens).toBe(4);
      }
    } finally {
      await target.close();
    }
    expect(counts).toEqual([3, 2, 2]);
  });

  it('refuses a target outside this machine', () => {
    expect(() => new RotatingTarget('far', ['http://127.0.0.1:1', 'http://example.com'], 2)).toThrow(
      /127\.0\.0\.1|local/,
    );
  });
});
