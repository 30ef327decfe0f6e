/**
 * Placing one call: the placer's walk over the pool, the wait in the queue between passes that
 * found every runner busy, and the answer a call gets when no runner took it. The agent
 * (agent.ts) runs a call's lifecycle around it; sync and detached calls are placed alike.
 *
 * A call that finds every eligible runner busy waits its turn in the wait queue
 * (wait-queue.ts): its place is its model, its priority class and its flow ({@link turnOf}),
 * and it is woken when capacity appears, not on a fixed pause (see docs/placers.md).
 *
 * A call for a deployed model that no runner serves now (a cold start, control/cold-start.ts) waits
 * in the same line: the first of a burst asks the reconciler for a replica, and the runner that
 * becomes ready with it wakes them as any freed capacity does.
 */
import type { IncomingMessage } from 'node:http';
import { SluiceError, formatMs } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { PlacerAbortedError, PlacerTimeoutError } from '../../placer/errors.ts';
import type { Runner } from '../../placer/types.ts';
import { placeCall } from '../../placer/walk.ts';
import { clientKey, FLOW_HEADER, PRIORITY_HEADER, PRIORITIES, isPriority } from '../http/index.ts';
import type { GatewayCall, CallResult, Priority } from '../http/index.ts';
import { COLD_START_HEADER, ColdStartWaits } from '../control/index.ts';
import type { ColdStarts } from '../control/index.ts';
import {
  CallTimeoutError,
  DeploymentFailedError,
  InternalError,
  InvalidPriorityError,
  QueueFullError,
} from '../errors.ts';
import type { GatewayPool, RunnerResponse } from '../fleet/index.ts';
import { traceOfCall } from '../observe/index.ts';
import type { GatewayMetrics } from '../observe/index.ts';
import type { GatewayConfig } from '../options.ts';
import { WaitQueue } from './wait-queue.ts';
import type { Waiter } from './wait-queue.ts';
import type { Refusal } from './responder.ts';

/**
 * How the placement walk ended: a runner committed (`queuedMs`: from the call's first wait in the
 * queue to the commit, 0 when it never waited), or none did and the call ended: `result` says
 * how, `refusal` what its client is to be answered (none when it left). `coldStartMs`, on both,
 * is how long the call waited for a replica of its model (a cold start), when it did: its answer
 * carries it as {@link COLD_START_HEADER}. Placement never writes to the client.
 */
export type Placement =
  | {
      kind: 'placed';
      response: RunnerResponse;
      runner: Runner<RunnerResponse>;
      queuedMs: number;
      coldStartMs: number | undefined;
    }
  | { kind: 'ended'; result: CallResult; refusal: Refusal | undefined; coldStartMs: number | undefined };

/** Where a call waits when every runner is busy: its priority class and its flow. */
export interface Turn {
  readonly priority: Priority;
  readonly flow: string;
}

/** Longest flow key kept from a header or a body's `user`; longer ones are cut. */
const MAX_FLOW_LENGTH = 256;

/**
 * A call's turn: its priority class (the `sluice-priority` header, else `defaultPriority`) and
 * flow (`key:` and the id of the caller's client key when it has one; else the `sluice-flow`
 * header, else the body's `user`, else the client address).
 * @throws InvalidPriorityError when the header names no class.
 */
export function turnOf(
  incoming: IncomingMessage,
  user: string | undefined,
  defaultPriority: Priority,
  client?: string,
): Turn {
  const asked = first(incoming.headers[PRIORITY_HEADER])?.trim().toLowerCase();
  if (asked !== undefined && !isPriority(asked)) {
    throw new InvalidPriorityError(
      `${PRIORITY_HEADER} must be one of ${PRIORITIES.join(', ')}, got ${JSON.stringify(asked.slice(0, 64))}`,
    );
  }
  // A client key is its holder's one flow: a header or a body field it chooses cannot split its
  // burst into many flows that would each get a turn.
  if (client !== undefined) return { priority: asked ?? defaultPriority, flow: `key:${client}` };
  const named = first(incoming.headers[FLOW_HEADER])?.trim() || user;
  const flow = named ? named.slice(0, MAX_FLOW_LENGTH) : clientKey(incoming.socket?.remoteAddress);
  return { priority: asked ?? defaultPriority, flow };
}

/** A wait queue with the gateway's bounds and fallback. */
export function waitQueueFor(config: GatewayConfig): WaitQueue {
  const { maxQueued, maxQueuedPerFlow, maxQueuedPerModel, placerConfig, clock } = config;
  return new WaitQueue({
    maxQueued,
    maxQueuedPerFlow,
    maxQueuedPerModel,
    retryAllDelay: placerConfig.retryAllDelay,
    clock,
  });
}

/** How a call that never reached a runner ended, timed from its startedAt on `clock`. */
export function endedResult(
  call: GatewayCall,
  clock: Clock,
  outcome: CallResult['outcome'],
  status: number,
  error?: Error,
): CallResult {
  const totalMs = clock.now() - call.startedAt;
  return { outcome, status, totalMs, latencyMs: totalMs, ...(error ? { error } : {}) };
}

/** Places calls on one gateway's pool; one per agent. */
export class CallPlacement {
  readonly #config: GatewayConfig;
  readonly #pool: GatewayPool;
  readonly #queue: WaitQueue;
  readonly #metrics: GatewayMetrics;
  /** Calls waiting for a replica; undefined without a reconciler (config.coldStarts). */
  readonly #cold: ColdStartWaits | undefined;

  constructor(
    config: GatewayConfig,
    pool: GatewayPool,
    queue: WaitQueue,
    metrics: GatewayMetrics,
    coldStarts: ColdStarts | undefined,
  ) {
    this.#config = config;
    this.#pool = pool;
    this.#queue = queue;
    this.#metrics = metrics;
    this.#cold = coldStarts ? new ColdStartWaits(coldStarts, config.logger) : undefined;
  }

  /**
   * True when a call for `model` may wait for a replica: a reconciler was given and the model is
   * deployed. The agent asks it only of a model no runner serves, before refusing it as unknown.
   */
  awaitsReplica(model: string): boolean {
    return this.#cold?.deployed(model) ?? false;
  }

  /**
   * The placement walk with its metrics. Resolves with the runner that committed, or, when none
   * did, with how the call ended and what its client is to be answered. Between passes that
   * found every runner busy the call waits its turn in the queue, not a fixed pause.
   */
  async place(call: GatewayCall, turn: Turn): Promise<Placement> {
    const m = this.#metrics;
    const { clock, placerConfig } = this.#config;
    const queue = this.#queue;
    // The pool's candidate key: calls for one model share one line.
    const model = call.route === 'invoke' ? '' : call.fn;
    const waiter = queue.waiter({ model, priority: turn.priority, flow: turn.flow }, call.abort, call.placerDeadline);
    const placer = this.#config.placer;
    // When the call began to wait for a replica of its model; NaN while it has not.
    let coldSince = Number.NaN;
    const waitForCapacity = async (): Promise<void> => {
      // Asked once, at the first wait: where the call would rather go, for a slot freed there.
      // Only a hint: a pool or a placer failing here is the walk's to meet, not the wait's.
      if (!waiter.joined && placer.preferred) {
        try {
          waiter.prefers = placer.preferred(call, await this.#pool.runners(call));
        } catch {
          // Without a preference: the call waits its turn at the head like any other.
        }
      }
      // Without an await when the answer is at hand (always, for the gateway's own pool): the
      // call joins its line in the tick its pass ended.
      const noReplica = this.#noReplica(call, model);
      const cold = noReplica === true || (noReplica !== false && (await noReplica));
      // A model whose start failed, with nothing else starting, gets no replica by waiting: the
      // call is answered now (and woken to learn it when a start fails while it waits).
      if (cold) this.#failedStart(model);
      return this.#waitTurn(
        waiter,
        call,
        cold && Number.isNaN(coldSince) ? () => void (coldSince = clock.now()) : undefined,
      );
    };
    // The last answer of each runner offered the call, to explain a 503.
    const offers = new Map<string, 'busy' | 'error'>();
    const callTrace = traceOfCall(call);
    callTrace?.placing();
    try {
      // Calls already waiting for this model came first: a new one lines up behind them rather
      // than take the slot freed for their head. An abort or the deadline is the walk's to report.
      if (queue.aheadFor(model) > 0) {
        await waitForCapacity().catch((error: unknown) => {
          if (error instanceof QueueFullError || error instanceof DeploymentFailedError) throw error;
        });
      }
      const placement = await placeCall(call, this.#pool, placer, {
        retryAllDelay: placerConfig.retryAllDelay,
        clock,
        onRetry: (runner, reason, error) => {
          m.placerRetries.add(1, reason);
          offers.set(runner.id, reason);
          callTrace?.offered(runner.id, reason, error);
        },
        waitForCapacity,
        abort: call.abort,
      });
      m.placerAttempts.record(placement.attempts);
      callTrace?.placementEnded({ runner: placement.runner.id, attempts: placement.attempts });
      // A waiter placed: the room it found may hold more, so the next in line walks too (one
      // that finds nothing goes back to the head); the fallback's wakes depend on it.
      if (waiter.joined) queue.wake(1, [model]);
      const queuedMs = waiter.joined ? clock.now() - waiter.joinedAt : 0;
      return {
        kind: 'placed',
        response: placement.value,
        runner: placement.runner,
        queuedMs,
        coldStartMs: coldMs(clock, coldSince),
      };
    } catch (error) {
      m.placerAttempts.record((error as { attempts?: number }).attempts ?? 0);
      callTrace?.placementEnded({ error: error as Error, attempts: (error as { attempts?: number }).attempts ?? 0 });
      return this.#unplaced(call, error as Error, offers, coldMs(clock, coldSince));
    } finally {
      if (waiter.joined) m.queueTime.record((clock.now() - waiter.joinedAt) / 1000, { priority: turn.priority });
      if (!Number.isNaN(coldSince)) m.coldStartWait.record((clock.now() - coldSince) / 1000, m.modelAttributes(model));
      // Out of the queue's counts, that of the calls waiting for a replica included.
      waiter.leave();
    }
  }

  /**
   * True when the call must wait for a replica: cold starts are on, no runner serves its model
   * now (the pool lists none for it), and the model is deployed. Only a call whose pass placed
   * nothing asks, and the reconciler is asked only when the pool has no runner for the model.
   */
  #noReplica(call: GatewayCall, model: string): boolean | Promise<boolean> {
    const cold = this.#cold;
    if (cold === undefined || model === '') return false;
    const none = (runners: readonly unknown[]): boolean => runners.length === 0 && cold.deployed(model);
    // A pool failing here is the walk's to meet at its next pass, as with the preference above.
    try {
      const runners = this.#pool.runners(call);
      return runners instanceof Promise ? runners.then(none, () => false) : none(runners);
    } catch {
      return false;
    }
  }

  /**
   * Throws the 503 for a call with no replica to wait for: `model`'s last start failed and
   * nothing else of it is starting or ready. Retry-After is the time until the next attempt.
   * @throws DeploymentFailedError
   */
  #failedStart(model: string): void {
    const failure = this.#cold!.failed(model);
    if (failure === undefined) return;
    const next = failure.retryInMs !== undefined;
    const seconds = next ? Math.max(1, Math.ceil(failure.retryInMs! / 1000)) : this.#config.retryAfter;
    throw new DeploymentFailedError(model, failure.reason, seconds, next);
  }

  /**
   * One wait in the queue, for the walk's waitForCapacity: resolves when woken or at the
   * deadline (the walk then ends the call), rejects when the call aborted or the queue is full.
   */
  async #waitTurn(waiter: Waiter, call: GatewayCall, cold: (() => void) | undefined): Promise<void> {
    const m = this.#metrics;
    const { model } = waiter.key;
    const attributes = { model, priority: waiter.key.priority };
    m.queueDepth.add(1, attributes);
    const waiting = waiter.wait();
    if (waiter.state === 'queued') traceOfCall(call)?.queued(waiter.key.priority);
    // A call with no replica to go to that is now in its line (not refused for a full queue, not
    // at its deadline already) waits for one: the reconciler is asked after it joined the line,
    // so a pass run at once counts it. The call's leaving the queue (place's finally) ends its count.
    if (cold && waiter.state === 'queued') {
      cold();
      this.#cold!.begin(waiter);
      m.coldStartCalls.add(1, model);
    }
    const end = await waiting;
    m.queueDepth.add(-1, attributes);
    if (typeof end === 'object') {
      m.queueRefused.add(1, { scope: end.scope });
      throw new QueueFullError(end.scope, end.limit, this.#config.retryAfter);
    }
    if (end === 'aborted') throw call.abort.reason ?? new Error('the call was aborted');
  }

  /** How a call no runner took (or whose committed runner failed before answering) ended, and its answer. */
  #unplaced(
    call: GatewayCall,
    error: Error,
    offers: ReadonlyMap<string, 'busy' | 'error'>,
    coldStartMs: number | undefined,
  ): Placement {
    const { clock } = this.#config;
    const ended = (outcome: CallResult['outcome'], refusal: Refusal | undefined): Placement => ({
      kind: 'ended',
      result: endedResult(call, clock, outcome, refusal?.error.status ?? 0, refusal?.error ?? error),
      refusal,
      coldStartMs,
    });
    if (error instanceof PlacerAbortedError || call.abort.aborted) return ended('cancelled', undefined);
    // Refused at once rather than queued past the bound: counted with the other refusals.
    if (error instanceof QueueFullError) return ended('server_busy', { kind: 'refused', error });
    if (error instanceof DeploymentFailedError) return ended('errors', { kind: 'refused', error });
    if (error instanceof PlacerTimeoutError) {
      // A control plane should say why nothing ran: one reason per runner.
      const runners = this.#pool.explain?.(call, offers);
      const timeout = coldStartMs === undefined ? error : coldStartTimeout(error, call.fn, coldStartMs);
      const headers = { 'retry-after': String(this.#config.retryAfter) };
      return ended('server_busy', {
        kind: 'failed',
        error: timeout,
        headers,
        ...(runners ? { details: { runners } } : {}),
      });
    }
    if (!(error instanceof SluiceError))
      this.#config.logger.error('placement failed unexpectedly', { call: call.id, error });
    // A custom placer's or pool's own message may say more than a client should see.
    const failure = error instanceof SluiceError ? error : new InternalError({ cause: error });
    const outcome = failure instanceof CallTimeoutError ? 'timeouts' : 'errors';
    return {
      kind: 'ended',
      result: endedResult(call, clock, outcome, failure.status, error),
      refusal: { kind: 'failed', error: failure },
      coldStartMs,
    };
  }
}

/** The time since `coldSince`, when the call waited for a replica; undefined when it did not. */
function coldMs(clock: Clock, coldSince: number): number | undefined {
  return Number.isNaN(coldSince) ? undefined : clock.now() - coldSince;
}

/**
 * The deadline's answer for a call that waited for a replica: the same code and status, with a
 * message that says why no runner took it. It claims no start under way: a start that failed
 * with nothing else starting is answered at once with GW_DEPLOYMENT_FAILED instead.
 */
function coldStartTimeout(error: PlacerTimeoutError, model: string, waited: number): PlacerTimeoutError {
  return new PlacerTimeoutError(
    `${error.message}: model "${model}" had no ready replica, and none became ready in time (a cold start, waited for ${formatMs(waited)}); retry shortly`,
    error.attempts,
  );
}

/** A header's first value. */
function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** `headers` with {@link COLD_START_HEADER} added when the call waited `coldStartMs` for a replica. */
export function withColdStart(
  headers: Record<string, string>,
  coldStartMs: number | undefined,
): Record<string, string> {
  return coldStartMs === undefined ? headers : { ...headers, [COLD_START_HEADER]: String(Math.round(coldStartMs)) };
}
