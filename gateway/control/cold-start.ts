/**
 * Cold starts (the activator): a call for a deployed model that no runner serves now
 * waits in the wait queue while a replica starts, instead of failing at once. The gateway's
 * reconciler answers the questions placement asks ({@link ColdStarts}); this file holds that
 * contract and placement's guarded use of it ({@link ColdStartWaits}). The calls waiting for a
 * replica are counted by the wait queue alone (calls/wait-queue.ts, `awaitReplica`).
 *
 * The calls themselves wait in their model's line of the queue like any other (calls/placement.ts);
 * see docs/placers.md, "Cold starts".
 */
import type { Logger } from '../../placer/kernel/index.ts';

/**
 * The response header on a call that waited for a replica: how long it waited, in whole ms,
 * from its first wait with no runner serving its model to its placement (or its 503).
 */
export const COLD_START_HEADER = 'sluice-cold-start';

/** Why a deployed model cannot get a replica now; see {@link ColdStarts.failed}. */
export interface StartFailure {
  /** The last failed start's reason, fit for a client: one line, no profile args or env values. */
  readonly reason: string;
  /** Until the next start attempt, in ms; absent when none is due (the deployment is blocked). */
  readonly retryInMs?: number;
}

/** What placement asks of whoever starts replicas (the gateway's reconciler). */
export interface ColdStarts {
  /**
   * True when a deployment exists for `model`: a call for it may wait for a replica. Asked only
   * for calls that found no runner serving their model, never on the path of an ordinary call.
   */
  deployed(model: string): boolean;
  /**
   * Asks for a replica of `model` now (an immediate reconcile pass), rather than at the next
   * period. Called once per burst of calls waiting for one ({@link ColdStartWaits.begin}), after
   * the first of them joined the queue, so a pass run at once counts it.
   */
  wake(model: string): void;
  /**
   * Why `model` cannot get a replica now: its last start failed and nothing else of it is
   * starting or ready. Undefined while a replica may still come. A call waiting for a replica
   * asks before each wait, and is answered 503 GW_DEPLOYMENT_FAILED at once rather than wait out
   * its deadline. Absent: calls wait until their deadline, as before the question existed.
   */
  failed?(model: string): StartFailure | undefined;
}

/** A call waiting in the queue, as {@link ColdStartWaits.begin} sees it (the queue's Waiter). */
export interface ReplicaWaiter {
  readonly key: { readonly model: string };
  /** Counts the call among those waiting for a replica of its model; returns how many do now. */
  awaitReplica(): number;
}

/**
 * Placement's side of cold starts on one gateway: the {@link ColdStarts} questions, guarded, and
 * the first call of a burst waiting for a replica (the queue's count of them going from 0 to 1,
 * counted there alone) asking for one; the others, and the same call's later waits, do not.
 * What the {@link ColdStarts} throws is logged and read as "not deployed" or ignored: a broken
 * reconciler must leave calls as they would be on a gateway with no deployments.
 */
export class ColdStartWaits {
  readonly #coldStarts: ColdStarts;
  readonly #logger: Logger;

  constructor(coldStarts: ColdStarts, logger: Logger) {
    this.#coldStarts = coldStarts;
    this.#logger = logger;
  }

  /** True when `model` is deployed; false when it is not, or the question threw. */
  deployed(model: string): boolean {
    try {
      return this.#coldStarts.deployed(model) === true;
    } catch (error) {
      this.#logger.warn('cold starts: deployed() failed', { model, error: error as Error });
      return false;
    }
  }

  /** Why `model` cannot get a replica now ({@link ColdStarts.failed}); undefined too when the question threw. */
  failed(model: string): StartFailure | undefined {
    try {
      return this.#coldStarts.failed?.(model);
    } catch (error) {
      this.#logger.warn('cold starts: failed() failed', { model, error: error as Error });
      return undefined;
    }
  }

  /** `waiter` starts waiting for a replica of its model; the first of a burst asks for one. */
  begin(waiter: ReplicaWaiter): void {
    if (waiter.awaitReplica() > 1) return;
    const { model } = waiter.key;
    try {
      this.#coldStarts.wake(model);
    } catch (error) {
      // The reconciler's period still comes; the call waits within its deadline either way.
      this.#logger.warn('cold starts: wake() failed', { model, error: error as Error });
    }
  }
}
