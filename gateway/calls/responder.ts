/**
 * The one writer of the call path's refusals: every answer to a call that no runner gives
 * (status, code, message and headers) is written here, whoever found the reason (the front
 * gate, admission, a key's limits, placement, the detached flow). A refusal is counted by its
 * code in `rejected` and marked on the call's trace; a call that failed once it was placed (no
 * runner in time, a broken placer) is answered alike and counted with its outcome instead.
 */
import type { ServerResponse } from 'node:http';
import type { SluiceError } from '../../placer/kernel/index.ts';
import { sendError } from '../errors.ts';
import { traceOfResponse } from '../observe/index.ts';
import type { GatewayMetrics } from '../observe/index.ts';

/**
 * How a call that no runner answered is answered: `refused`, counted by code in `rejected`;
 * `failed`, counted in `failed` with the call's outcome. `headers` and `details` (fields beside
 * the error's own in the body) are the reason's own.
 */
export interface Refusal {
  readonly kind: 'refused' | 'failed';
  readonly error: SluiceError;
  readonly headers?: Readonly<Record<string, string>>;
  readonly details?: Readonly<Record<string, unknown>>;
}

/** Writes the call path's refusals for one gateway; see the file comment. */
export class CallResponder {
  readonly #metrics: GatewayMetrics;
  /** Errors answered as refusals, counted in `rejected` already: not counted again in `failed`. */
  readonly #refused = new WeakSet<Error>();

  constructor(metrics: GatewayMetrics) {
    this.#metrics = metrics;
  }

  /** Answers `error` on `out` with `headers` added, and counts it as a refusal. */
  refuse(out: ServerResponse, error: SluiceError, headers: Readonly<Record<string, string>> = {}): void {
    this.#metrics.rejected.add(1, error.code);
    traceOfResponse(out)?.fail(error);
    this.#refused.add(error);
    sendError(out, error, headers as Record<string, string>);
  }

  /** Answers `refusal` on `out`, with the call's `headers` before the reason's own. */
  answer(out: ServerResponse, refusal: Refusal, headers: Readonly<Record<string, string>>): void {
    const all = refusal.headers ? { ...headers, ...refusal.headers } : headers;
    if (refusal.kind === 'refused') return this.refuse(out, refusal.error, all);
    sendError(
      out,
      refusal.error,
      all as Record<string, string>,
      refusal.details as Record<string, unknown> | undefined,
    );
  }

  /** True when `error` was answered as a refusal (and so is counted in `rejected`, not `failed`). */
  refused(error: Error): boolean {
    return this.#refused.has(error);
  }
}
