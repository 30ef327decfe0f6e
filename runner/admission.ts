/**
 * Admission: whether the runner takes a call now, and the busy answer when it does not. A
 * runner never queues (runner/slots.ts): a call it cannot start at once is answered busy, with
 * the reason in a header, so the gateway offers it to another runner straight away.
 */
import type { ServerResponse } from 'node:http';
import type { EngineBusyReason } from './engine.ts';
import { BUSY_HEADER, RUNNER_ID_HEADER } from './protocol/index.ts';
import { RunnerBusyError } from './errors.ts';
import { errorJson } from './reply.ts';
import type { Release, Slots } from './slots.ts';

/**
 * Why a runner answered busy; sent as the value of the busy header. `no-engine`: an on-demand
 * runner hosts no engine now (none ordered, or the ordered one stopped).
 */
export type BusyReason =
  | 'slots'
  | 'starting'
  | 'draining'
  | 'no-engine'
  | 'engine-busy'
  | 'engine-unreachable'
  | 'engine-failed'
  | 'late';

/** What admission looks at. */
export interface AdmissionState {
  draining(): boolean;
  engine: { busyReason(): EngineBusyReason };
  slots: Slots;
}

/** A call admitted with the slot it holds, or turned away with the reason. */
export type Admission = { kind: 'admitted'; release: Release } | { kind: 'busy'; reason: BusyReason };

/**
 * Admits a call or says why not: a draining runner first, then an engine that cannot take
 * calls, then a free slot. The slot is taken only when the rest allow the call.
 */
export function admit(state: AdmissionState): Admission {
  if (state.draining()) return { kind: 'busy', reason: 'draining' };
  const engineBusy = state.engine.busyReason();
  if (engineBusy) return { kind: 'busy', reason: engineBusy };
  const release = state.slots.tryAcquire();
  return release ? { kind: 'admitted', release } : { kind: 'busy', reason: 'slots' };
}

/**
 * Why the runner would turn a call away regardless of its slots (GET /readyz), or undefined
 * when it is ready: full slots are load, not unreadiness.
 */
export function notReadyReason(state: Omit<AdmissionState, 'slots'>): BusyReason | undefined {
  return state.draining() ? 'draining' : state.engine.busyReason();
}

/** Writes the busy answer: 503 with the reason and the runner's id in headers, an OpenAI-shaped body. */
export function answerBusy(res: ServerResponse, runnerId: string, reason: BusyReason): void {
  res.writeHead(503, { 'content-type': 'application/json', [BUSY_HEADER]: reason, [RUNNER_ID_HEADER]: runnerId });
  res.end(errorJson(new RunnerBusyError(`runner ${runnerId} is busy (${reason})`)));
}
