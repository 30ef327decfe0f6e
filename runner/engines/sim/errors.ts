/**
 * Coded errors of the simulated engine. Callers branch on `code` or the class, never on the
 * message. The codes are stable and prefixed `SIM_`.
 */
import { SluiceError } from '../../../placer/kernel/index.ts';

/** A {@link SimEngineOptions} field is out of range; raised at construction, never per request. */
export class SimOptionError extends SluiceError {
  /** The option that was refused, e.g. `maxNumSeqs`. */
  readonly option: string;
  constructor(option: string, message: string) {
    super('SIM_INVALID_OPTION', 500, 'server_error', message);
    this.option = option;
  }
}

/** The waiting queue was full, so the request was refused before it took a slot. */
export class SimQueueFullError extends SluiceError {
  constructor(maxQueue: number) {
    // OpenAI's error.type has no rate-limit member in sluice's union; the HTTP answer carries its own body.
    super('SIM_QUEUE_FULL', 429, 'service_unavailable_error', `waiting queue is full (maxQueue ${maxQueue})`);
  }
}

/** The request's signal fired while it waited for a slot, so it left the queue without running. */
export class SimAbortedError extends SluiceError {
  constructor() {
    // 499 is nginx's "client closed request": logged, never sent, since nobody is listening.
    super('SIM_ABORTED', 499, 'invalid_request_error', 'request aborted before it was admitted');
  }
}
