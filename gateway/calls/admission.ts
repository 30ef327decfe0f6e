/**
 * Admission before a call counts against maxInFlight: what each client address holds
 * (connections, bodies still arriving) and the gateway's budget of bodies still arriving.
 *
 * A body that trickles in costs a connection and a buffer but no placement work, so it has its
 * own, smaller budget: stalled uploads then fill that budget, not the calls being served, and
 * the per-address limits keep one address from filling it alone.
 */
import { isIPv4, isIPv6 } from 'node:net';

/**
 * The address limits are kept by. IPv4 addresses (IPv4-mapped IPv6 ones included) as they are;
 * IPv6 ones by their /64, since one host is routinely handed a whole /64 and could otherwise
 * take a fresh address per connection. Anything unparsable stands for itself.
 */
export function clientKey(address: string | undefined): string {
  if (!address) return 'unknown';
  // IPv4, nearly always: no colon, nothing to normalise.
  if (!address.includes(':')) return address;
  const bare = address.replace(/%.*$/, '');
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  if (mapped && isIPv4(mapped[1]!)) return mapped[1]!;
  if (!isIPv6(bare)) return bare;
  const [head = '', tail] = bare.split('::');
  const groups = (part: string | undefined) => (part ? part.split(':') : []);
  // A trailing dotted quad holds two groups; only the first four groups matter here.
  const width = (list: string[]) => list.reduce((n, g) => n + (g.includes('.') ? 2 : 1), 0);
  const left = groups(head);
  const right = groups(tail);
  const full = tail === undefined ? left : [...left, ...Array<string>(8 - width(left) - width(right)).fill('0'), ...right];
  return `${full.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(':')}::/64`;
}

/**
 * How many of something each client holds, against one limit per client. Clients holding
 * nothing are forgotten, so the map is as large as the set of clients active now.
 */
export class ClientCounts {
  readonly #limit: number;
  readonly #counts = new Map<string, number>();

  /** @param limit most held at once by one client */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /** Counts one more for `client` and returns true, or returns false when it holds the limit. */
  acquire(client: string): boolean {
    const held = this.#counts.get(client) ?? 0;
    if (held >= this.#limit) return false;
    this.#counts.set(client, held + 1);
    return true;
  }

  /** Counts one fewer for `client`; a release without an acquire is ignored. */
  release(client: string): void {
    const held = this.#counts.get(client);
    if (held === undefined) return;
    if (held <= 1) this.#counts.delete(client);
    else this.#counts.set(client, held - 1);
  }

  /** Most held at once by one client. */
  get limit(): number {
    return this.#limit;
  }

  /** What `client` holds now. */
  count(client: string): number {
    return this.#counts.get(client) ?? 0;
  }

  /** Clients holding something now. */
  get clients(): number {
    return this.#counts.size;
  }
}

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
   * Admits one upload from `client` (a {@link clientKey}). The client's share is checked first:
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
  /** The detached-call store answers its health check. */
  storeReady: boolean;
}

/**
 * Every reason the gateway would refuse a new call now; empty when it would take one. A load
 * balancer reading /readyz then stops sending while any holds, instead of learning it from 503s.
 */
export function notReadyReasons(state: AdmissionState): NotReadyReason[] {
  const reasons: NotReadyReason[] = [];
  if (state.closing) reasons.push('closing');
  if (state.inFlight >= state.maxInFlight) reasons.push('max_in_flight');
  if (state.uploadsFull) reasons.push('uploads_full');
  if (!state.runnersReady) reasons.push('no_ready_runner');
  if (!state.storeReady) reasons.push('store_unavailable');
  return reasons;
}
