/**
 * The gateway's pool: static runners from --runners, each probed at GET /status so the gateway
 * knows which models it serves and whether it answers, and runners that registered themselves
 * (see registry.ts), known from their heartbeats. One list, one set of rules for placement.
 * Each runner is a RunnerEntry (runner-entry.ts), the one writer of its state, which tells the
 * pool when its candidate lists must be rebuilt.
 */
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { RunnerPool } from '../../placer/types.ts';
import { STATUS_PATH, readStatus } from '../../runner/protocol/index.ts';
import type { GatewayCall } from '../http/index.ts';
import type { BreakerOptions } from './breaker.ts';
import type { CallSigner, TlsMaterial } from './data-plane.ts';
import type { CacheTruth } from './cache-truth.ts';
import { HttpRunner } from './http-runner.ts';
import type { CloseOptions, RunnerResponse } from './http-runner.ts';
import { RunnerEntry } from './runner-entry.ts';
import { isSilence, transportFailure } from './transport-failure.ts';
import type { RoomListener } from './runner-entry.ts';

/** Whether the pool serves a model: `unknown` while some runner has not reported yet. */
export type ModelAnswer = 'yes' | 'no' | 'unknown';

/** What the gateway needs from a pool beyond the placer's contract. */
export interface GatewayPool extends RunnerPool<RunnerResponse> {
  /** The models some runner reported serving. */
  models(): string[];
  serves(model: string): ModelAnswer;
  /** True when at least one runner answered its last status probe. */
  ready(): boolean;
  /**
   * Why each runner did not take `call`, for the 503 when nothing did: `offers` holds the last
   * answer of each runner the walk offered it to.
   */
  explain?(call: GatewayCall, offers: ReadonlyMap<string, 'busy' | 'error'>): RunnerReason[];
  start(): Promise<void>;
  /**
   * The engines' cache truth its runners feed, for placement on it (gateway/calls); absent for a
   * pool whose runners feed none.
   */
  readonly cacheTruth?: CacheTruth;
  /** Stops probing and closes every runner's connections; see {@link CloseOptions}. */
  close(options?: CloseOptions): Promise<void>;
}

/** One runner's reason for not taking a call. */
export interface RunnerReason {
  runner: string;
  reason:
    | 'busy'
    | 'unreachable'
    | 'hung'
    | 'breaker-open'
    | 'not-serving-model'
    | 'not-ready'
    | 'draining'
    | 'drain-requested';
}

/** Settings of the pool. */
export interface FleetPoolOptions {
  urls: readonly URL[];
  connectTimeout: number;
  /** See HttpRunnerOptions.responseTimeout. */
  responseTimeout: number;
  /** See HttpRunnerOptions.streamIdleTimeout. */
  streamIdleTimeout: number;
  /** The gateway's clock: placer deadlines, reports' times, down time and the breakers are on it. */
  clock: Clock;
  /** How often each runner's /status is fetched, in ms. */
  statusInterval: number;
  breaker: Omit<BreakerOptions, 'clock'>;
  logger: Logger;
  /** See HttpRunnerOptions.signer and .tls: the data plane's credential, on every runner. */
  signer?: CallSigner;
  tls?: TlsMaterial;
  /** Told the ids of runners that left the pool (a placer's forget). */
  onRemove?: (ids: readonly string[]) => void;
  /** See RunnerEntryOptions.room: told when a runner may have room for more calls. */
  room?: RoomListener;
  /** The cache truth its registered runners feed; a runner leaving the pool is dropped from it. */
  cacheTruth?: CacheTruth;
}

/** Static runners probed in the background, plus registered ones added and removed as they come and go. */
export class FleetPool implements GatewayPool {
  /** Replaced, never mutated, on every change (frozen): placers may key caches on its identity. */
  runnerList: readonly RunnerEntry[];
  readonly #options: FleetPoolOptions;
  readonly cacheTruth: CacheTruth | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Candidate lists per model; cleared by the entries whenever a runner's models or placeability change. */
  readonly #byModel = new Map<string, readonly RunnerEntry[]>();
  readonly #changed = (): void => this.#byModel.clear();
  /** Static runners whose own id another runner holds, warned of once. */
  readonly #idTaken = new WeakSet<RunnerEntry>();

  constructor(options: FleetPoolOptions) {
    this.#options = options;
    this.cacheTruth = options.cacheTruth;
    this.runnerList = Object.freeze(options.urls.map((url) => this.createRunner(url)));
  }

  /**
   * A runner with this pool's connection and breaker settings, not yet in the pool; `id` defaults
   * to `host:port`, the name of a static runner until its status says its own.
   */
  createRunner(url: URL, id: string = url.host): RunnerEntry {
    const { connectTimeout, responseTimeout, streamIdleTimeout, clock, breaker, room, signer, tls } = this.#options;
    const transport = new HttpRunner(url, {
      connectTimeout,
      responseTimeout,
      streamIdleTimeout,
      clock,
      ...(signer ? { signer } : {}),
      ...(tls ? { tls } : {}),
    });
    return new RunnerEntry(id, transport, {
      clock,
      breaker,
      streamIdleTimeout,
      onChange: this.#changed,
      ...(room ? { room } : {}),
    });
  }

  /**
   * Every runner that serves the call's model or has not said yet what it serves, down ones
   * included: a down runner fails its offer at once (see RunnerEntry), and keeping it listed
   * keeps the list stable, which hashing placers need. The same frozen array is returned until
   * some runner's model list changes, so placers keep their view of it (its id order) without
   * checking it per call.
   */
  runners(call: GatewayCall): readonly RunnerEntry[] {
    const key = call.route === 'invoke' ? '' : call.fn;
    let list = this.#byModel.get(key);
    if (!list) {
      list = Object.freeze(
        this.runnerList.filter(
          (r) => r.placeable() && (key === '' || r.health.models === undefined || r.health.models.includes(key)),
        ),
      );
      this.#byModel.set(key, list);
    }
    return list;
  }

  explain(call: GatewayCall, offers: ReadonlyMap<string, 'busy' | 'error'>): RunnerReason[] {
    return this.runnerList.map((r): RunnerReason => {
      const reg = r.registration;
      const reason: RunnerReason['reason'] = reg?.drainRequested
        ? 'drain-requested'
        : reg?.draining
          ? 'draining'
          : r.health.hung
            ? 'hung'
            : r.breaker.state === 'open'
              ? 'breaker-open'
              : reg?.state === 'unreachable' || offers.get(r.id) === 'error' || !r.health.reachable
                ? 'unreachable'
                : (reg && !reg.ready) || (call.route !== 'invoke' && r.health.models === undefined)
                  ? 'not-ready'
                  : call.route !== 'invoke' && !r.health.models!.includes(call.fn)
                    ? 'not-serving-model'
                    : 'busy';
      return { runner: r.id, reason };
    });
  }

  /** The runner with this id, static or registered. */
  get(id: string): RunnerEntry | undefined {
    return this.runnerList.find((r) => r.id === id);
  }

  /** Adds a registered runner, replacing one with the same id (which is returned to be closed). */
  add(runner: RunnerEntry): RunnerEntry | undefined {
    const old = this.get(runner.id);
    this.runnerList = Object.freeze([...this.runnerList.filter((r) => r !== old), runner]);
    this.#changed();
    return old;
  }

  /** Removes a runner; returns it so its connections can be closed. */
  remove(id: string): RunnerEntry | undefined {
    const old = this.get(id);
    if (!old) return undefined;
    this.runnerList = Object.freeze(this.runnerList.filter((r) => r !== old));
    this.#gone(id);
    return old;
  }

  models(): string[] {
    const all = new Set<string>();
    for (const r of this.runnerList) for (const m of r.health.models ?? []) all.add(m);
    return [...all].sort();
  }

  serves(model: string): ModelAnswer {
    let unknown = false;
    for (const r of this.runnerList) {
      if (r.health.models === undefined) unknown = true;
      else if (r.health.models.includes(model)) return 'yes';
    }
    return unknown ? 'unknown' : 'no';
  }

  ready(): boolean {
    return this.runnerList.some((r) => r.placeable() && r.health.reachable && r.health.models !== undefined);
  }

  /** Probes every runner once, then keeps probing every statusInterval. */
  async start(): Promise<void> {
    await this.refresh();
    this.#schedule();
  }

  /** Fetches every runner's /status once; never throws. */
  async refresh(): Promise<void> {
    for (const r of this.runnerList) {
      const cut = r.cutSilentCalls();
      if (cut > 0)
        this.#options.logger.warn('runner silent, detached calls ended', {
          runner: r.id,
          calls: cut,
          lastError: r.health.lastError,
        });
    }
    // Registered runners report through heartbeats; they are probed only while ejected or hung,
    // to learn early that they answer again.
    await Promise.all(
      this.runnerList
        .filter((r) => !r.registration || r.health.hung || r.breaker.state === 'open')
        .map((r) => this.#probe(r)),
    );
  }

  async close(options: CloseOptions = {}): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await Promise.all(this.runnerList.map((r) => r.close(options)));
  }

  async #probe(runner: RunnerEntry): Promise<void> {
    try {
      const res = await runner.transport.get(STATUS_PATH, this.#options.connectTimeout);
      if (res.statusCode !== 200) {
        await res.body.dump();
        throw new Error(`${STATUS_PATH} answered ${res.statusCode}`);
      }
      const reading = readStatus(await res.body.json());
      if (reading.models && (!runner.health.reachable || runner.health.models === undefined)) {
        this.#options.logger.info('runner up', { runner: runner.id, models: reading.models });
      }
      runner.probed(reading);
      if (reading.id !== undefined && reading.id !== runner.id && !runner.registration)
        this.#rename(runner, reading.id);
    } catch (error) {
      if (this.#closed) return;
      // A hung runner stays passed over until a probe gets an answer.
      const silent = isSilence(transportFailure(error));
      if (runner.health.reachable) {
        this.#options.logger.warn(silent ? 'runner hung' : 'runner unreachable', {
          runner: runner.id,
          error: error as Error,
        });
      }
      if (silent) runner.markHung(`status probe unanswered within ${this.#options.connectTimeout} ms`);
      else runner.markDown(error as Error);
      runner.breaker.failure();
    }
  }

  /**
   * After the list changed and no runner goes by `id` any more: the cache index and the placer
   * forget it. A placer that throws while forgetting is logged; the pool goes on.
   */
  #gone(id: string): void {
    this.#changed();
    this.cacheTruth?.drop([id]);
    try {
      this.#options.onRemove?.([id]);
    } catch (error) {
      this.#options.logger.warn('placer forget failed', { runner: id, error: error as Error });
    }
  }

  /**
   * Gives a static runner the id it calls itself, so the gateway's labels, spans and logs name
   * it as its own do. Its old id leaves the placers and the cache truth, as a runner leaving
   * would. An id another runner of the pool holds is not taken: the runner keeps its old one.
   */
  #rename(runner: RunnerEntry, id: string): void {
    const was = runner.id;
    if (this.get(id) !== undefined) {
      if (!this.#idTaken.has(runner)) this.#options.logger.warn('runner id taken', { runner: was, id });
      this.#idTaken.add(runner);
      return;
    }
    this.#idTaken.delete(runner);
    runner.rename(id);
    this.runnerList = [...this.runnerList];
    this.#gone(was);
    this.#options.logger.info('runner named', { runner: id, was, url: runner.transport.url.origin });
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => void this.refresh().then(() => this.#schedule()), this.#options.statusInterval);
    this.#timer.unref();
  }
}
