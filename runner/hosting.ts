/**
 * Hosting engines on order: an on-demand runner (started with neither an engine nor a profile)
 * launches the engine a gateway's reconciler orders in a heartbeat answer, and drains and stops
 * it when the order goes away. Orders are level-triggered: each `host` the runner reads says what
 * it should host now (an order, or null for nothing); a `host` absent says nothing. One ordered
 * engine at a time; every change is reported at once (the runner beats its gateways).
 *
 *   no engine --order--> starting --ready--> ready --null or another replica--> draining --> stopped
 *                           |                  |
 *                           +--exit, timeout, spawn error, profile refused----------------> failed
 *
 * An ordered engine is never restarted here: the reconciler retries a failed start with backoff,
 * on another runner where one fits, which a local restart loop would only delay. `stopped` and
 * `failed` are reported until the next order (a null clears them: no engine is reported then), so a gateway that missed a beat still learns how
 * the replica ended.
 */
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../placer/kernel/index.ts';
import { freeGpus } from './capacity.ts';
import type { RunnerEngine } from './engine.ts';
import { validateProfile } from './engines/profile.ts';
import type { EngineProfile, ProfileFacts } from './engines/profile.ts';
import type { ProfileKind } from './engines/argv.ts';
import type { EngineStateChange } from './engines/supervisor.ts';
import { ProfileError } from './engines/errors.ts';
import type { GpuInventory } from './protocol/index.ts';
import { DEFAULT_LAUNCH_POLICY, REGISTRATION_LIMITS } from './protocol/index.ts';
import type { EngineOrder, HostedEngine, HostedState, LaunchPolicy, OrderedProfile } from './protocol/index.ts';
import { callsFinished } from './slots.ts';
import type { Slots } from './slots.ts';

/** What hosting needs from its runner. */
export interface HostingOptions {
  /** The runner's engine, empty until an order launches one. */
  engine: RunnerEngine;
  /** The runner's slots: a drain waits for them to empty. */
  slots: Slots;
  /** How long a drain waits for calls holding a slot before the engine is stopped, ms. */
  drainTimeout: number;
  /** The node's GPU inventory as last read. */
  inventory(): GpuInventory;
  /** The node facts profiles are validated against (PATH, GPUs, ports). */
  facts(): ProfileFacts;
  /**
   * What this node's operator lets orders launch (`--engine-binary`, `--engine-env-allow`): an
   * order outside it fails before anything runs, whatever gateway sent it.
   * @default DEFAULT_LAUNCH_POLICY: each kind's usual entry point and environment allow-list
   */
  policy?: LaunchPolicy;
  /** Called on every change of the hosted engine's report: the runner beats its gateways at once. */
  changed(): void;
  logger: Logger;
  /** The clock `since` is read on, ms since the epoch. @default Date.now */
  now?: () => number;
  /** A port nothing listens on now, for an order without one. @default binds 127.0.0.1:0 and releases it */
  freePort?: () => Promise<number>;
}

/** Pause between probes of an engine that is healthy but lists no models yet, ms. */
const READY_PROBE_MS = 100;

/** What the runner hosts now, and the order it came from. */
interface Hosted {
  readonly order: EngineOrder;
  readonly report: HostedEngine;
}

/** One ordered engine at a time, started and stopped by orders; see the module comment. */
export class Hosting {
  readonly #options: HostingOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  #hosted: Hosted | undefined;
  /** The last order read: undefined before any, null for none. */
  #wanted: EngineOrder | null | undefined;
  /** The last order read was null while a failed or stopped engine was reported: forget it. */
  #clearAsked = false;
  #closed = false;
  /** The drain bound close() asked for; the option's until then. */
  #drainTimeout: number | undefined;
  #working: Promise<void> | undefined;

  constructor(options: HostingOptions) {
    this.#options = options;
    this.#log = options.logger;
    this.#now = options.now ?? Date.now;
  }

  /** The hosted engine's report, for registration, heartbeats and /status; undefined before any order. */
  report(): HostedEngine | undefined {
    return this.#hosted?.report;
  }

  /**
   * Takes the `host` of a heartbeat answer: an order to host that replica, or null to host
   * nothing. The same replica again changes nothing; another one drains and stops the hosted
   * engine first. Work runs in the background; {@link Hosting.settled} waits for it.
   */
  order(host: EngineOrder | null, answered?: HostedEngine): void {
    if (this.#closed) return;
    const before = this.#wanted;
    this.#wanted = host;
    // A null answering a beat that reported the engine failed or stopped: the gateway has seen
    // how the replica ended, so the runner stops reporting it and is free. A null answering an
    // earlier beat (the engine still draining when it was sent) clears nothing.
    const now = this.#hosted?.report;
    this.#clearAsked =
      host === null &&
      now !== undefined &&
      (now.state === 'failed' || now.state === 'stopped') &&
      answered?.replica === now.replica &&
      answered.state === now.state;
    // Orders repeat in every answer: logged when they change.
    if (before === undefined || (before?.replica ?? null) !== (host?.replica ?? null)) {
      this.#log.info(
        'engine order read',
        host ? { replica: host.replica, model: host.model, kind: host.profile.kind } : { replica: null },
      );
    }
    this.#work();
  }

  /** Resolves once the hosted engine matches the last order (for specs and close). */
  async settled(): Promise<void> {
    while (this.#working) await this.#working;
  }

  /** Drains (up to `drainTimeout` ms) and stops the hosted engine; no order is taken after. */
  async close(drainTimeout: number = this.#options.drainTimeout): Promise<void> {
    this.#closed = true;
    this.#drainTimeout = drainTimeout;
    this.#work();
    await this.settled();
  }

  #work(): void {
    if (this.#working) return;
    let broke = false;
    this.#working = (async () => {
      try {
        while (await this.#step()) {
          // Each step reads the latest order: one that came during a drain waits for it.
        }
      } catch (error) {
        // Not retried in a loop: the next order read tries again.
        broke = true;
        this.#log.error('hosting failed', { error: error as Error });
      }
    })().finally(() => {
      this.#working = undefined;
      // An order read between the last step and now.
      if (!broke && this.#pending()) this.#work();
    });
  }

  /** What the next step would do, or undefined when the hosted engine matches the order. */
  #next(): 'stop' | 'launch' | 'clear' | undefined {
    const want = this.#closed ? null : this.#wanted;
    if (want === undefined) return undefined;
    const state = this.#hosted?.report.state;
    const active = state === 'starting' || state === 'ready';
    if (want !== null && this.#hosted?.order.replica === want.replica) return undefined;
    if (active) return 'stop';
    if (want === null) return this.#clearAsked && (state === 'failed' || state === 'stopped') ? 'clear' : undefined;
    return 'launch';
  }

  #pending(): boolean {
    return this.#next() !== undefined;
  }

  /** Takes one step toward the order; false when there is nothing left to do. */
  async #step(): Promise<boolean> {
    const next = this.#next();
    if (next === 'stop') await this.#stop();
    else if (next === 'launch') await this.#launch(this.#wanted!);
    else if (next === 'clear') await this.#clear();
    return next !== undefined;
  }

  async #launch(order: EngineOrder): Promise<void> {
    const { engine } = this.#options;
    // A failed engine's adapter and supervisor go before the next one comes.
    await engine.unload();
    this.#set(order, 'starting');
    let profile: EngineProfile;
    try {
      profile = await this.#profileOf(order.profile);
      const valid = await validateProfile(
        profile,
        this.#options.facts(),
        this.#options.policy ?? DEFAULT_LAUNCH_POLICY,
      );
      await engine.launch(valid, {
        restart: false,
        onState: (change) => this.#engineChanged(order, valid.startTimeout, change),
      });
    } catch (error) {
      // A profile this node refuses, or a command that cannot be built: nothing was launched.
      const reason =
        error instanceof ProfileError ? error.message : `the engine could not be launched: ${(error as Error).message}`;
      await engine.unload();
      this.#set(order, 'failed', { reason: oneLine(reason) });
    }
  }

  /**
   * Drains the hosted engine (no call admitted, calls holding a slot finish, bounded by the
   * drain timeout), then stops it and waits until its process is gone.
   */
  async #stop(): Promise<void> {
    const { engine, slots } = this.#options;
    const order = this.#hosted!.order;
    this.#set(order, 'draining');
    engine.drain();
    const drainTimeout = this.#drainTimeout ?? this.#options.drainTimeout;
    await callsFinished(slots, drainTimeout);
    if (slots.inUse > 0)
      this.#log.warn('hosted engine drain timeout, stopping it under running calls', {
        replica: order.replica,
        inFlight: slots.inUse,
        drainTimeout,
      });
    await engine.unload();
    this.#set(order, 'stopped');
  }

  /** Forgets a failed or stopped engine: its adapter and supervisor go, and no engine is reported. */
  async #clear(): Promise<void> {
    const order = this.#hosted!.order;
    await this.#options.engine.unload();
    this.#hosted = undefined;
    this.#clearAsked = false;
    this.#log.info('hosted engine cleared', { replica: order.replica, model: order.model });
    try {
      this.#options.changed();
    } catch (error) {
      this.#log.warn('hosted engine change listener threw', { error: error as Error });
    }
  }

  /** Follows the engine process: ready once its adapter lists models, failed at its first failure. */
  #engineChanged(order: EngineOrder, startTimeout: number, change: EngineStateChange): void {
    if (this.#hosted?.order !== order) return;
    if (change.to === 'ready') {
      void this.#readyOnceAdmitted(order);
    } else if (change.to === 'failed') {
      this.#set(order, 'failed', {
        reason: oneLine(failureReason(change, startTimeout)),
        output: (change.output ?? []).slice(-REGISTRATION_LIMITS.outputLines).map((line) => oneLine(line)),
      });
      // The process is gone; stop probing its port.
      void this.#options.engine.unload();
    }
  }

  /**
   * Marks the order ready once the runner admits calls to its engine, that is once the adapter's
   * probe has listed the models: a gateway told `ready` places calls at once. Probes again at
   * {@link READY_PROBE_MS} while the engine answers health but not yet its model list.
   */
  async #readyOnceAdmitted(order: EngineOrder): Promise<void> {
    const { engine } = this.#options;
    while (this.#hosted?.order === order && this.#hosted.report.state === 'starting') {
      await engine.adapter?.probe();
      if (this.#hosted?.order !== order || this.#hosted.report.state !== 'starting') return;
      const reason = engine.busyReason();
      if (reason === undefined) return this.#set(order, 'ready');
      if (reason !== 'starting' && reason !== 'engine-unreachable') return;
      await new Promise((resolve) => setTimeout(resolve, READY_PROBE_MS).unref());
    }
  }

  /**
   * The runner's profile for an order: a free port when it names none, that many of this node's
   * free GPUs when `gpus` is a count.
   * @throws {ProfileError} when the node has fewer free GPUs than the count.
   */
  async #profileOf(ordered: OrderedProfile): Promise<EngineProfile> {
    let gpus: number[];
    if (typeof ordered.gpus === 'number') {
      // One ordered engine at a time: every GPU of the inventory is free when one launches.
      const free = freeGpus(this.#options.inventory(), []);
      if (ordered.gpus > free.length) {
        throw new ProfileError(
          `profile.gpus asks for ${ordered.gpus} GPUs, this node has ${free.length} free${free.length > 0 ? ` (${free.join(', ')})` : ''}`,
        );
      }
      gpus = free.slice(0, ordered.gpus);
    } else {
      gpus = [...ordered.gpus];
    }
    const port = ordered.port ?? (await (this.#options.freePort ?? freePort)());
    return {
      kind: ordered.kind as ProfileKind,
      model: ordered.model,
      port,
      ...(gpus.length > 0 ? { gpus } : {}),
      ...(ordered.binary === undefined ? {} : { binary: ordered.binary }),
      args: [...ordered.args],
      env: { ...ordered.env },
      ...(ordered.startTimeout === undefined ? {} : { startTimeout: ordered.startTimeout }),
    };
  }

  #set(order: EngineOrder, state: HostedState, extra: { reason?: string; output?: string[] } = {}): void {
    const from = this.#hosted?.order === order ? this.#hosted.report.state : undefined;
    this.#hosted = {
      order,
      report: {
        replica: order.replica,
        model: order.model,
        ...(order.revision === undefined ? {} : { revision: order.revision }),
        state,
        since: this.#now(),
        ...extra,
      },
    };
    const fields = {
      replica: order.replica,
      model: order.model,
      from,
      to: state,
      ...(extra.reason === undefined ? {} : { reason: extra.reason }),
    };
    if (state === 'failed') this.#log.warn('hosted engine state changed', fields);
    else this.#log.info('hosted engine state changed', fields);
    try {
      this.#options.changed();
    } catch (error) {
      this.#log.warn('hosted engine change listener threw', { error: error as Error });
    }
  }
}

/** Why a supervised engine failed, in words. */
function failureReason(change: EngineStateChange, startTimeout: number): string {
  const exit = change.exit;
  if (change.reason === 'start-timeout') return `the engine was not ready within ${startTimeout} ms`;
  if (change.reason === 'spawn-failed' || exit?.error !== undefined)
    return `the engine could not be started: ${exit?.error ?? 'unknown error'}`;
  if (exit?.signal) return `the engine was killed by ${exit.signal}`;
  return `the engine exited with code ${String(exit?.code ?? 'unknown')}`;
}

/**
 * Text fit for the wire's one-line fields: control characters (an engine's colours, tabs, a
 * stray carriage return) become spaces, and the text is cut to {@link REGISTRATION_LIMITS}.outputLine.
 */
function oneLine(text: string): string {
  const max = REGISTRATION_LIMITS.outputLine;
  const flat = text.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '').replace(/[\x00-\x1f\x7f]/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** A port on 127.0.0.1 nothing listens on now: bound at 0, then released for the engine. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
