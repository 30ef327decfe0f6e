import { describe, expect, it } from 'vitest';
import { SimAbortedError, SimQueueFullError, SimScheduler } from '../../../../runner/engines/sim/index.ts';

describe('SimScheduler', () => {
  it('admits up to maxNumSeqs at once and queues the rest', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 2, maxQueue: 4 });
    await scheduler.acquire();
    await scheduler.acquire();
    void scheduler.acquire();
    expect([scheduler.running, scheduler.waiting]).toEqual([2, 1]);
  });

  it('grants waiters in arrival order when slots free up', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 1, maxQueue: 4 });
    const first = await scheduler.acquire();
    const order: string[] = [];
    const second = scheduler.acquire().then((release) => (order.push('second'), release));
    const third = scheduler.acquire().then((release) => (order.push('third'), release));
    first();
    (await second)();
    (await third)();
    expect(order).toEqual(['second', 'third']);
    expect(scheduler.totals()).toEqual({ received: 3, completed: 3, aborted: 0, rejected: 0 });
  });

  it('rejects with SimQueueFullError when maxQueue requests already wait', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 1, maxQueue: 1 });
    await scheduler.acquire();
    void scheduler.acquire();
    await expect(scheduler.acquire()).rejects.toBeInstanceOf(SimQueueFullError);
    expect(scheduler.totals()).toMatchObject({ received: 3, rejected: 1 });
    expect(scheduler.waiting).toBe(1);
  });

  it('removes an aborted waiter from the queue and counts it as aborted', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 1, maxQueue: 4 });
    const release = await scheduler.acquire();
    const controller = new AbortController();
    const waiting = scheduler.acquire(controller.signal);
    const behind = scheduler.acquire();
    controller.abort();
    await expect(waiting).rejects.toBeInstanceOf(SimAbortedError);
    expect(scheduler.waiting).toBe(1);
    release();
    (await behind)();
    expect(scheduler.totals()).toEqual({ received: 3, completed: 2, aborted: 1, rejected: 0 });
  });

  it('rejects at once when the signal has already fired', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 1, maxQueue: 1 });
    await expect(scheduler.acquire(AbortSignal.abort())).rejects.toBeInstanceOf(SimAbortedError);
    expect(scheduler.running).toBe(0);
    expect(scheduler.totals().aborted).toBe(1);
  });

  it('counts a release only once and by its outcome', async () => {
    const scheduler = new SimScheduler({ maxNumSeqs: 1, maxQueue: 0 });
    const release = await scheduler.acquire();
    release('aborted');
    release('completed');
    expect(scheduler.running).toBe(0);
    expect(scheduler.totals()).toEqual({ received: 1, completed: 0, aborted: 1, rejected: 0 });
  });
});
