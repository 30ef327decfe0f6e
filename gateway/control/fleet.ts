/**
 * What the reconciler reads of the fleet and of its own standing, as interfaces: the gateway
 * gives it a view over its registry (gateway/server.ts) and a lease (memory or Redis), and specs
 * give it fakes. Nothing here holds state. A runner as it sees one, {@link FleetRunner}, is the
 * fleet room's (its registry lists them).
 */
import type { FleetRunner } from '../fleet/index.ts';

export type { FleetRunner };

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
