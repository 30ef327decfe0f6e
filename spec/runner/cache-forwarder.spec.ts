import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../placer/kernel/index.ts';
import { CacheForwarder } from '../../runner/cache-forwarder.ts';
import { CacheMirror } from '../../runner/cache-mirror.ts';
import type { KvEvent } from '../../runner/kv-events.ts';
import { unpackBlockKeys } from '../../runner/protocol/index.ts';
import type { FeedLoad } from '../../runner/protocol/index.ts';
import type { RegistrationTimers } from '../../runner/registration.ts';
import { eventually } from '../support/fleet.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Timers and a clock that move only when told: `advance` runs what falls due, in order. */
class FakeClock implements RegistrationTimers {
  now = 0;
  #next = 0;
  readonly #tasks = new Map<number, { at: number; run: () => void }>();

  setTimeout(run: () => void, ms: number): unknown {
    const id = this.#next++;
    this.#tasks.set(id, { at: this.now + ms, run });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#tasks.delete(handle as number);
  }

  advance(ms: number): void {
    const until = this.now + ms;
    for (;;) {
      const due = [...this.#tasks].filter(([, t]) => t.at <= until).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.#tasks.delete(due[0]);
      this.now = due[1].at;
      due[1].run();
    }
    this.now = until;
  }
}

/** A gateway's cache route: records each update and answers the scripted statuses, then 200. */
async function fakeGateway(): Promise<{
  url: string;
  updates: Array<{ path: string; auth: string | undefined; body: Record<string, unknown> }>;
  answers: number[];
}> {
  const updates: Array<{ path: string; auth: string | undefined; body: Record<string, unknown> }> = [];
  const answers: number[] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      updates.push({ path: req.url ?? '', auth: req.headers.authorization, body: JSON.parse(text) });
      res.writeHead(answers.shift() ?? 200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, updates, answers };
}

const TOKEN = 'runner-token-for-specs-0123456789';
const key = (n: number): string => n.toString(16).padStart(16, '0');
const keysOf = (packed: unknown): string[] => (typeof packed === 'string' ? unpackBlockKeys(packed)! : []);

/** A live mirror fed batches by hand, a forwarder over it, the fake clock and gateway. */
async function setUp(active = () => true, load?: () => FeedLoad) {
  const gateway = await fakeGateway();
  const clock = new FakeClock();
  let epochs = 0;
  const mirror = new CacheMirror(() => `e${++epochs}`);
  mirror.engineStarted();
  let seq = 0n;
  const feed = (...events: KvEvent[]) => mirror.receive({ seq: seq++, events });
  const forwarder = new CacheForwarder({
    gateway: new URL(gateway.url),
    token: TOKEN,
    runnerId: 'r-1',
    mirror,
    active,
    interval: 50,
    keepAlive: () => 1000,
    requestTimeout: 2000,
    timers: clock,
    now: () => clock.now,
    logger: silentLogger,
    ...(load ? { load } : {}),
  });
  mirror.listen(forwarder);
  cleanups.push(() => forwarder.stop());
  forwarder.start();
  /** Moves the clock and waits for the updates that makes go out (none at all when `expect` is 0). */
  const tick = async (ms: number, expectUpdates = 1): Promise<Record<string, unknown>[]> => {
    const before = gateway.updates.length;
    clock.advance(ms);
    await eventually(() => gateway.updates.length >= before + expectUpdates, 5000, 'updates');
    // An update in flight holds the next back: its answer lands before the clock moves again.
    await eventually(() => forwarder.counts.updates === gateway.updates.length, 5000, 'answers');
    return gateway.updates.slice(before).map((u) => u.body);
  };
  return { gateway, clock, mirror, feed, forwarder, tick };
}

describe('CacheForwarder', () => {
  it('opens each epoch with a reset holding the whole mirror, on the cache path with the runner token', async () => {
    const { gateway, feed, tick } = await setUp();
    feed({ kind: 'stored', keys: [key(1), key(2)] });
    const [first] = await tick(0);
    expect(first).toEqual({ epoch: 'e2', seq: 1, engineFeed: 'live', reset: true, stored: expect.any(String) });
    expect(keysOf(first!.stored).sort()).toEqual([key(1), key(2)]);
    expect(gateway.updates[0]).toMatchObject({ path: '/v1/runners/r-1/cache', auth: `Bearer ${TOKEN}` });
  });

  it('batches an interval of changes into one update of their net effect', async () => {
    const { feed, tick, forwarder } = await setUp();
    await tick(0);
    feed({ kind: 'stored', keys: [key(1), key(2)] });
    feed({ kind: 'removed', keys: [key(2)] }, { kind: 'stored', keys: [key(3)] });
    const updates = await tick(50);
    expect(updates).toHaveLength(1);
    expect(updates[0]).toEqual({ epoch: 'e2', seq: 2, engineFeed: 'live', stored: expect.any(String) });
    expect(keysOf(updates[0]!.stored).sort()).toEqual([key(1), key(3)]);
    feed({ kind: 'removed', keys: [key(1)] });
    const [next] = await tick(50);
    expect(next).toEqual({ epoch: 'e2', seq: 3, engineFeed: 'live', removed: expect.any(String) });
    expect(keysOf(next!.removed)).toEqual([key(1)]);
    expect(forwarder.counts.updates).toBe(3);
    expect(forwarder.counts.bytes).toBeGreaterThan(0);
  });

  it('sends nothing while nothing changes, then an empty keep-alive once a heartbeat has passed', async () => {
    const { gateway, tick } = await setUp();
    await tick(0);
    await tick(900, 0);
    expect(gateway.updates).toHaveLength(1);
    const [alive] = await tick(100);
    expect(alive).toEqual({ epoch: 'e2', seq: 2, engineFeed: 'live' });
  });

  it('answers a 409 with a reset of the whole mirror, its sequence starting again', async () => {
    const { gateway, feed, tick } = await setUp();
    feed({ kind: 'stored', keys: [key(1)] });
    await tick(0);
    feed({ kind: 'stored', keys: [key(2)] });
    gateway.answers.push(409);
    const [refused] = await tick(50);
    expect(refused).toMatchObject({ seq: 2 });
    const [reset] = await tick(50);
    expect(reset).toMatchObject({ epoch: 'e2', seq: 1, reset: true, engineFeed: 'live' });
    expect(keysOf(reset!.stored).sort()).toEqual([key(1), key(2)]);
  });

  it('after a 404 waits a heartbeat (the registration registers again), then resets', async () => {
    const { gateway, feed, tick } = await setUp();
    gateway.answers.push(404);
    feed({ kind: 'stored', keys: [key(1)] });
    await tick(0);
    await tick(950, 0);
    expect(gateway.updates).toHaveLength(1);
    const [reset] = await tick(50);
    expect(reset).toMatchObject({ seq: 1, reset: true });
    expect(keysOf(reset!.stored)).toEqual([key(1)]);
  });

  it('tells a mirror that started over as a reset with the feed down and no blocks, then live with a reset again', async () => {
    const { mirror, feed, tick } = await setUp();
    feed({ kind: 'stored', keys: [key(1)] });
    await tick(0);
    mirror.receive({ seq: 99n, events: [{ kind: 'stored', keys: [key(2)] }] });
    const [down] = await tick(50);
    expect(down).toEqual({ epoch: 'e3', seq: 1, reset: true, engineFeed: 'down' });
    mirror.receive({ seq: 100n, events: [{ kind: 'stored', keys: [key(3)] }] });
    const [live] = await tick(50);
    expect(live).toMatchObject({ epoch: 'e3', seq: 1, reset: true, engineFeed: 'live' });
    expect(keysOf(live!.stored)).toEqual([key(3)]);
  });

  it('sends nothing while there is no feed to carry', async () => {
    const { gateway, feed, tick } = await setUp(() => false);
    feed({ kind: 'stored', keys: [key(1)] });
    await tick(2000, 0);
    expect(gateway.updates).toEqual([]);
  });

  it('carries the load on every update, and sends it alone when it changed, at most every interval', async () => {
    let load: FeedLoad = { slotsInUse: 0, slots: 16, queue: 0, kvCacheUsage: 0.1 };
    const { gateway, clock, feed, tick } = await setUp(
      () => true,
      () => load,
    );
    const [reset] = await tick(0);
    expect(reset).toMatchObject({ seq: 1, reset: true, load });
    // A call starts at 10: its load goes at the next tick, 50, with no blocks.
    clock.advance(10);
    load = { slotsInUse: 1, slots: 16, queue: 0, kvCacheUsage: 0.123456 };
    const [started] = await tick(40);
    expect(started).toEqual({
      epoch: 'e2',
      seq: 2,
      engineFeed: 'live',
      load: { slotsInUse: 1, slots: 16, queue: 0, kvCacheUsage: 0.12 },
    });
    // Two changes within one interval: one update, with the later load, and blocks ride beside it.
    clock.advance(10);
    load = { slotsInUse: 2, slots: 16, queue: 0 };
    clock.advance(10);
    load = { slotsInUse: 3, slots: 16, queue: 1 };
    feed({ kind: 'stored', keys: [key(1)] });
    const updates = await tick(30);
    expect(updates).toHaveLength(1);
    expect(updates[0]).toMatchObject({ seq: 3, stored: expect.any(String), load });
    // A change just after a tick waits for the next one.
    clock.advance(1);
    load = { slotsInUse: 2, slots: 16, queue: 1 };
    await tick(48, 0);
    expect(gateway.updates).toHaveLength(3);
    const [later] = await tick(1);
    expect(later).toMatchObject({ seq: 4, load });
    // An unchanged load sends nothing until the keep-alive, which carries it too.
    await tick(900, 0);
    expect(gateway.updates).toHaveLength(4);
    const [alive] = await tick(100);
    expect(alive).toEqual({ epoch: 'e2', seq: 5, engineFeed: 'live', load });
  });

  it('carries the load on the reset that follows an update the gateway refused', async () => {
    const load: FeedLoad = { slotsInUse: 2, slots: 16, queue: 0 };
    const { gateway, tick } = await setUp(
      () => true,
      () => load,
    );
    gateway.answers.push(409);
    await tick(0);
    const [reset] = await tick(50);
    expect(reset).toMatchObject({ seq: 1, reset: true, load });
  });
});
