/**
 * Admission before a call counts against maxInFlight: the gateway's budget of bodies still
 * arriving, with each client address's share of it (counted as the front counts connections,
 * by gateway/http's ClientCounts).
 *
 * A body that trickles in costs a connection and a buffer but no placement work, so it has its
 * own, smaller budget: stalled uploads then fill that budget, not the calls being served, and
 * the per-address limits keep one address from filling it alone.
 */
import { ClientCounts } from '../http/index.ts';

/** The answer of {@link UploadBudget.admit}. */
export type UploadAdmission =
  /** Counted: call `release` once the body is read or failed (idempotent). */
  | { kind: 'admitted'; release: () => void }
  /** This client already sends its share of bodies. */
  | { kind: 'client-full' }
  /** The gateway already receives its whole budget of bodies. */
  | { kind: 'full' };

/** Limits of an {@link UploadBudget}. */
export interface UploadLimits {
  /** Bodies being received at once, all clients together. */
  max: number;
  /** Bodies being received at once from one client address. */
  perClient: number;
}

/** Bodies being received, counted against the gateway's budget and each client's share. */
export class UploadBudget {
  readonly #max: number;
  readonly #clients: ClientCounts;
  #size = 0;

  constructor(limits: UploadLimits) {
    this.#max = limits.max;
    this.#clients = new ClientCounts(limits.perClient);
  }

  /** Bodies being received now. */
  get size(): number {
    return this.#size;
  }

  /** True when the next upload would be refused whoever sends it. */
  get full(): boolean {
    return this.#size >= this.#max;
  }

  /**
   * Admits one upload from `client` (a clientKey of gateway/http). The client's share is checked first:
   * a client at its own limit is told so (429) even when the whole budget is full too.
   */
  admit(client: string): UploadAdmission {
    if (this.#clients.count(client) >= this.#clients.limit) return { kind: 'client-full' };
    if (this.full) return { kind: 'full' };
    this.#clients.acquire(client);
    this.#size++;
    let released = false;
    return {
      kind: 'admitted',
      release: () => {
        if (released) return;
        released = true;
        this.#size--;
        this.#clients.release(client);
      },
    };
  }

  /** Client addresses with a body being received now. */
  get clients(): number {
    return this.#clients.clients;
  }
}

/** Why a gateway refuses new work, as /readyz lists them. */
export type NotReadyReason = 'closing' | 'max_in_flight' | 'uploads_full' | 'no_ready_runner' | 'store_unavailable';

/** What {@link notReadyReasons} looks at. */
export interface AdmissionState {
  closing: boolean;
  inFlight: number;
  maxInFlight: number;
  uploadsFull: boolean;
  runnersReady: boolean;
  /**
   * Some deployment can start a replica (deployed, and its starts not failing): a call for it is
   * taken and waits for the cold start, so no ready runner is then no reason to refuse calls.
   */
  replicasCanStart: boolean;
  /** The detached-call store answers its health check. */
  storeReady: boolean;
}

/**
 * Every reason the gateway would refuse a new call now; empty when it would take one. A load
 * balancer reading /readyz then stops sending while any holds, instead of learning it from 503s.
 * Ready means "can take calls": a gateway whose only models are deployments at zero is ready,
 * since its calls start the replicas that serve them.
 */
export function notReadyReasons(state: AdmissionState): NotReadyReason[] {
  const reasons: NotReadyReason[] = [];
  if (state.closing) reasons.push('closing');
  if (state.inFlight >= state.maxInFlight) reasons.push('max_in_flight');
  if (state.uploadsFull) reasons.push('uploads_full');
  if (!state.runnersReady && !state.replicasCanStart) reasons.push('no_ready_runner');
  if (!state.storeReady) reasons.push('store_unavailable');
  return reasons;
}

/** What /readyz says besides its reasons: facts worth knowing that keep no call out. */
export type ReadinessNote = 'no_replica_yet';

/**
 * The notes of a gateway that takes calls: `no_replica_yet` while no runner is ready and a
 * deployment can start one (the next call for it starts a replica, then waits for it).
 */
export function readinessNotes(state: Pick<AdmissionState, 'runnersReady' | 'replicasCanStart'>): ReadinessNote[] {
  return !state.runnersReady && state.replicasCanStart ? ['no_replica_yet'] : [];
}
