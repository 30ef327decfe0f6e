/**
 * How each call ended, counted once it has: its outcome, a failure's code, its execution time and
 * its latency net of that time, its span marked failed when it was; then the after-call
 * listeners, each of which may fail without stopping the others.
 */
import type { Logger, SluiceError } from '../../placer/kernel/index.ts';
import type { CallResult, GatewayCall } from '../http/index.ts';
import type { CallTrace, GatewayMetrics } from '../observe/index.ts';
import type { GatewayConfig } from '../options.ts';
import type { CallResponder } from './responder.ts';

/** Counts how calls ended and runs the after-call listeners; one per gateway. */
export class CallOutcomes {
  readonly #metrics: GatewayMetrics;
  readonly #responder: CallResponder;
  readonly #logger: Logger;
  readonly #listeners: GatewayConfig['listeners'];

  constructor(metrics: GatewayMetrics, responder: CallResponder, config: Pick<GatewayConfig, 'logger' | 'listeners'>) {
    this.#metrics = metrics;
    this.#responder = responder;
    this.#logger = config.logger;
    this.#listeners = config.listeners;
  }

  /** Counts how the call ended, its latency net of execution time, and marks its trace failed when it was. */
  record(call: GatewayCall, result: CallResult, callTrace: CallTrace | undefined): void {
    const m = this.#metrics;
    m.outcomes[result.outcome].add(1);
    if (
      result.error &&
      result.outcome !== 'completed' &&
      result.outcome !== 'cancelled' &&
      !this.#responder.refused(result.error)
    ) {
      m.failed.add(1, (result.error as Partial<SluiceError>).code ?? 'GW_INTERNAL');
    }
    if (result.execMs !== undefined) m.execTime.record(result.execMs / 1000, m.outcomeAttributes[result.outcome]);
    if (result.execMs !== undefined && result.execMs > result.totalMs) {
      // Clocks disagree (or a runner lies): a negative latency would poison the histogram.
      this.#log(call).warn('runner reported more execution time than the call took', {
        execMs: result.execMs,
        totalMs: result.totalMs,
        runner: result.runner,
      });
    } else {
      m.latency.record(result.latencyMs / 1000, m.outcomeAttributes[result.outcome]);
    }
    if (result.error && result.outcome !== 'cancelled') {
      callTrace?.fail(result.error);
      this.#log(call).warn('call failed', { outcome: result.outcome, runner: result.runner, error: result.error });
    }
  }

  /** Runs the after-call listeners; one that throws is logged and the others still run. */
  async afterCall(call: GatewayCall, result: CallResult): Promise<void> {
    for (const listener of this.#listeners) {
      try {
        await listener.afterCall?.(call, result);
      } catch (error) {
        this.#log(call).warn('after-call hook failed', { error: error as Error });
      }
    }
  }

  /** The call's logger, built only when something is logged: most calls log nothing. */
  #log(call: GatewayCall): Logger {
    return this.#logger.child({ call: call.id, fn: call.fn });
  }
}
