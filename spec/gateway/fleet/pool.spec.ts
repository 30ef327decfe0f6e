/**
 * FleetPool at unit level, on a fake clock and without a network: its per-model candidate lists
 * stay true as runners register, heartbeat, change models, drain and leave (the entries keep
 * them true; nobody calls a "changed" hook by hand), explain() gives each runner's reason for a
 * 503, and a registered runner's report goes from fresh to stale to unreachable as the gateway's
 * clock alone moves. No runner here is ever called: the URLs point at a closed port.
 */
import { describe, expect, it } from 'vitest';
import type { GatewayCall } from '../../../gateway/http/call.ts';
import { FleetPool } from '../../../gateway/fleet/pool.ts';
import { RunnerRegistry } from '../../../gateway/fleet/registry.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import { createLeastLoadedPlacer } from '../../../placer/index.ts';
import { LOAD_STALE_AFTER_MS, loadOf } from '../../../placer/load.ts';
import type { ReportedLoad, RunnerRegistration } from '../../../runner/protocol/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { serversForEach } from '../../support/servers.ts';
import { gatewayCall } from '../../support/gateway-call.ts';

const HEARTBEAT = 1_000;
const UNREACHABLE_AFTER = 3 * HEARTBEAT;
const LOST_AFTER = 30_000;

const { cleanups } = serversForEach();

/** A pool (with `urls` as static runners) and its registry, on a fresh fake clock. */
function fleet(urls: string[] = []): {
  pool: FleetPool;
  registry: RunnerRegistry;
  clock: FakeClock;
  forgotten: string[];
} {
  const clock = new FakeClock();
  const forgotten: string[] = [];
  const pool = new FleetPool({
    urls: urls.map((u) => new URL(u)),
    connectTimeout: 1_000,
    responseTimeout: 1_000,
    streamIdleTimeout: 60_000,
    clock,
    statusInterval: 1_000,
    breaker: { threshold: 2, openFor: 30_000, closeAfter: 2 },
    logger: silentLogger,
    onRemove: (ids) => forgotten.push(...ids),
  });
  const registry = new RunnerRegistry({
    pool,
    tokens: ['a-runner-token-long-enough'],
    networks: ['127.0.0.0/8'],
    gatewayId: 'gw-test',
    heartbeatInterval: HEARTBEAT,
    unreachableAfter: UNREACHABLE_AFTER,
    lostAfter: LOST_AFTER,
    logger: silentLogger,
    clock,
  });
  cleanups.push(async () => {
    registry.close();
    await pool.close({ abortCalls: true });
  });
  return { pool, registry, clock, forgotten };
}

const idle: ReportedLoad = { slotsInUse: 0, slots: 4, queue: 0, models: {} };
const full: ReportedLoad = { slotsInUse: 4, slots: 4, queue: 0, models: {} };

function registration(id: string, models: string[], extra: Partial<RunnerRegistration> = {}): RunnerRegistration {
  return {
    id,
    url: 'http://127.0.0.1:9',
    version: 'test',
    engines: [],
    models,
    slots: 4,
    gpus: null,
    ready: true,
    load: idle,
    ...extra,
  };
}

function heartbeat(models: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { ready: true, state: 'serving', models, load: idle, ...extra };
}

/** A call for `model` on the chat route, or on /invoke (which any runner may take) for `undefined`. */
function callFor(model: string | undefined, clock: FakeClock): GatewayCall {
  const call = { id: `call-${model}`, fn: model ?? 'fn', key: model ?? 'fn' };
  return gatewayCall(clock.now(), model === undefined ? { ...call, route: 'invoke', path: '/invoke/fn' } : call);
}

const ids = (runners: readonly { id: string }[]): string[] => runners.map((r) => r.id).sort();

describe('FleetPool.runners: the per-model candidate lists', () => {
  it('lists a registered runner for the models it reported, and returns the same list until something changes', () => {
    const { pool, registry, clock } = fleet();
    registry.register(registration('a', ['m1']), 0);
    registry.register(registration('b', ['m1', 'm2']), 0);
    const m1 = pool.runners(callFor('m1', clock));
    expect(ids(m1)).toEqual(['a', 'b']);
    expect(ids(pool.runners(callFor('m2', clock)))).toEqual(['b']);
    expect(ids(pool.runners(callFor('m3', clock)))).toEqual([]);
    expect(ids(pool.runners(callFor(undefined, clock)))).toEqual(['a', 'b']);
    // Cached and frozen: placers may key their own caches on the list's identity, unchecked.
    expect(pool.runners(callFor('m1', clock))).toBe(m1);
    expect(Object.isFrozen(m1)).toBe(true);
    expect(Object.isFrozen(pool.runnerList)).toBe(true);
    // A heartbeat that changes nothing keeps the cache.
    registry.heartbeat('a', heartbeat(['m1']), 0);
    expect(pool.runners(callFor('m1', clock))).toBe(m1);
  });

  it('follows a heartbeat that changes the models', () => {
    const { pool, registry, clock } = fleet();
    registry.register(registration('a', ['m1']), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a']);
    registry.heartbeat('a', heartbeat(['m2']), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual([]);
    expect(ids(pool.runners(callFor('m2', clock)))).toEqual(['a']);
  });

  it('drops a runner that is not ready, draining or asked to drain, and takes it back when it is ready again', () => {
    const { pool, registry, clock } = fleet();
    registry.register(registration('a', ['m1']), 0);
    registry.register(registration('b', ['m1']), 0);
    registry.heartbeat('a', heartbeat(['m1'], { ready: false }), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['b']);
    expect(ids(pool.runners(callFor(undefined, clock)))).toEqual(['b']);
    registry.heartbeat('a', heartbeat(['m1']), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a', 'b']);
    registry.heartbeat('a', heartbeat(['m1'], { state: 'draining' }), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['b']);
    expect(registry.requestDrain('b')).toBe(true);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual([]);
    // A registration again does not forget the drain an operator asked for.
    registry.register(registration('b', ['m1']), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual([]);
  });

  it('forgets a runner that leaves, and tells the placer', () => {
    const { pool, registry, clock, forgotten } = fleet();
    registry.register(registration('a', ['m1']), 0);
    registry.register(registration('b', ['m1']), 0);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a', 'b']);
    expect(registry.deregister('a', 0)).toBe(true);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['b']);
    expect(pool.get('a')).toBeUndefined();
    expect(forgotten).toEqual(['a']);
  });

  it('lists a static runner for every model until a probe says what it serves, then for those only', () => {
    const { pool, clock } = fleet(['http://127.0.0.1:9']);
    const runner = pool.get('127.0.0.1:9')!;
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['127.0.0.1:9']);
    expect(ids(pool.runners(callFor('m2', clock)))).toEqual(['127.0.0.1:9']);
    expect(pool.serves('m1')).toBe('unknown');
    runner.probed({ models: ['m1'], load: undefined });
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['127.0.0.1:9']);
    expect(ids(pool.runners(callFor('m2', clock)))).toEqual([]);
    expect(pool.serves('m1')).toBe('yes');
    expect(pool.serves('m2')).toBe('no');
    expect(pool.models()).toEqual(['m1']);
  });

  it('keeps a down or hung runner listed, so hashing placers keep their order', () => {
    const { pool, registry, clock } = fleet();
    registry.register(registration('a', ['m1']), 0);
    registry.register(registration('b', ['m1']), 0);
    pool.get('a')!.markHung('silent');
    pool.get('b')!.markDown(new Error('refused'));
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a', 'b']);
  });
});

describe('FleetPool.explain', () => {
  it("gives each runner's reason for not taking the call", () => {
    const { pool, registry, clock } = fleet(['http://127.0.0.1:9']);
    const fresh = pool.get('127.0.0.1:9')!;
    // A static runner that has not said what it serves yet is not ready for a model call.
    expect(pool.explain(callFor('m1', clock), new Map())).toEqual([{ runner: '127.0.0.1:9', reason: 'not-ready' }]);
    fresh.probed({ models: ['m1'], load: undefined });

    const register = (id: string, models = ['m1'], extra: Partial<RunnerRegistration> = {}) =>
      registry.register(registration(id, models, extra), 0);
    register('busy');
    register('other-model', ['m2']);
    register('starting', ['m1'], { ready: false });
    register('draining');
    registry.heartbeat('draining', heartbeat(['m1'], { state: 'draining' }), 0);
    register('drain-asked');
    registry.requestDrain('drain-asked');
    register('hung');
    pool.get('hung')!.markHung('no acknowledgement');
    register('ejected');
    pool.get('ejected')!.breaker.failure();
    pool.get('ejected')!.breaker.failure();
    register('refused');
    pool.get('refused')!.markDown(new Error('ECONNREFUSED'));
    register('offer-failed');
    register('silent');
    clock.advance(UNREACHABLE_AFTER + 1);
    for (const id of [
      'busy',
      'other-model',
      'starting',
      'draining',
      'drain-asked',
      'hung',
      'ejected',
      'refused',
      'offer-failed',
    ]) {
      registry.heartbeat(
        id,
        heartbeat(
          id === 'other-model' ? ['m2'] : ['m1'],
          id === 'starting' ? { ready: false } : id === 'draining' ? { state: 'draining' } : {},
        ),
        0,
      );
    }
    registry.sweep();

    const reasons = pool.explain(
      callFor('m1', clock),
      new Map([
        ['offer-failed', 'error'],
        ['busy', 'busy'],
      ]),
    );
    expect(Object.fromEntries(reasons.map((r) => [r.runner, r.reason]))).toEqual({
      '127.0.0.1:9': 'busy',
      busy: 'busy',
      'other-model': 'not-serving-model',
      starting: 'not-ready',
      draining: 'draining',
      'drain-asked': 'drain-requested',
      hung: 'hung',
      ejected: 'breaker-open',
      refused: 'unreachable',
      'offer-failed': 'unreachable',
      silent: 'unreachable',
    });
    // On /invoke, models do not matter.
    const invoke = pool.explain(callFor(undefined, clock), new Map());
    expect(invoke.find((r) => r.runner === 'other-model')!.reason).toBe('busy');
  });
});

describe('a registered runner on the gateway clock', () => {
  it('goes from fresh to stale to unreachable, and back, as the fake clock alone moves', () => {
    const { pool, registry, clock } = fleet();
    const now = () => clock.now();
    registry.register(registration('a', ['m1'], { load: full }), 0);
    registry.register(registration('b', ['m1']), 0);
    const a = pool.get('a')!;
    const placer = createLeastLoadedPlacer({ now, random: () => 0 });
    const order = () => [...placer.order(callFor('m1', clock), pool.runners(callFor('m1', clock)))].map((r) => r.id);

    // Fresh: the report (every slot taken) counts, and the idle runner goes first.
    expect(a.load().reported?.at).toBe(clock.now());
    expect(loadOf(a.load(), now())).toBe(1);
    expect(order()).toEqual(['b', 'a']);

    // Stale: past the staleness bound with no heartbeat, the report no longer counts, but the
    // runner is still placed on (a heartbeat or two may be late).
    clock.advance(LOAD_STALE_AFTER_MS + 1);
    registry.heartbeat('b', heartbeat(['m1']), 0);
    registry.sweep();
    expect(loadOf(a.load(), now())).toBe(0);
    expect(a.registration?.state).toBe('live');
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a', 'b']);

    // Unreachable: past unreachableAfter, the sweep stops placing on it.
    clock.advance(UNREACHABLE_AFTER - LOAD_STALE_AFTER_MS);
    registry.heartbeat('b', heartbeat(['m1']), 0);
    registry.sweep();
    expect(a.registration?.state).toBe('unreachable');
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['b']);
    expect(pool.explain(callFor('m1', clock), new Map()).find((r) => r.runner === 'a')!.reason).toBe('unreachable');

    // A heartbeat brings it back, fresh again.
    registry.heartbeat('a', { ...heartbeat(['m1']), load: full }, 0);
    expect(a.registration?.state).toBe('live');
    expect(loadOf(a.load(), now())).toBe(1);
    expect(ids(pool.runners(callFor('m1', clock)))).toEqual(['a', 'b']);

    // Lost: silent past lostAfter, it leaves the pool.
    clock.advance(LOST_AFTER + 1);
    registry.sweep();
    expect(pool.get('a')).toBeUndefined();
  });
});
