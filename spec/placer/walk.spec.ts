import { describe, expect, it } from 'vitest';
import {
  PlacerAbortedError,
  PlacerPoolError,
  PlacerTimeoutError,
  placeCall,
  type Placer,
  type Runner,
  type RunnerCall,
} from '../../placer/index.ts';
import { LazyAbort } from '../../placer/kernel/abort.ts';
import { walkSteps } from '../../placer/walk.ts';
import { FakeClock, Fleet, T0, fakeCall, fakePool } from './fake.ts';

/** Offers runners exactly as the pool lists them, so these tests see the walk and nothing else. */
const inOrder: Placer = { name: 'in-order', order: (_call, runners) => runners };

/** Lets pending promise callbacks run; a turn of the event loop, not a wait on time. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('placeCall', () => {
  it('returns the first runner when it commits', async () => {
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['placed'], b: ['placed'] }));
    const placement = await placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    expect(placement).toMatchObject({ value: 'a', attempts: 1, passes: 1 });
    expect(placement.runner.id).toBe('a');
    expect(fleet.offers).toEqual(['a']);
  });

  it('returns the next runner when the first is busy', async () => {
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy'], b: ['placed'] }));
    const placement = await placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    expect(placement).toMatchObject({ value: 'b', attempts: 2, passes: 1 });
    expect(fleet.offers).toEqual(['a', 'b']);
  });

  it('returns the next runner when the first failed before commit', async () => {
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['failed'], b: ['placed'] }));
    const placement = await placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    expect(placement).toMatchObject({ value: 'b', attempts: 2 });
  });

  it('rethrows a rejection unchanged and offers no other runner when a runner fails after commit', async () => {
    const fleet = new Fleet();
    const broken = new Error('engine died mid-stream');
    const throwing = (): never => {
      throw broken;
    };
    const pool = fakePool(fleet.runners({ a: ['busy'], b: [throwing], c: ['placed'] }));
    const walk = placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    await expect(walk).rejects.toBe(broken);
    expect(fleet.offers).toEqual(['a', 'b']);
    expect(pool.asked).toBe(1);
  });

  it('returns after a second pass when every runner was busy, having slept exactly retryAllDelay', async () => {
    const clock = new FakeClock();
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy', 'placed'], b: ['busy'] }));
    const walk = placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock });

    await clock.untilSleeping();
    expect(clock.sleeps).toEqual([10]);
    expect(pool.asked).toBe(1);
    clock.advance(9);
    await settle();
    expect(fleet.offers).toEqual(['a', 'b']);

    clock.advance(1);
    await expect(walk).resolves.toMatchObject({ value: 'a', attempts: 3, passes: 2 });
    expect(pool.asked).toBe(2);
    expect(fleet.offers).toEqual(['a', 'b', 'a']);
  });

  it('throws PlacerTimeoutError with every attempt counted when the deadline passes', async () => {
    const clock = new FakeClock({ auto: true });
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy'], b: ['failed'] }));
    const call = fakeCall({ placerDeadline: T0 + 25 });
    const error = await placeCall(call, pool, inOrder, { retryAllDelay: 10, clock }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(PlacerTimeoutError);
    expect(error).toMatchObject({ code: 'PLACER_TIMEOUT', status: 503, attempts: 6 });
    expect((error as Error).message).toBe(
      'no runner accepted the call for function "llama-3-8b" after waiting 25 ms (6 attempts)',
    );
    // The last pause is cut short so the walk gives up on time, not up to retryAllDelay late.
    expect(clock.sleeps).toEqual([10, 10, 5]);
    expect(pool.asked).toBe(3);
  });

  it('rounds the time waited in its message to a whole millisecond', async () => {
    const clock = new FakeClock({ auto: true });
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy'] }));
    const call = fakeCall({ placerDeadline: T0 + 25.4951171875 });
    const error = await placeCall(call, pool, inOrder, { retryAllDelay: 10, clock }).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/after waiting 25 ms \(/);
  });

  it('throws PlacerTimeoutError before the next offer when the deadline passes mid-pass', async () => {
    const clock = new FakeClock();
    const fleet = new Fleet();
    const slow = (): 'busy' => {
      clock.advance(50);
      return 'busy';
    };
    const pool = fakePool(fleet.runners({ a: [slow], b: ['placed'] }));
    const walk = placeCall(fakeCall({ placerDeadline: T0 + 10 }), pool, inOrder, { retryAllDelay: 10, clock });
    await expect(walk).rejects.toMatchObject({ name: 'PlacerTimeoutError', attempts: 1 });
    expect(fleet.offers).toEqual(['a']);
  });

  it('throws PlacerTimeoutError without asking the pool when the deadline has already passed', async () => {
    const pool = fakePool(new Fleet().runners({ a: ['placed'] }));
    const walk = placeCall(fakeCall({ placerDeadline: T0 }), pool, inOrder, {
      retryAllDelay: 10,
      clock: new FakeClock(),
    });
    await expect(walk).rejects.toMatchObject({ name: 'PlacerTimeoutError', attempts: 0 });
    expect(pool.asked).toBe(0);
  });

  /** A call whose `signal` throws when read: the walk must take its abort from its options. */
  const unreadSignal = (): RunnerCall =>
    Object.defineProperty(fakeCall(), 'signal', {
      get: () => {
        throw new Error('call.signal was read');
      },
    });

  it.each([
    ['its signal', (abort: LazyAbort) => ({ call: fakeCall({ signal: abort.signal }), given: {} })],
    ['the abort its options give', (abort: LazyAbort) => ({ call: unreadSignal(), given: { abort } })],
  ])(
    'throws PlacerAbortedError before the next offer when the call aborts during a pass, seen in %s',
    async (_, setup) => {
      const abort = new LazyAbort();
      const reason = new Error('client went away');
      const fleet = new Fleet();
      const abortThenBusy = (): 'busy' => {
        abort.abort(reason);
        return 'busy';
      };
      const pool = fakePool(fleet.runners({ a: [abortThenBusy], b: ['placed'] }));
      const { call, given } = setup(abort);
      const options = { retryAllDelay: 10, clock: new FakeClock(), ...given };
      const error = await placeCall(call, pool, inOrder, options).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PlacerAbortedError);
      expect(error).toMatchObject({ code: 'PLACER_ABORTED', attempts: 1, cause: reason });
      expect(fleet.offers).toEqual(['a']);
    },
  );

  it('places a call without reading its signal when its options give the abort', async () => {
    const pool = fakePool(new Fleet().runners({ c: ['placed'] }));
    const options = { retryAllDelay: 10, clock: new FakeClock(), abort: new LazyAbort() };
    expect((await placeCall(unreadSignal(), pool, inOrder, options)).runner.id).toBe('c');
  });

  it('waits through waitForCapacity instead of sleeping between passes, and walks again once it resolves', async () => {
    const clock = new FakeClock();
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy', 'placed'], b: ['busy'] }));
    let wake: () => void = () => {};
    const waits: string[] = [];
    const walk = placeCall(fakeCall(), pool, inOrder, {
      retryAllDelay: 10,
      clock,
      waitForCapacity: (call) => {
        waits.push(call.id);
        return new Promise<void>((resolve) => (wake = resolve));
      },
    });
    await settle();
    expect(waits).toHaveLength(1);
    expect(clock.sleeps).toEqual([]);
    clock.advance(500);
    await settle();
    expect(pool.asked).toBe(1);
    wake();
    await expect(walk).resolves.toMatchObject({ value: 'a', attempts: 3, passes: 2 });
    expect(fleet.offers).toEqual(['a', 'b', 'a']);
  });

  it('throws what waitForCapacity rejected with unchanged, or PlacerAbortedError once the call aborted', async () => {
    const pool = fakePool(new Fleet().runners({ a: ['busy', 'busy'] }));
    const full = new Error('queue full');
    const refused = placeCall(fakeCall(), pool, inOrder, {
      retryAllDelay: 10,
      clock: new FakeClock(),
      waitForCapacity: () => Promise.reject(full),
    });
    await expect(refused).rejects.toBe(full);
    const controller = new AbortController();
    const reason = new Error('client went away');
    const left = placeCall(fakeCall({ signal: controller.signal }), pool, inOrder, {
      retryAllDelay: 10,
      clock: new FakeClock(),
      waitForCapacity: () => {
        controller.abort(reason);
        return Promise.reject(reason);
      },
    });
    await expect(left).rejects.toMatchObject({ name: 'PlacerAbortedError', attempts: 1, cause: reason });
  });

  it('throws PlacerAbortedError when the call aborts during the sleep between passes', async () => {
    const clock = new FakeClock();
    const controller = new AbortController();
    const pool = fakePool(new Fleet().runners({ a: ['busy'] }));
    const walk = placeCall(fakeCall({ signal: controller.signal }), pool, inOrder, { retryAllDelay: 10, clock });
    await clock.untilSleeping();
    const reason = new Error('client went away');
    controller.abort(reason);
    await expect(walk).rejects.toMatchObject({ name: 'PlacerAbortedError', attempts: 1, cause: reason });
    expect(clock.sleeping).toBe(0);
    expect(pool.asked).toBe(1);
  });

  it('throws PlacerAbortedError rather than a timeout when the call aborted and the deadline passed', async () => {
    const controller = new AbortController();
    controller.abort();
    const pool = fakePool(new Fleet().runners({ a: ['placed'] }));
    const call = fakeCall({ signal: controller.signal, placerDeadline: T0 - 1 });
    const walk = placeCall(call, pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    await expect(walk).rejects.toBeInstanceOf(PlacerAbortedError);
    expect(pool.asked).toBe(0);
  });

  it('returns the placement when the runner commits even though the call aborted during the offer', async () => {
    // Once committed the runner owns the call (and its signal); the walk must not pretend otherwise.
    const controller = new AbortController();
    const abortThenPlaced = (): 'placed' => {
      controller.abort();
      return 'placed';
    };
    const pool = fakePool(new Fleet().runners({ a: [abortThenPlaced] }));
    const walk = placeCall(fakeCall({ signal: controller.signal }), pool, inOrder, {
      retryAllDelay: 10,
      clock: new FakeClock(),
    });
    await expect(walk).resolves.toMatchObject({ value: 'a', attempts: 1 });
  });

  it.each([
    [
      'throws',
      (): never => {
        throw new Error('registry down');
      },
    ],
    ['rejects', (): Promise<never> => Promise.reject(new Error('registry down'))],
  ])('throws PlacerPoolError without retrying when the pool %s', async (_how, list) => {
    const pool = fakePool<string>(list);
    const walk = placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    const error = await walk.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PlacerPoolError);
    expect(error).toMatchObject({ code: 'PLACER_POOL_FAILED', cause: { message: 'registry down' } });
    expect(pool.asked).toBe(1);
  });

  it('throws PlacerPoolError when the pool returns something other than an array', async () => {
    const pool = fakePool<string>(() => undefined as unknown as Runner<string>[]);
    const walk = placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock() });
    await expect(walk).rejects.toThrow('runner pool returned undefined instead of an array');
  });

  it('throws PlacerTimeoutError with no attempts when the pool stays empty until the deadline', async () => {
    const clock = new FakeClock({ auto: true });
    const pool = fakePool<string>([]);
    const walk = placeCall(fakeCall({ placerDeadline: T0 + 30 }), pool, inOrder, { retryAllDelay: 10, clock });
    await expect(walk).rejects.toMatchObject({ name: 'PlacerTimeoutError', attempts: 0 });
    expect(clock.sleeps).toEqual([10, 10, 10]);
    expect(pool.asked).toBe(3);
  });

  it('returns once runners appear when the pool was empty at first', async () => {
    const clock = new FakeClock({ auto: true });
    const runners = new Fleet().runners({ a: ['placed'] });
    const pool = fakePool((asked) => (asked < 2 ? [] : runners));
    const placement = await placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock });
    expect(placement).toMatchObject({ value: 'a', attempts: 1, passes: 3 });
  });

  it('yields through sleep(0) between passes when retryAllDelay is 0', async () => {
    const clock = new FakeClock({ auto: true });
    const runners = new Fleet().runners({ a: ['placed'] });
    const pool = fakePool((asked) => (asked < 3 ? [] : runners));
    await placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 0, clock });
    expect(clock.sleeps).toEqual([0, 0, 0]);
  });

  it('asks the pool again when the placer skips every runner', async () => {
    const clock = new FakeClock({ auto: true });
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['placed'] }));
    let passes = 0;
    const shy: Placer = { name: 'shy', order: (_call, runners) => (passes++ < 2 ? [] : runners) };
    const placement = await placeCall(fakeCall(), pool, shy, { retryAllDelay: 10, clock });
    expect(placement).toMatchObject({ attempts: 1, passes: 3 });
    expect(clock.sleeps).toEqual([10, 10]);
  });

  it('reports busy and error to onRetry in offer order', async () => {
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['busy'], b: ['failed'], c: ['placed'] }));
    const seen: [string, string, string | undefined][] = [];
    await placeCall(fakeCall(), pool, inOrder, {
      retryAllDelay: 10,
      clock: new FakeClock(),
      onRetry: (runner, reason, error) => seen.push([runner.id, reason, error?.message]),
    });
    expect(seen).toEqual([
      ['a', 'busy', undefined],
      ['b', 'error', 'b refused the connection'],
    ]);
  });

  it('returns the placement when onRetry throws', async () => {
    const pool = fakePool(new Fleet().runners({ a: ['busy'], b: ['placed'] }));
    const onRetry = (): never => {
      throw new Error('metrics exporter broke');
    };
    const walk = placeCall(fakeCall(), pool, inOrder, { retryAllDelay: 10, clock: new FakeClock(), onRetry });
    await expect(walk).resolves.toMatchObject({ value: 'b' });
  });

  it("tells the placer's placed() about the runner that committed, once, before resolving", async () => {
    const told: [string, string][] = [];
    const placer: Placer = { ...inOrder, placed: (call, runner) => told.push([call.id, runner.id]) };
    const pool = fakePool(new Fleet().runners({ a: ['busy'], b: ['failed'], c: ['placed'] }));
    await placeCall(fakeCall(), pool, placer, { retryAllDelay: 10, clock: new FakeClock() });
    expect(told).toEqual([['call-1', 'c']]);
  });

  it('never tells placed() when no runner commits', async () => {
    let told = 0;
    const placer: Placer = { ...inOrder, placed: () => told++ };
    const pool = fakePool(new Fleet().runners({ a: ['busy'] }));
    const clock = new FakeClock({ auto: true });
    const walk = placeCall(fakeCall({ placerDeadline: T0 + 25 }), pool, placer, { retryAllDelay: 10, clock });
    await expect(walk).rejects.toBeInstanceOf(PlacerTimeoutError);
    expect(told).toBe(0);
  });

  it('returns the placement when placed() throws or rejects', async () => {
    const throwing: Placer = {
      ...inOrder,
      placed: () => {
        throw new Error('index full');
      },
    };
    const rejecting: Placer = { ...inOrder, placed: async () => Promise.reject(new Error('index gone')) };
    for (const placer of [throwing, rejecting]) {
      const pool = fakePool(new Fleet().runners({ a: ['placed'] }));
      const walk = placeCall(fakeCall(), pool, placer, { retryAllDelay: 10, clock: new FakeClock() });
      await expect(walk).resolves.toMatchObject({ value: 'a' });
    }
    await settle(); // an unhandled rejection from the async placed() would fail the run here
  });

  it('returns the placement on the system clock when no clock is given', async () => {
    const pool = fakePool(new Fleet().runners({ a: ['placed'] }));
    const call = fakeCall({ placerDeadline: Date.now() + 60_000 });
    await expect(placeCall(call, pool, inOrder, { retryAllDelay: 10 })).resolves.toMatchObject({ value: 'a' });
  });
});

describe('walkSteps', () => {
  const runner = (id: string): Runner<string> => ({
    id,
    tryExec: () => Promise.reject(new Error('the driver offers, not the walk')),
  });
  const [a, b] = [runner('a'), runner('b')];

  it('asks for the runners, offers them in order, pauses retryAllDelay after a failed pass and returns the placement', () => {
    let now = T0;
    const told: string[] = [];
    const placer: Placer = { ...inOrder, placed: (_call, r) => told.push(r.id) };
    const walk = walkSteps<string>(fakeCall(), placer, { retryAllDelay: 10, now: () => now });
    const steps: unknown[] = [];
    steps.push(walk.next().value);
    steps.push(walk.next([a, b]).value);
    steps.push(walk.next({ kind: 'busy' }).value);
    steps.push(walk.next({ kind: 'failed', error: new Error('refused') }).value);
    now += 10;
    steps.push(walk.next().value);
    steps.push(walk.next([b]).value);
    const end = walk.next({ kind: 'placed', value: 'from b' });
    expect(steps).toEqual([
      { kind: 'list' },
      { kind: 'offer', runner: a },
      { kind: 'offer', runner: b },
      { kind: 'sleep', ms: 10 },
      { kind: 'list' },
      { kind: 'offer', runner: b },
    ]);
    expect(end).toEqual({ done: true, value: { value: 'from b', runner: b, attempts: 3, passes: 2 } });
    expect(told).toEqual(['b']);
  });

  it('cuts the pause at the deadline and throws PlacerTimeoutError once it has come', () => {
    let now = T0;
    const walk = walkSteps<string>(fakeCall({ placerDeadline: T0 + 4 }), inOrder, {
      retryAllDelay: 10,
      now: () => now,
    });
    walk.next();
    expect(walk.next([a]).value).toEqual({ kind: 'offer', runner: a });
    expect(walk.next({ kind: 'busy' }).value).toEqual({ kind: 'sleep', ms: 4 });
    now += 4;
    expect(() => walk.next()).toThrow(PlacerTimeoutError);
  });

  it('throws what the driver throws into it, and PlacerAbortedError for a failed pause once the call aborted', () => {
    const pool = new Error('pool down');
    const listing = walkSteps<string>(fakeCall(), inOrder, { retryAllDelay: 10, now: () => T0 });
    listing.next();
    expect(() => listing.throw(pool)).toThrow(pool);

    const controller = new AbortController();
    const pausing = walkSteps<string>(fakeCall({ signal: controller.signal }), inOrder, {
      retryAllDelay: 10,
      now: () => T0,
    });
    pausing.next();
    expect(pausing.next([]).value).toEqual({ kind: 'sleep', ms: 10 });
    controller.abort(new Error('client went away'));
    expect(() => pausing.throw(new Error('sleep rejected'))).toThrow(PlacerAbortedError);
  });
});
