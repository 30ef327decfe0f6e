/**
 * Carries the runner's cache mirror (cache-mirror.ts) to one gateway, as the cache feed's
 * contract says (runner/protocol/cache-feed.ts): the keys stored and removed since the last
 * update, every `interval` ms when there are any; an empty keep-alive when nothing was sent for
 * a heartbeat's time; a `reset` holding the whole mirror at the first update of an epoch and
 * whenever the gateway answers 409 (it missed one) or 404 (it forgot this runner: the
 * registration registers again, and the feed starts over there). An update whose fate is unknown
 * (no answer, a 5xx) is followed by a reset too, a heartbeat later, since the gateway may or may
 * not have applied it. Every update carries the runner's load (its feed figures,
 * `feedLoadOf`), and one goes when the load changed since the last sent, with no blocks if none
 * changed, at most every `interval` ms like any other. One update is in flight at a time; the
 * token rides as in heartbeats.
 */
import { Pool } from 'undici';
import type { Logger } from '../placer/kernel/index.ts';
import type { CacheMirrorListener, CacheMirrorView } from './cache-mirror.ts';
import { cacheFeedPath, feedLoadOf, packBlockKeys } from './protocol/index.ts';
import type { CacheUpdate, FeedLoad } from './protocol/index.ts';
import type { RegistrationTimers } from './registration.ts';

/** Updates and bytes sent to one gateway since the runner started. */
export interface CacheFeedCounts {
  updates: number;
  /** Request bodies, in bytes. */
  bytes: number;
}

/** How a forwarder is set up. */
export interface CacheForwarderOptions {
  gateway: URL;
  /** Sent as `authorization: Bearer`; never logged. */
  token: string;
  runnerId: string;
  mirror: CacheMirrorView;
  /** Whether there is a feed to carry now: the engine's events are followed. Nothing is sent while false. */
  active: () => boolean;
  /** Shortest time between two updates with blocks or a new load in them, ms. */
  interval: number;
  /** The runner's load now, as its heartbeats report it: carried on every update. @default none carried */
  load?: () => FeedLoad;
  /** Longest time without an update, ms: the heartbeat interval, read at each tick since a gateway may name its own. */
  keepAlive: () => number;
  /** Limit on connecting and on each answer, ms. */
  requestTimeout: number;
  timers: RegistrationTimers;
  /** The clock keep-alives are timed on, ms. */
  now: () => number;
  logger: Logger;
  /** The CA an https gateway's certificate is checked against. @default the system's CAs */
  ca?: string | Buffer;
}

/** A load as an update carries it, with its JSON to compare with the last sent. */
interface CarriedLoad {
  readonly load: FeedLoad;
  readonly json: string;
}

/** One gateway's feed; hand it the mirror's changes as its listener. */
export class CacheForwarder implements CacheMirrorListener {
  readonly #options: CacheForwarderOptions;
  readonly #pool: Pool;
  readonly #path: string;
  readonly #log: Logger;
  /** Keys stored, and removed, since the last update the gateway took. */
  #stored = new Set<string>();
  #removed = new Set<string>();
  #needReset = true;
  #seq = 0;
  /** The load the last update the gateway took carried, as JSON; undefined when it must go again. */
  #loadSent: string | undefined;
  #lastSent = Number.NEGATIVE_INFINITY;
  /** No update before this time (after a failure), ms. */
  #quietUntil = Number.NEGATIVE_INFINITY;
  #timer: unknown;
  #inFlight: Promise<void> | undefined;
  #stopped = false;
  readonly counts: CacheFeedCounts = { updates: 0, bytes: 0 };

  constructor(options: CacheForwarderOptions) {
    this.#options = options;
    const timeout = options.requestTimeout;
    this.#pool = new Pool(options.gateway.origin, {
      connections: 1,
      connect: { timeout, ...(options.ca === undefined ? {} : { ca: options.ca }) },
      headersTimeout: timeout,
      bodyTimeout: timeout,
    });
    this.#path = options.gateway.pathname.replace(/\/+$/, '') + cacheFeedPath(options.runnerId);
    this.#log = options.logger.child({ gateway: options.gateway.origin });
  }

  /** Starts ticking; the first update (a reset) goes at the first tick, on the next turn of the timers. */
  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = this.#options.timers.setTimeout(() => this.#tick(), 0);
  }

  changed(stored: readonly string[], removed: readonly string[]): void {
    if (this.#needReset) return;
    // Net changes only: a key stored and removed between two updates is news to nobody.
    for (const key of stored) if (!this.#removed.delete(key)) this.#stored.add(key);
    for (const key of removed) if (!this.#stored.delete(key)) this.#removed.add(key);
  }

  startedOver(): void {
    this.#resetNext();
  }

  /** Stops ticking and closes the connection once an update in flight has settled. Idempotent. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#options.timers.clearTimeout(this.#timer);
    await this.#inFlight;
    await this.#pool.close().catch(() => {});
  }

  #resetNext(): void {
    this.#needReset = true;
    this.#stored.clear();
    this.#removed.clear();
  }

  #tick(): void {
    if (this.#stopped) return;
    this.#timer = this.#options.timers.setTimeout(() => this.#tick(), this.#options.interval);
    if (this.#inFlight || this.#options.now() < this.#quietUntil) return;
    if (!this.#options.active()) {
      // Whatever was sent before is moot by the time there is a feed again.
      this.#resetNext();
      return;
    }
    const load = this.#loadNow();
    const due =
      this.#needReset ||
      this.#stored.size + this.#removed.size > 0 ||
      (load !== undefined && load.json !== this.#loadSent);
    if (!due && this.#options.now() - this.#lastSent < this.#options.keepAlive()) return;
    this.#inFlight = this.#send(load).finally(() => {
      this.#inFlight = undefined;
    });
  }

  /** The runner's load as the feed carries it, and as JSON to tell a change; undefined when none is carried. */
  #loadNow(): CarriedLoad | undefined {
    const raw = this.#options.load?.();
    if (raw === undefined) return undefined;
    const load = feedLoadOf(raw);
    return { load, json: JSON.stringify(load) };
  }

  /** The next update, taking what is pending, with the load when there is one. */
  #next(load: CarriedLoad | undefined): CacheUpdate {
    const { mirror } = this.#options;
    const live = mirror.live;
    const base = {
      epoch: mirror.epoch,
      engineFeed: live ? ('live' as const) : ('down' as const),
      ...(load === undefined ? {} : { load: load.load }),
    };
    if (this.#needReset) {
      this.#needReset = false;
      this.#stored.clear();
      this.#removed.clear();
      this.#seq = 1;
      const keys = live ? mirror.keys() : [];
      return { ...base, seq: 1, reset: true, ...(keys.length > 0 ? { stored: packBlockKeys(keys) } : {}) };
    }
    this.#seq += 1;
    const stored = [...this.#stored];
    const removed = [...this.#removed];
    this.#stored.clear();
    this.#removed.clear();
    return {
      ...base,
      seq: this.#seq,
      ...(stored.length > 0 ? { stored: packBlockKeys(stored) } : {}),
      ...(removed.length > 0 ? { removed: packBlockKeys(removed) } : {}),
    };
  }

  async #send(load: CarriedLoad | undefined): Promise<void> {
    const update = this.#next(load);
    const body = JSON.stringify(update);
    const status = await this.#post(body);
    if (this.#stopped) return;
    this.counts.updates += 1;
    this.counts.bytes += Buffer.byteLength(body);
    if (status >= 200 && status < 300) {
      this.#lastSent = this.#options.now();
      this.#loadSent = load?.json;
      return;
    }
    this.#loadSent = undefined;
    this.#resetNext();
    if (status === 409) {
      this.#log.debug('gateway asked for a cache reset', { epoch: update.epoch, seq: update.seq });
      return;
    }
    // 404: the registration registers again; anything else: the gateway is away. A heartbeat's wait either way.
    this.#quietUntil = this.#options.now() + this.#options.keepAlive();
    if (status !== 404) this.#log.debug('cache update failed', { status, seq: update.seq });
  }

  /** POSTs an update; the status, or 0 when no answer came. */
  async #post(body: string): Promise<number> {
    try {
      const res = await this.#pool.request({
        method: 'POST',
        path: this.#path,
        headers: { authorization: `Bearer ${this.#options.token}`, 'content-type': 'application/json' },
        body,
      });
      await res.body.dump().catch(() => {});
      return res.statusCode;
    } catch {
      return 0;
    }
  }
}
