import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prefixCacheTotals, startCacheFleet } from '../../k6/driver/placement-fleet.ts';
import type { CacheFleet } from '../../k6/driver/placement-fleet.ts';
import { warmBodyOf } from '../../k6/driver/workload.ts';
import type { WorkloadShape } from '../../k6/driver/workload.ts';
import { startService } from '../../gateway/cli/entry.ts';

// Tiny contexts on two engines: the wiring, not the figures.
const shape: WorkloadShape = Object.freeze({
  model: 'sim-8b',
  systemPrompts: 4,
  systemWords: 62,
  turns: 1,
  userWords: 14,
  outputTokens: 4,
  thinkMs: 3_000,
});

describe('the cache-pressure fleet (real processes)', () => {
  let fleet: CacheFleet;

  beforeAll(async () => {
    fleet = await startCacheFleet({
      env: process.env,
      startService,
      logLevel: 'warn',
      engines: 2,
      slots: 4,
      model: shape.model,
      gateways: [
        { name: 'kv-aware', placer: 'kv-aware' },
        { name: 'kv-aware 2', placer: 'kv-aware' },
      ],
      nginx: false,
      joinTimeoutMs: 60_000,
    });
  }, 120_000);

  afterAll(() => fleet?.stop(), 60_000);

  it('registers every runner with every gateway, each hearing every engine’s cache feed', async () => {
    expect([...fleet.gateways.keys()]).toEqual(['kv-aware', 'kv-aware 2']);
    for (const name of fleet.gateways.keys()) {
      const panel = await fleet.cacheTruth(name);
      expect(panel?.runners.map((r) => r.runner).sort()).toEqual(['runner-1', 'runner-2']);
    }
  });

  it('caches a warmed context on the engine it was sent to, which the other gateway then hears', async () => {
    const engine = fleet.engines[1]!;
    const before = await prefixCacheTotals([engine]);
    const res = await fetch(new URL('/v1/chat/completions', engine.url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: warmBodyOf(shape, 0),
    });
    expect(res.status).toBe(200);
    await res.body?.cancel();
    const after = await prefixCacheTotals([engine]);
    expect(after.queries - before.queries).toBeGreaterThanOrEqual(shape.systemWords + 2);
    let blocks = 0;
    for (let i = 0; i < 200 && blocks === 0; i++) {
      blocks = (await fleet.cacheTruth('kv-aware 2'))?.blocks ?? 0;
      if (blocks === 0) await new Promise((r) => setTimeout(r, 50));
    }
    expect(blocks).toBeGreaterThanOrEqual(Math.floor((shape.systemWords + 2) / 16));
  });
});
