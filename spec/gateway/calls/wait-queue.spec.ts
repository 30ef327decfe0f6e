import { describe, expect, it } from 'vitest';
import { MAX_PASSED_OVER, WaitQueue } from '../../../gateway/calls/wait-queue.ts';
import type { WaitEnd, Waiter } from '../../../gateway/calls/wait-queue.ts';
import type { Priority } from '../../../gateway/http/index.ts';
import { FakeClock, T0 } from '../../placer/fake.ts';

const FAR = T0 + 60_000;

/** A queue under a fake clock, and a helper that joins named waiters and records how each wait ended. */
function setup(options: { maxQueued?: number; maxQueuedPerFlow?: number; retryAllDelay?: number } = {}) {
  const clock = new FakeClock();
  const queue = new WaitQueue({ maxQueued: 100, maxQueuedPerFlow: 100, retryAllDelay: 0, clock, ...options });
  const ended: string[] = [];
  const ends = new Map<string, WaitEnd>();
  const waiters = new Map<string, { waiter: Waiter; client: AbortController }>();
  const join = (
    name: string,
    flow = 'f',
    priority: Priority = 'batch',
    model = 'm',
    deadline = FAR,
    prefers?: string,
  ): Waiter => {
    const client = new AbortController();
    const waiter = waiters.get(name)?.waiter ?? queue.waiter({ model, priority, flow }, client.signal, deadline);
    if (!waiters.has(name)) waiters.set(name, { waiter, client });
    // As the agent sets it: before the first wait.
    if (prefers !== undefined) waiter.prefers = prefers;
    void waiter.wait().then((end) => {
      ends.set(name, end);
      ended.push(name);
    });
    return waiter;
  };
  /** Lets the wait promises settle. */
  const settle = () => new Promise<void>((resolve) => setImmediate(resolve));
  /** Wakes the queue as `queue.wake(...args)` does, lets the waits settle, and returns who has ended so far. */
  const wake = async (...args: Parameters<WaitQueue['wake']>): Promise<string[]> => {
    queue.wake(...args);
    await settle();
    return [...ended];
  };
  return { clock, queue, join, ended, ends, waiters, settle, wake };
}

describe('WaitQueue: a slot freed on a runner goes to a call that prefers it', () => {
  type Join = ReturnType<typeof setup>['join'];
  /** Joins `name` in its own flow, preferring `runner` (none when undefined). */
  const prefer = (join: Join, name: string, runner: string | undefined): Waiter =>
    join(name, `flow-${name}`, 'batch', 'm', FAR, runner);

  it('wakes the call preferring the freed runner before the head, and the head when none prefers it', async () => {
    const { join, wake } = setup();
    prefer(join, 'a', 'r1');
    prefer(join, 'b', 'r2');
    prefer(join, 'c', undefined);
    prefer(join, 'd', 'r2');
    expect(await wake(1, undefined, 'r2')).toEqual(['b']);
    expect(await wake(1, undefined, 'r9')).toEqual(['b', 'a']);
    // Without a runner, the head of the turn as always.
    expect(await wake(1)).toEqual(['b', 'a', 'c']);
  });

  it(`passes the head of the turn over at most ${MAX_PASSED_OVER} times, then wakes it whichever runner freed`, async () => {
    const { queue, join, ended, settle } = setup();
    prefer(join, 'head', 'r1');
    for (let i = 0; i < MAX_PASSED_OVER + 2; i++) prefer(join, `p${i}`, 'r2');
    for (let i = 0; i < MAX_PASSED_OVER + 1; i++) queue.wake(1, undefined, 'r2');
    await settle();
    expect(ended).toEqual([...Array.from({ length: MAX_PASSED_OVER }, (_, i) => `p${i}`), 'head']);
  });

  it('finds a preferring call among any number of flows, the first to reach the head of its flow', async () => {
    const { queue, join, wake } = setup({ maxQueued: 2_000 });
    for (let i = 0; i < 1_000; i++) prefer(join, `n${i}`, `r${i % 500}`);
    prefer(join, 'far', 'r-far');
    prefer(join, 'farther', 'r-far');
    queue.wake(1, undefined, 'r-far');
    expect(await wake(1, undefined, 'r499')).toEqual(['far', 'n499']);
  });

  it("looks at each flow's head only: a preferring call behind another in its own flow waits for its turn there, then counts", async () => {
    const { join, wake } = setup();
    join('a1', 'A', 'batch', 'm', FAR, 'r1');
    join('a2', 'A', 'batch', 'm', FAR, 'r2');
    join('b1', 'B', 'batch', 'm', FAR, 'r1');
    expect(await wake(1, undefined, 'r2')).toEqual(['a1']);
    // a2 now heads A: a slot on r2 is its, before b1 whose turn it is.
    expect(await wake(1, undefined, 'r2')).toEqual(['a1', 'a2']);
  });

  it('forgets a preferring call that hung up or was woken', async () => {
    const { join, waiters, settle, wake } = setup();
    prefer(join, 'a', 'r1');
    prefer(join, 'b', 'r2');
    prefer(join, 'c', 'r2');
    waiters.get('b')!.client.abort();
    await settle();
    expect(await wake(1, undefined, 'r2')).toEqual(['b', 'c']);
    expect(await wake(1, undefined, 'r2')).toEqual(['b', 'c', 'a']);
  });

  it('keeps the turn with the flow passed over', async () => {
    const { queue, join, wake } = setup();
    prefer(join, 'a', 'r1');
    prefer(join, 'b', 'r1');
    prefer(join, 'c', 'r2');
    queue.wake(1, undefined, 'r2');
    expect(await wake(2)).toEqual(['c', 'a', 'b']);
  });
});

describe('WaitQueue', () => {
  it('wakes waiters of one flow first come first served', async () => {
    const { queue, join, ended, settle } = setup();
    for (const n of ['a', 'b', 'c']) join(n);
    expect(queue.waiting).toBe(3);
    expect(queue.wake(1)).toBe(1);
    expect(queue.wake(2)).toBe(2);
    await settle();
    expect(ended).toEqual(['a', 'b', 'c']);
    expect(queue.waiting).toBe(0);
    expect(queue.size).toBe(3);
  });

  it.each([
    [40, 1],
    [40, 6],
    [100, 3],
  ])('wakes %i waiters of one flow in their arrival order, freed %i slots at a time', async (count, slots) => {
    const { queue, join, ended, settle } = setup();
    const names = Array.from({ length: count }, (_, i) => `c${i}`);
    for (const n of names) join(n);
    while (queue.waiting > 0) {
      queue.wake(slots);
      await settle();
    }
    expect(ended).toEqual(names);
  });

  it.each([6, 24])(
    'wakes an interactive waiter that joined behind %i batch ones first, then the batch ones in arrival order',
    async (count) => {
      const { queue, join, ended, settle } = setup();
      const batch = Array.from({ length: count }, (_, i) => `b${i}`);
      for (const n of batch) join(n, 'f', 'batch');
      join('i', 'f', 'interactive');
      while (queue.waiting > 0) {
        queue.wake(1);
        await settle();
      }
      expect(ended).toEqual(['i', ...batch]);
    },
  );

  it('wakes every interactive waiter before any batch one, whatever their arrival', async () => {
    const { join, wake } = setup();
    join('b1', 'x', 'batch');
    join('b2', 'y', 'batch');
    join('i1', 'x', 'interactive');
    join('b3', 'x', 'batch');
    join('i2', 'z', 'interactive');
    expect(await wake(5)).toEqual(['i1', 'i2', 'b1', 'b2', 'b3']);
  });

  it('takes flows in turn within a class, each flow in arrival order, a new flow taking its turn at the end of the current round', async () => {
    const { queue, join, wake } = setup();
    for (const n of ['a1', 'a2', 'a3', 'a4']) join(n, 'A');
    join('b1', 'B');
    join('c1', 'C');
    join('b2', 'B');
    queue.wake(2);
    join('d1', 'D');
    expect(await wake(10)).toEqual(['a1', 'b1', 'c1', 'd1', 'a2', 'b2', 'a3', 'a4']);
  });

  it('wakes the calls of the worked example in docs/placers.md in the order it gives', async () => {
    const { queue, join, settle, wake } = setup();
    for (const n of ['a1', 'a2', 'a3', 'a4']) join(n, 'A');
    join('b1', 'B');
    join('c1', 'C');
    join('b2', 'B');
    join('i1', 'D', 'interactive');
    queue.wake(5);
    await settle();
    join('a2', 'A'); // woken, found every runner busy after all
    expect(await wake(10)).toEqual(['i1', 'a1', 'b1', 'c1', 'a2', 'a2', 'b2', 'a3', 'a4']);
  });

  it('puts a woken waiter that found nothing free back at the head, its flow next in turn', async () => {
    const { queue, join, settle, wake } = setup();
    join('a1', 'A');
    join('a2', 'A');
    join('b1', 'B');
    queue.wake(1);
    await settle();
    join('a1', 'A'); // walked, every runner busy again: waits again
    expect(await wake(3)).toEqual(['a1', 'a1', 'b1', 'a2']);
  });

  it('removes a waiter at once when its client hangs up', async () => {
    const { queue, join, ends, waiters, settle, wake } = setup();
    for (const n of ['a', 'b', 'c']) join(n);
    waiters.get('b')!.client.abort();
    await settle();
    expect(ends.get('b')).toBe('aborted');
    expect(queue.waiting).toBe(2);
    waiters.get('b')!.waiter.leave();
    expect(queue.size).toBe(2);
    expect(await wake(3)).toEqual(['b', 'a', 'c']);
  });

  it('ends a wait at its deadline and no sooner', async () => {
    const { clock, queue, join, ends, settle } = setup();
    join('a', 'f', 'batch', 'm', T0 + 500);
    join('b', 'f', 'batch', 'm', T0 + 900);
    clock.advance(499);
    await settle();
    expect(ends.size).toBe(0);
    clock.advance(1);
    await settle();
    expect(ends.get('a')).toBe('deadline');
    expect(queue.waiting).toBe(1);
    clock.advance(400);
    await settle();
    expect(ends.get('b')).toBe('deadline');
    expect(queue.waiting).toBe(0);
  });

  it("refuses a waiter past the total bound or its flow's, and admits again once one leaves", async () => {
    const { queue, join, ends, waiters, settle } = setup({ maxQueued: 3, maxQueuedPerFlow: 2 });
    join('a1', 'A');
    join('a2', 'A');
    join('a3', 'A');
    join('b1', 'B');
    join('c1', 'C');
    await settle();
    expect(ends.get('a3')).toEqual({ kind: 'full', scope: 'flow', limit: 2 });
    expect(ends.get('c1')).toEqual({ kind: 'full', scope: 'total', limit: 3 });
    expect(ends.has('b1')).toBe(false);
    expect(queue.size).toBe(3);
    queue.wake(1);
    await settle();
    waiters.get('a1')!.waiter.leave();
    join('c2', 'C');
    await settle();
    expect(ends.has('c2')).toBe(false);
    expect(queue.size).toBe(3);
  });

  it('frees the room of a waiter whose deadline had passed at its first wait once it leaves', async () => {
    const { queue, join, ends, settle } = setup({ maxQueued: 1 });
    const late = join('late', 'f', 'batch', 'm', T0);
    await settle();
    expect(ends.get('late')).toBe('deadline');
    expect(queue.size).toBe(1);
    late.leave();
    expect(queue.size).toBe(0);
    join('next');
    await settle();
    expect(ends.has('next')).toBe(false);
  });

  it('wakes the best head among the given models only', async () => {
    const { queue, join, ended, settle } = setup();
    join('m1', 'f', 'batch', 'm');
    join('n1', 'f', 'interactive', 'n');
    join('o1', 'f', 'interactive', 'o');
    join('m2', 'f', 'batch', 'm');
    expect(queue.wake(3, ['m', 'n'])).toBe(3);
    await settle();
    expect(ended).toEqual(['n1', 'm1', 'm2']);
    expect(queue.waitingFor('o')).toBe(1);
  });

  it("offers only the head of each model's queue every retryAllDelay while anyone waits", async () => {
    const { clock, queue, join, ended, settle } = setup({ retryAllDelay: 10 });
    join('m1', 'f', 'batch', 'm');
    join('m2', 'f', 'batch', 'm');
    join('n1', 'f', 'batch', 'n');
    clock.advance(9);
    await settle();
    expect(ended).toEqual([]);
    clock.advance(1);
    await settle();
    expect(ended).toEqual(['m1', 'n1']);
    clock.advance(10);
    await settle();
    expect(ended).toEqual(['m1', 'n1', 'm2']);
    clock.advance(10);
    await settle();
    expect(clock.sleeping).toBe(0);
    queue.close();
  });

  it('shows counts per model, priority and flow with the oldest wait', async () => {
    const { clock, queue, join } = setup();
    join('a', 'A', 'batch', 'm');
    clock.advance(100);
    join('b', 'B', 'batch', 'm');
    join('c', 'A', 'interactive', 'm');
    clock.advance(50);
    expect(queue.snapshot()).toEqual({
      waiting: 3,
      models: [
        { model: 'm', priority: 'interactive', waiting: 1, flows: { A: 1 }, oldestWaitMs: 50 },
        { model: 'm', priority: 'batch', waiting: 2, flows: { A: 1, B: 1 }, oldestWaitMs: 150 },
      ],
    });
  });
});
