/**
 * The gateway's serverless part, put together: the reconciler over this gateway's registry
 * (engine orders ride heartbeat answers), the lease and boards that let several gateways share
 * one fleet, the cold-start questions placement asks, the deployments' metrics, and the status
 * GET /v1/deployments shows. gateway/server.ts makes one per gateway; the pieces it joins live
 * beside it in gateway/control/.
 */
import type { MeterProvider } from '@opentelemetry/api';
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { ColdStarts, StartFailure } from './cold-start.ts';
import type { RunnerRegistry } from '../fleet/index.ts';
import type { DemandBoard, StatusBoard } from './boards.ts';
import type { Lease } from './fleet.ts';
import { MemoryLease } from './lease.ts';
import { createDeploymentMetrics } from './metrics.ts';
import { startFailureOf } from './operations.ts';
import type { DeploymentMetrics } from './metrics.ts';
import type { ReconcilerDeploymentStatus, ReconcilerOptions } from './reconciler-options.ts';
import { Reconciler } from './reconciler.ts';
import type { DeploymentStore } from './store.ts';

/**
 * The reconciler's settings: its tunables (reconciler-options.ts) and, for several gateways on
 * one Redis, the shared lease and boards (the CLI makes Redis ones from `--store`). Left out,
 * one gateway's: a lease always held, its own waiting calls, its own status.
 */
export interface ReconcilerSettings extends ReconcilerOptions {
  lease?: Lease;
  /** Calls waiting for a replica at every gateway; the leader's reconciler reads the sum. */
  demand?: DemandBoard;
  /** Where the leader publishes each deployment's status for the other gateways to answer with. */
  statusBoard?: StatusBoard<ReconcilerDeploymentStatus>;
  /** Called when the gateway closes, after the pieces above: the CLI closes the Redis connection they share. */
  onClose?: () => Promise<void>;
}

/** The calls of this gateway waiting for a runner: its wait queue. */
export interface WaitingCalls {
  /** Calls for `model` in the queue now. */
  waitingFor(model: string): number;
  /**
   * Wakes every call waiting for `model`, so that they learn of a failed start
   * ({@link Serverless.failed}) now rather than at their deadline.
   */
  wakeAll(model: string): void;
}

/** What {@link Serverless} is made from. */
export interface ServerlessInit {
  readonly store: DeploymentStore;
  readonly registry: RunnerRegistry;
  /** This gateway's waiting calls: counted for the reconciler, woken when a start fails. */
  readonly calls: WaitingCalls;
  readonly settings: ReconcilerSettings;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly meterProvider: MeterProvider;
}

/** Something of the settings the gateway closes with itself, when it has a close. */
type Closable = { close?: () => Promise<unknown> };

/** One gateway's serverless part; answers placement's {@link ColdStarts} questions. */
export class Serverless implements ColdStarts {
  readonly reconciler: Reconciler;
  readonly #init: ServerlessInit;
  readonly #demand: DemandBoard | undefined;
  readonly #statusBoard: StatusBoard<ReconcilerDeploymentStatus> | undefined;
  #sampler: NodeJS.Timeout | undefined;
  readonly #lease: Lease;
  #renewedAt = -Infinity;
  /**
   * On a follower: the start failures the leader's published status shows, for the models this
   * gateway has calls waiting for, as of the last sample.
   */
  readonly #published = new Map<string, StartFailure>();

  /** @throws GatewayConfigError for a bad reconciler option, naming it. */
  constructor(init: ServerlessInit) {
    this.#init = init;
    const { lease = new MemoryLease(), demand, statusBoard, onClose: _onClose, ...options } = init.settings;
    this.#demand = demand;
    this.#lease = lease;
    this.#statusBoard = statusBoard;
    let metrics: DeploymentMetrics | undefined;
    this.reconciler = new Reconciler({
      ...options,
      store: init.store,
      lease,
      clock: init.clock,
      logger: init.logger.child({ component: 'reconciler' }),
      fleet: {
        runners: () => init.registry.fleet(),
        // With a demand board, the sum over the gateways (this one's own note included).
        waiting: demand ? (model) => demand.total(model) : (model) => init.calls.waitingFor(model),
      },
      events: (event) => {
        metrics?.record(event);
        // Woken after the pass that saw it: the pass runs on without awaiting, so a woken call
        // reads the operation as the pass left it.
        if (event.kind === 'failed' || event.kind === 'dead-letter') init.calls.wakeAll(event.model);
      },
    });
    metrics = createDeploymentMetrics(init.meterProvider, {
      models: () => this.reconciler.deployedModels(),
      status: (model) => this.reconciler.status(model),
    });
  }

  /** Joins the registry's heartbeat answers and starts the reconciler and the demand sampler. */
  start(): void {
    const { registry } = this.#init;
    registry.setEngineOrders(
      (runnerId) => this.reconciler.orderFor(runnerId),
      // A replica turning ready (its start timed) or failed (its retry) is news a pass acts on
      // now; a drain or a stop is not, so scale-down keeps its pace of one replica a pass.
      (_runnerId, hosted) => {
        if (hosted?.state === 'ready' || hosted?.state === 'failed') this.reconciler.poke(hosted.model);
      },
    );
    this.reconciler.start();
    this.#sampler = setInterval(() => void this.#tick(), this.reconciler.config.sampleInterval);
    this.#sampler.unref();
  }

  /** ColdStarts: a deployment exists for `model`. */
  deployed(model: string): boolean {
    return this.reconciler.isDeployed(model);
  }

  /**
   * ColdStarts: why `model` cannot get a replica now: as this gateway's reconciler knows when it
   * leads; else as the leader's published status showed at the last sample.
   */
  failed(model: string): StartFailure | undefined {
    return this.reconciler.leading ? this.reconciler.startFailure(model) : this.#published.get(model);
  }

  /** ColdStarts: calls wait for a replica of `model`; noted for the other gateways, and a pass now. */
  wake(model: string): void {
    void this.#demand?.note(model, this.#init.calls.waitingFor(model));
    this.reconciler.poke(model);
  }

  /** A deployment was put or deleted through the API: the reconciler reads the store now. */
  changed(model: string): void {
    this.reconciler.poke(model);
  }

  /**
   * A deployment's status for GET /v1/deployments: this gateway's own when it leads; else the
   * leader's, as published, when there is a board and a fresh one; else what this gateway sees.
   */
  async status(model: string): Promise<ReconcilerDeploymentStatus> {
    const own = this.reconciler.status(model);
    if (own.reconciler === 'leading' || !this.#statusBoard) return own;
    const published = await this.#statusBoard.read(model).catch(() => undefined);
    return published ? { ...published, reconciler: 'following' } : own;
  }

  /** Stops the reconciler (releasing the lease) and closes the shared pieces it was given. */
  async close(): Promise<void> {
    clearInterval(this.#sampler);
    await this.reconciler.close();
    const { lease, demand, statusBoard } = this.#init.settings;
    await Promise.all(
      [lease, demand, statusBoard, this.#init.store].map((piece) =>
        (piece as Closable | undefined)?.close?.().catch(() => undefined),
      ),
    );
    await this.#init.settings.onClose?.().catch(() => undefined);
  }

  /**
   * Every sample: renew the lease when due; note this gateway's waiting calls on the demand board and read the others';
   * when leading, publish each status, and pass at once for a model whose calls wait (at any
   * gateway) with no replica starting or ready: a cold start ordered by another gateway's call;
   * when following, read the start failures the leader published for the models calls wait for.
   */
  async #tick(): Promise<void> {
    // The lease is renewed three times a ttl, whatever the pass period, so a leader keeps it
    // between passes and a follower takes it within a ttl of the leader's death; a change of
    // hands is acted on by a pass now (the pass holds the lease again and adopts the fleet).
    const now = this.#init.clock.now();
    if (now - this.#renewedAt >= this.#lease.ttl / 3) {
      this.#renewedAt = now;
      if ((await this.#lease.hold()) !== this.reconciler.leading) this.reconciler.poke('');
    }
    const models = this.reconciler.deployedModels();
    const demand = this.#demand;
    if (demand) {
      for (const model of models) await demand.note(model, this.#init.calls.waitingFor(model));
      await demand.refresh();
    }
    if (!this.reconciler.leading) return this.#readFailures(models);
    this.#published.clear();
    for (const model of models) {
      const status = this.reconciler.status(model);
      if (status.ready + status.starting === 0 && (demand?.total(model) ?? this.#init.calls.waitingFor(model)) > 0)
        this.reconciler.poke(model);
      if (this.#statusBoard) await this.#statusBoard.publish(model, status);
    }
  }

  /**
   * A follower reads, for each model it has calls waiting for, whether the leader's published
   * status shows a start failure; a new one wakes those calls, as the leader's own event does.
   */
  async #readFailures(models: readonly string[]): Promise<void> {
    const board = this.#statusBoard;
    for (const model of models) {
      const deployment = this.reconciler.deployment(model);
      const status =
        board && deployment && this.#init.calls.waitingFor(model) > 0
          ? await board.read(model).catch(() => undefined)
          : undefined;
      const failure =
        status && deployment ? startFailureOf(status, deployment.profile, this.#init.clock.now()) : undefined;
      const known = this.#published.has(model);
      if (failure === undefined) {
        this.#published.delete(model);
        continue;
      }
      this.#published.set(model, failure);
      if (!known) this.#init.calls.wakeAll(model);
    }
  }
}
