/**
 * Coded errors of the simulated engine. Callers branch on `code` or the class, never on the
 * message. The codes are stable and prefixed `SIM_`.
 */
import { errorClass } from '../../../placer/kernel/index.ts';

/** A {@link SimEngineOptions} field is out of range; raised at construction, never per request. */
export class SimOptionError extends errorClass('SIM_INVALID_OPTION', 500, 'server_error') {
  /** @param option the option that was refused, e.g. `maxNumSeqs` */
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The waiting queue was full, so the request was refused before it took a slot. OpenAI's
 * error.type has no rate-limit member in sluice's union; the HTTP answer carries its own body.
 */
export class SimQueueFullError extends errorClass('SIM_QUEUE_FULL', 429, 'service_unavailable_error') {
  constructor(maxQueue: number) {
    super(`waiting queue is full (maxQueue ${maxQueue})`);
  }
}

/**
 * The request's signal fired while it waited for a slot, so it left the queue without running.
 * Its status, 499, is nginx's "client closed request": logged, never sent, since nobody listens.
 */
export class SimAbortedError extends errorClass('SIM_ABORTED', 499, 'invalid_request_error') {
  constructor() {
    super('request aborted before it was admitted');
  }
}
