/**
 * What the reconciler reads of the fleet and of its own standing, as interfaces: the gateway
 * gives it a view over its registry (gateway/server.ts) and a lease (memory or Redis), and specs
 * give it fakes. Nothing here holds state.
 */
import type { Capacity, HostedEngine } from '../../runner/protocol/index.ts';

/** One registered runner, as the reconciler sees it at a pass. */
export interface FleetRunner {
  readonly id: string;
  /** What the runner last said it could host; undefined for a runner older than the field. */
  readonly capacity: Capacity | undefined;
  /** The ordered engine it last said it hosts; undefined when none. */
  readonly hosted: HostedEngine | undefined;
  /** False while it drains, was asked to, or misses heartbeats: no new replica goes there. */
  readonly placeable: boolean;
  /** Calls holding one of its slots, as last reported (across every gateway it serves). */
  readonly slotsInUse: number;
}

/** The fleet from one gateway. */
export interface FleetView {
  /** Every registered runner now. */
  runners(): readonly FleetRunner[];
  /** Calls for `model` waiting in this gateway's queue (a cold start's callers among them). */
  waiting(model: string): number;
}

/**
 * The right to reconcile: exactly one gateway holds it at a time. A memory lease is always
 * held (one gateway); a Redis lease is held by one gateway of those sharing the store, renewed
 * every pass, and lost when its holder stops renewing for `ttl` ms.
 */
export interface Lease {
  /** Takes or renews the lease; true when this gateway holds it now. Never rejects: a store error reads false. */
  hold(): Promise<boolean>;
  /** Gives the lease up when held (a clean stop), so another gateway takes over at once. */
  release(): Promise<void>;
  /** How long a holder keeps the lease without renewing, ms. */
  readonly ttl: number;
}
