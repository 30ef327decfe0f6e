import { metrics } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { CacheChecks } from '../../../gateway/calls/cache-checks.ts';
import { CacheTruth } from '../../../gateway/fleet/index.ts';
import type { GatewayPool } from '../../../gateway/fleet/index.ts';
import type { GatewayCall } from '../../../gateway/http/index.ts';
import { PromptMapper } from '../../../gateway/tokens/index.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import type { CachedReport, Placer, RunnerCall } from '../../../placer/types.ts';
import { packBlockKeys } from '../../../runner/protocol/index.ts';
import type { CacheAnnouncement } from '../../../runner/protocol/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { SIM_ANNOUNCEMENT } from '../../support/cache-announcement.ts';

const messages = [{ role: 'user', content: 'Tell me about GPU caches, at length and with care. '.repeat(8) }];
const keys = new PromptMapper().blocksOf({ route: 'chat', messages }, SIM_ANNOUNCEMENT)!.keys;

function setup() {
  const clock = new FakeClock();
  const truth = new CacheTruth({
    clock,
    staleAfterMs: 3000,
    pendingMs: 2000,
    maxBlocksPerRunner: 10_000,
    maxBlocks: 100_000,
    meterProvider: metrics.getMeterProvider(),
  });
  const runners: Array<{
    id: string;
    cacheAnnouncement?: CacheAnnouncement;
    tryExec: () => Promise<{ kind: 'busy' }>;
  }> = [
    { id: 'a', cacheAnnouncement: SIM_ANNOUNCEMENT, tryExec: async () => ({ kind: 'busy' as const }) },
    { id: 'b', cacheAnnouncement: SIM_ANNOUNCEMENT, tryExec: async () => ({ kind: 'busy' as const }) },
    { id: 'c', tryExec: async () => ({ kind: 'busy' as const }) },
  ];
  let asked = 0;
  const pool = {
    cacheTruth: truth,
    runners: () => {
      asked++;
      return runners;
    },
  } as unknown as GatewayPool;
  const reports: Array<[string, CachedReport]> = [];
  const placer: Placer = {
    name: 'spy',
    order: (_call, list) => list,
    cached: (_call: RunnerCall, runnerId: string, report: CachedReport) => void reports.push([runnerId, report]),
  };
  const checks = new CacheChecks({ pool, placer, logger: silentLogger });
  const call = (route: GatewayCall['route'] = 'chat') => ({ id: 'c1', fn: 'm', route }) as unknown as GatewayCall;
  /** `runner`'s first feed update: a live engine that holds `blocks` (none when not given). */
  const feeds = (runner: string, blocks?: readonly string[]) =>
    truth.update(
      runner,
      { epoch: 'e', seq: 1, engineFeed: 'live', reset: true, ...(blocks ? { stored: packBlockKeys(blocks) } : {}) },
      1,
    );
  return { clock, truth, feeds, checks, call, runners, asked: () => asked, reports };
}

describe('CacheChecks', () => {
  it('leaves a call as it is while no runner feeds the gateway', () => {
    const { checks, call, asked } = setup();
    const c = call();
    checks.attach(c, { messages });
    expect(Object.getOwnPropertyDescriptor(c, 'cache')).toBeUndefined();
    expect(c.cache).toBeUndefined();
    expect(asked()).toBe(0);
  });

  it('builds call.cache at its first read only, once, from the runners that announce a feed', () => {
    const { feeds, checks, call, asked } = setup();
    feeds('a', keys.slice(0, 3));
    const c = call();
    checks.attach(c, { messages });
    expect(asked()).toBe(0);
    const cache = c.cache!;
    expect(cache.promptTokens).toBeGreaterThan(64);
    // a is the only runner with a feed, so what it holds is every feed's floor; b and c are not
    // known, so the floor does not stand for them and a is listed with it.
    expect(cache.holders).toEqual(new Map([['a', 48]]));
    expect(cache.floor).toBe(0);
    expect([cache.known('a'), cache.known('b'), cache.known('c')]).toEqual([true, false, false]);
    expect(c.cache).toBe(cache);
    expect(asked()).toBe(1);
  });

  it('names the prompt each scheme its way, and knows none of a runner whose scheme it cannot map', () => {
    const { feeds, checks, call, runners } = setup();
    const wide: CacheAnnouncement = { ...SIM_ANNOUNCEMENT, scheme: { ...SIM_ANNOUNCEMENT.scheme, blockSize: 32 } };
    runners[1]!.cacheAnnouncement = wide;
    runners[2]!.cacheAnnouncement = { ...SIM_ANNOUNCEMENT, tokenizer: 'org/unknown-tokenizer' };
    const wideKeys = new PromptMapper().blocksOf({ route: 'chat', messages }, wide)!.keys;
    feeds('a', keys.slice(0, 1));
    feeds('b', wideKeys.slice(0, 2));
    feeds('c', keys);
    const c = call();
    checks.attach(c, { messages });
    // c holds the blocks as the 16-token scheme names them, but its engine names its own otherwise.
    expect(c.cache!.holders.get('a')).toBe(16);
    expect(c.cache!.holders.get('b')).toBe(64);
    expect([c.cache!.known('a'), c.cache!.known('b'), c.cache!.known('c')]).toEqual([true, true, false]);
  });

  it('gives no view to a call of another route, or without prompt parts', () => {
    const { checks, call, asked } = setup();
    const embeddings = call('embeddings');
    checks.attach(embeddings, { prompt: 'x' });
    const bare = call();
    checks.attach(bare, undefined);
    expect([embeddings.cache, bare.cache]).toEqual([undefined, undefined]);
    expect(asked()).toBe(0);
  });

  it('counts the placed call as pending on its runner, and records its prediction against the report', () => {
    const { truth, feeds, checks, call, reports } = setup();
    feeds('a', keys.slice(0, 3));
    feeds('b');
    const first = call();
    checks.attach(first, { messages });
    void first.cache;
    checks.placed(first, 'b');
    // The next call with the prompt finds it held on b, pending its feed.
    const second = call();
    checks.attach(second, { messages });
    expect(second.cache!.holders.get('b')).toBe(keys.length * 16);
    checks.reported(first, 'b', { cachedTokens: 0, promptTokens: 100 });
    expect(reports).toEqual([['b', { cachedTokens: 0, promptTokens: 100 }]]);
    expect(truth.stats().checks).toEqual([
      { model: 'm', runner: 'b', calls: 1, predictedTokens: 0, reportedTokens: 0, overTokens: 0, underTokens: 0 },
    ]);
  });

  it('tells the placer of a report even for a call placed without a view, but records no check', () => {
    const { truth, checks, call, reports } = setup();
    const c = call();
    checks.attach(c, { messages });
    checks.placed(c, 'a');
    checks.reported(c, 'a', { cachedTokens: 32 });
    expect(reports).toEqual([['a', { cachedTokens: 32 }]]);
    expect(truth.stats().checks).toEqual([]);
  });
});
