/**
 * Runners that register themselves. A runner dials out, registers with its URL, models, slots
 * and GPUs, then heartbeats with its load; the registry keeps it in the pool while heartbeats
 * arrive, marks it unreachable (not placed on) after a few are missed, and forgets it (lost)
 * after a longer silence: a lost stream is not yet a lost node.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../placer/kernel/index.ts';
import type { Clock } from '../placer/kernel/index.ts';
import { parseHeartbeat, parseRegistration } from '../runner/protocol.ts';
import type { HeartbeatAnswer, Parsed, RegistrationAccepted } from '../runner/protocol.ts';
import { InvalidRegistrationError } from './errors.ts';
import type { FleetPool } from './pool.ts';

/** Settings of the registry. */
export interface RegistryOptions {
  pool: FleetPool;
  /** The shared secret runners present; registration is off without one. */
  token: string | undefined;
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

/** Registration, heartbeats, two-stage expiry and drain requests for self-registering runners. */
export class RunnerRegistry {
  readonly #options: RegistryOptions;
  readonly #tokenDigest: Buffer | undefined;
  #sweeper: NodeJS.Timeout | undefined;
  readonly #drains = new Set<NodeJS.Timeout>();

  constructor(options: RegistryOptions) {
    this.#options = options;
    this.#tokenDigest = options.token === undefined ? undefined : digest(options.token);
  }

  /** True when registration is configured (a runner token is set). */
  get enabled(): boolean {
    return this.#tokenDigest !== undefined;
  }

  /** Checks `authorization: Bearer <token>` in constant time. */
  authorize(header: string | undefined): boolean {
    if (!this.#tokenDigest || header === undefined) return false;
    const match = /^Bearer (.+)$/.exec(header);
    return match !== null && timingSafeEqual(digest(match[1]!), this.#tokenDigest);
  }

  /** Adds or refreshes a runner; a runner that comes back with a new URL is replaced. */
  register(body: unknown): RegistrationAccepted {
    const reg = accepted(parseRegistration(body));
    const { pool, logger } = this.#options;
    const url = new URL(reg.url);
    let runner = pool.get(reg.id);
    if (runner && !runner.registration) {
      throw new InvalidRegistrationError(`runner id ${JSON.stringify(reg.id)} is already a static runner of this gateway`);
    }
    if (!runner || runner.url.origin !== url.origin) {
      runner = pool.createRunner(url, reg.id);
      const old = pool.add(runner);
      if (old) void old.close();
      logger.info('runner registered', { runner: reg.id, url: url.origin, models: reg.models, version: reg.version });
    }
    runner.register(reg);
    return { gatewayId: this.#options.gatewayId, heartbeatInterval: this.#options.heartbeatInterval };
  }

  /** Records a heartbeat; undefined when the runner is unknown (it must register again). */
  heartbeat(id: string, body: unknown): HeartbeatAnswer | undefined {
    const runner = this.#options.pool.get(id);
    const reg = runner?.registration;
    if (!runner || !reg) return undefined;
    const hb = accepted(parseHeartbeat(body));
    if (reg.state === 'unreachable') this.#options.logger.info('runner back', { runner: id });
    runner.heartbeat(hb);
    return { drain: reg.drainRequested };
  }

  /** Removes a runner that left; false when unknown. */
  deregister(id: string): boolean {
    const runner = this.#options.pool.get(id);
    if (!runner?.registration) return false;
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
    const ids = this.#options.pool.runnerList.filter((r) => r.registration && !r.registration.drainRequested).map((r) => r.id);
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
        void runner.close(true);
        logger.warn('runner lost', { runner: runner.id, silenceMs: Math.round(silence) });
      } else if (silence > unreachableAfter && reg.state === 'live') {
        runner.markUnreachable();
        logger.warn('runner unreachable', { runner: runner.id, silenceMs: Math.round(silence) });
      }
    }
  }

  close(): void {
    clearInterval(this.#sweeper);
    for (const timer of this.#drains) clearTimeout(timer);
  }
}

function digest(token: string): Buffer {
  // Hashing first gives both sides one length, which timingSafeEqual needs.
  return createHash('sha256').update(token).digest();
}

/** The wire check's verdict, or the gateway's 400 for a body that is not what the wire says. */
function accepted<T>(parsed: Parsed<T>): T {
  if (parsed.kind === 'invalid') throw new InvalidRegistrationError(parsed.message);
  return parsed.value;
}
