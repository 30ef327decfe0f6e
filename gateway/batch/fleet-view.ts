/**
 * The fleet as the release window reads it (window.ts): the runners that may serve a model, and
 * the batch-class calls of that model waiting in the gateway's queue.
 */
import type { RunnerCall, RunnerPool } from '../../placer/types.ts';
import type { WaitQueue } from '../calls/index.ts';
import type { FleetView } from './window.ts';

/**
 * The view of `pool` and `queue`. A pool that answers its runners asynchronously (a custom one)
 * shows none: the window then keeps a line parked and lets the queue hand it a slot.
 */
export function fleetViewOf(pool: RunnerPool, queue: Pick<WaitQueue, 'snapshot'>): FleetView {
  return {
    runners(model) {
      // The gateway's pool reads only the route and the function of the call it is asked about.
      const runners = pool.runners({ route: 'chat', fn: model } as unknown as RunnerCall);
      return Array.isArray(runners) ? runners : [];
    },
    waiting(model) {
      let waiting = 0;
      for (const line of queue.snapshot().models)
        if (line.model === model && line.priority === 'batch') waiting += line.waiting;
      return waiting;
    },
  };
}
