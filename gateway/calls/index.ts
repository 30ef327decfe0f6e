/**
 * The call path: the agent that serves a call, admission of uploads, the wait queue and its
 * deadlines, placement on the pool, the relay of the answer and inference timings.
 *
 * The room's public face: what other rooms take from it.
 */
export { notReadyReasons, readinessNotes } from './admission.ts';
export { LbAgent } from './agent.ts';
export { waitQueueFor } from './placement.ts';
export { WaitQueue } from './wait-queue.ts';
export type { Waiter } from './wait-queue.ts';
