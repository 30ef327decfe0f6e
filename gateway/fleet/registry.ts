/**
 * Runners that register themselves. A runner dials out, registers with its URL, models, slots
 * and GPUs, then heartbeats with its load; the registry keeps it in the pool while heartbeats
 * arrive, marks it unreachable (not placed on) after a few are missed, and forgets it (lost)
 * after a longer silence: a lost stream is not yet a lost node.
 */
import type { Logger, Clock } from '../../placer/kernel/index.ts';
import { parseHeartbeat, parseRegistration, readCacheAnnouncement } from '../../runner/protocol/index.ts';
import type {
  CacheAnnouncement,
  Capacity,
  EngineOrder,
  HeartbeatAnswer,
  HostedEngine,
  Parsed,
  RegistrationAccepted,
} from '../../runner/protocol/index.ts';
import { ForbiddenError, InvalidRegistrationError } from '../errors.ts';
import type { FleetPool } from './pool.ts';
import type { RunnerEntry } from './runner-entry.ts';
import { createRunnerAddressPolicy } from './registration-policy.ts';
import type { RunnerAddressPolicy } from './registration-policy.ts';

/** One registered runner, as the control plane's reconciler sees it at a pass ({@link RunnerRegistry.fleet}). */
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

/** Settings of the registry. */
export interface RegistryOptions {
  pool: FleetPool;
  /**
   * The runner tokens this gateway accepts, newest first; registration is off without one. A
   * runner id is bound to the token it registered with (see {@link RunnerRegistry.register}).
   */
  tokens: readonly string[];
  /** CIDR networks registered runner URLs must be in; see createRunnerAddressPolicy. @default none: any but the refused ranges */
  networks?: readonly string[];
  /** This machine's interface addresses, for the own-listener check. @default from os.networkInterfaces() */
  localAddresses?: () => readonly string[];
  gatewayId: string;
  /** Interval runners are told to heartbeat at, ms. */
  heartbeatInterval: number;
  /** Silence after which a runner is unreachable and not placed on, ms. */
  unreachableAfter: number;
  /** Silence after which a runner is forgotten, ms. */
  lostAfter: number;
  logger: Logger;
  clock: Clock;
}

/**
 * The engine orders this gateway gives: what a runner should host (an order, or null for
 * nothing), or undefined for no word. The reconciler answers it (gateway/control/reconciler.ts).
 */
export type EngineOrders = (runnerId: string) => EngineOrder | null | undefined;

/** Registration, heartbeats, two-stage expiry and drain requests for self-registering runners. */
export class RunnerRegistry {
  readonly #options: RegistryOptions;
  /**
   * The runner tokens, only to carry the bindings over a reload: they are checked by the
   * gateway's credentials (gateway/access/credentials.ts), which name the position of the one
   * presented.
   */
  #tokenList: readonly string[];
  readonly #policy: RunnerAddressPolicy;
  /** Which token (its position in the list) each registered runner id is bound to. */
  readonly #boundTo = new Map<string, number>();
  #sweeper: NodeJS.Timeout | undefined;
  readonly #drains = new Set<NodeJS.Timeout>();
  /**
   * What each registered runner last said it could host. Keyed by entry, so a runner the pool
   * drops (lost, replaced, deregistered) takes its capacity with it.
   */
  readonly #capacity = new WeakMap<RunnerEntry, Capacity>();
  /** The ordered engine each registered runner last said it hosts; kept as capacity is. */
  readonly #hosted = new WeakMap<RunnerEntry, HostedEngine>();
  #orders: EngineOrders = () => undefined;
  #onHosted: ((runnerId: string, hosted: HostedEngine | undefined) => void) | undefined;

  /** @throws {@link GatewayConfigError} for a bad network. */
  constructor(options: RegistryOptions) {
    this.#options = options;
    this.#tokenList = options.tokens;
    this.#policy = createRunnerAddressPolicy({
      ...(options.networks ? { networks: options.networks } : {}),
      ...(options.localAddresses ? { localAddresses: options.localAddresses } : {}),
    });
  }

  /** True when registration is configured (a runner token is set). */
  get enabled(): boolean {
    return this.#tokenList.length > 0;
  }

  /**
   * Replaces the runner tokens (a rotation step, without a restart). Each binding follows its
   * token to its new position; a binding to a token no longer listed is void, and the next
   * request under that id binds it again to the token it presents.
   */
  setTokens(tokens: readonly string[]): void {
    const moved = new Map<string, number>();
    for (const [id, position] of this.#boundTo) {
      const now = tokens.indexOf(this.#tokenList[position]!);
      if (now >= 0) moved.set(id, now);
    }
    this.#boundTo.clear();
    for (const [id, position] of moved) this.#boundTo.set(id, position);
    this.#tokenList = tokens;
  }

  /** Records one of this gateway's listeners: a runner URL that reaches it is refused. */
  addListener(address: string, port: number): void {
    this.#policy.addListener(address, port);
  }

  /**
   * Adds or refreshes a runner; a runner that comes back with a new URL is replaced. The id is
   * bound to `token`, the position of the runner token the request presented: while the id is
   * registered, it may register again only with that token or a newer one (listed before it,
   * which moves the binding there), and heartbeat or leave only with the one it is bound to.
   * A runner restarted with a rotated token so comes back at once, while the holder of an older
   * token cannot take over an id bound to a newer one.
   * @throws {@link ForbiddenError} for an id bound to another token;
   *   {@link InvalidRegistrationError} for a bad body or a URL the address policy refuses.
   */
  register(body: unknown, token: number): RegistrationAccepted {
    const reg = accepted(parseRegistration(body));
    const { pool, logger } = this.#options;
    const url = new URL(reg.url);
    let runner = pool.get(reg.id);
    if (runner && !runner.registration) {
      throw new InvalidRegistrationError(
        `runner id ${JSON.stringify(reg.id)} is already a static runner of this gateway`,
      );
    }
    const bound = runner ? this.#boundTo.get(reg.id) : undefined;
    if (bound !== undefined && token > bound) throw this.#forbidden(reg.id, bound, token, 'register');
    try {
      this.#policy.check(url);
    } catch (error) {
      // Worth an operator's eye: a token holder pointing the gateway somewhere it must not call.
      logger.warn('runner registration refused', { runner: reg.id, reason: (error as Error).message });
      throw error;
    }
    if (bound !== undefined && token < bound)
      logger.info('runner moved to a newer token', { runner: reg.id, token, was: bound });
    this.#boundTo.set(reg.id, token);
    if (!runner || runner.url.origin !== url.origin) {
      runner = pool.createRunner(url, reg.id);
      const old = pool.add(runner);
      if (old) void old.close();
      logger.info('runner registered', { runner: reg.id, url: url.origin, models: reg.models, version: reg.version });
    }
    runner.register(reg);
    runner.announce(announcementIn(body));
    // A runner older than the field sends none: it then says nothing of what it could host.
    if (reg.capacity) this.#capacity.set(runner, reg.capacity);
    else this.#capacity.delete(runner);
    this.#setHosted(runner, reg.hosted);
    return { gatewayId: this.#options.gatewayId, heartbeatInterval: this.#options.heartbeatInterval };
  }

  /**
   * The registered runner `id` for a request of its own, such as a cache feed update; undefined
   * when unknown (it must register again).
   * @throws {@link ForbiddenError} when `token` is not the one the id is bound to.
   */
  registered(id: string, token: number): RunnerEntry | undefined {
    const runner = this.#options.pool.get(id);
    if (!runner?.registration) return undefined;
    this.#checkBound(id, token, 'update');
    return runner;
  }

  /**
   * Records a heartbeat; undefined when the runner is unknown (it must register again).
   * @throws {@link ForbiddenError} when `token` is not the one the id is bound to.
   */
  heartbeat(id: string, body: unknown, token: number): HeartbeatAnswer | undefined {
    const runner = this.#options.pool.get(id);
    const reg = runner?.registration;
    if (!runner || !reg) return undefined;
    this.#checkBound(id, token, 'heartbeat');
    const hb = accepted(parseHeartbeat(body));
    if (reg.state === 'unreachable') this.#options.logger.info('runner back', { runner: id });
    runner.heartbeat(hb);
    runner.announce(announcementIn(body));
    if (hb.capacity) this.#capacity.set(runner, hb.capacity);
    this.#setHosted(runner, hb.hosted);
    const host = this.#orders(id);
    return host === undefined ? { drain: reg.drainRequested } : { drain: reg.drainRequested, host };
  }

  /**
   * Who decides the engine orders heartbeat answers carry, and who hears of a runner's hosted
   * engine changing state (the reconciler, which then passes at once rather than at its period).
   */
  setEngineOrders(orders: EngineOrders, onHosted?: (runnerId: string, hosted: HostedEngine | undefined) => void): void {
    this.#orders = orders;
    this.#onHosted = onHosted;
  }

  /** The ordered engine a registered runner last said it hosts; undefined when none. */
  hosted(runner: RunnerEntry): HostedEngine | undefined {
    return this.#hosted.get(runner);
  }

  /** The registered runners as the reconciler reads them (gateway/control/fleet.ts). */
  fleet(): FleetRunner[] {
    const out: FleetRunner[] = [];
    for (const runner of this.#options.pool.runnerList) {
      const reg = runner.registration;
      if (!reg) continue;
      out.push({
        id: runner.id,
        capacity: this.#capacity.get(runner),
        hosted: this.#hosted.get(runner),
        placeable: reg.state === 'live' && !reg.draining && !reg.drainRequested,
        slotsInUse: reg.report?.load.slotsInUse ?? 0,
      });
    }
    return out;
  }

  #setHosted(runner: RunnerEntry, hosted: HostedEngine | undefined): void {
    const before = this.#hosted.get(runner);
    if (hosted) this.#hosted.set(runner, hosted);
    else this.#hosted.delete(runner);
    if (before?.replica !== hosted?.replica || before?.state !== hosted?.state) {
      if (hosted)
        this.#options.logger.info('hosted engine', {
          runner: runner.id,
          replica: hosted.replica,
          model: hosted.model,
          state: hosted.state,
          ...(hosted.reason ? { reason: hosted.reason } : {}),
        });
      this.#onHosted?.(runner.id, hosted);
    }
  }

  /** What a registered runner last said it could host; undefined for a static runner or one that says nothing of it. */
  capacity(runner: RunnerEntry): Capacity | undefined {
    return this.#capacity.get(runner);
  }

  /**
   * Removes a runner that left; false when unknown.
   * @throws {@link ForbiddenError} when `token` is not the one the id is bound to.
   */
  deregister(id: string, token: number): boolean {
    const runner = this.#options.pool.get(id);
    if (!runner?.registration) return false;
    this.#checkBound(id, token, 'deregister');
    this.#boundTo.delete(id);
    this.#options.pool.remove(id);
    void runner.close();
    this.#options.logger.info('runner deregistered', { runner: id });
    return true;
  }

  /** Stops placing on a runner and tells it to drain at its next heartbeat; false when unknown. */
  requestDrain(id: string): boolean {
    const runner = this.#options.pool.get(id);
    if (!runner?.registration) return false;
    runner.requestDrain();
    this.#options.logger.info('runner drain requested', { runner: id });
    return true;
  }

  /**
   * Drains every registered runner, one at a time: each after `interval` ms plus a random
   * jitter of up to `interval`, so a fleet does not leave (and come back) in lockstep. Resolves
   * with the ids, in the order they will be asked; the asking goes on in the background.
   */
  drainAll(interval: number, random: () => number = Math.random): string[] {
    const ids = this.#options.pool.runnerList
      .filter((r) => r.registration && !r.registration.drainRequested)
      .map((r) => r.id);
    let at = 0;
    for (const id of ids) {
      at += interval + Math.floor(random() * interval);
      const timer = setTimeout(() => {
        this.#drains.delete(timer);
        this.requestDrain(id);
      }, at);
      this.#drains.add(timer);
    }
    this.#options.logger.info('fleet drain started', { runners: ids.length, intervalMs: interval });
    return ids;
  }

  /** Starts the expiry sweep. */
  start(): void {
    const every = Math.max(50, Math.min(this.#options.heartbeatInterval, this.#options.unreachableAfter / 2));
    this.#sweeper = setInterval(() => this.sweep(), every);
    this.#sweeper.unref();
  }

  /** Marks silent runners unreachable, then lost; exposed for tests with a fake clock. */
  sweep(): void {
    const { pool, clock, logger, unreachableAfter, lostAfter } = this.#options;
    const now = clock.now();
    for (const runner of pool.runnerList) {
      const reg = runner.registration;
      if (!reg) continue;
      const silence = now - reg.lastSeen;
      if (silence > lostAfter) {
        pool.remove(runner.id);
        this.#boundTo.delete(runner.id);
        void runner.close({ abortCalls: true });
        logger.warn('runner lost', { runner: runner.id, silenceMs: Math.round(silence) });
      } else if (silence > unreachableAfter && reg.state === 'live') {
        runner.markUnreachable();
        logger.warn('runner unreachable', { runner: runner.id, silenceMs: Math.round(silence) });
      }
    }
  }

  #checkBound(id: string, token: number, what: string): void {
    const bound = this.#boundTo.get(id);
    if (bound !== undefined && bound !== token) throw this.#forbidden(id, bound, token, what);
    // Unbound only after a reload dropped the id's token: bound again to the one presented.
    if (bound === undefined) this.#boundTo.set(id, token);
  }

  /** The refusal of a request under `id` with another token than its own; logged with positions, never tokens. */
  #forbidden(id: string, bound: number, token: number, what: string): ForbiddenError {
    this.#options.logger.warn('runner id bound to another token', { runner: id, request: what, token, boundTo: bound });
    return new ForbiddenError(
      `runner id ${JSON.stringify(id)} is registered under another runner token; ${what === 'register' ? 'register it with that token or a newer one' : 'use the token it registered with, or register again'}`,
    );
  }

  close(): void {
    clearInterval(this.#sweeper);
    for (const timer of this.#drains) clearTimeout(timer);
  }
}

/** The wire check's verdict, or the gateway's 400 for a body that is not what the wire says. */
function accepted<T>(parsed: Parsed<T>): T {
  if (parsed.kind === 'invalid') throw new InvalidRegistrationError(parsed.message);
  return parsed.value;
}

/**
 * The cache announcement of a registration or heartbeat body (its `cache` field), read apart from
 * the wire check of the rest: a runner announcing what this gateway cannot use is placed without
 * cache truth, not refused.
 */
function announcementIn(body: unknown): CacheAnnouncement | undefined {
  return readCacheAnnouncement((body as { cache?: unknown } | null)?.cache);
}
