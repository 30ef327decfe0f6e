/**
 * What a call's answer, read in full, tells the gateway: its inference timings and usage (the
 * histograms and the stats window, inference.ts) and, when the engine reported them, its cached
 * tokens against those predicted (cache-checks.ts). A sync call's answer is watched while the
 * relay streams it; a detached call's is read whole from the store.
 */
import type { Clock } from '../../placer/kernel/index.ts';
import type { GatewayCall } from '../http/index.ts';
import type { RunnerResponse } from '../fleet/index.ts';
import type { CacheChecks } from './cache-checks.ts';
import { AnswerWatch } from './inference.ts';
import type { InferenceEnd, InferenceRecorder, Usage } from './inference.ts';
import type { AnswerType } from './relay.ts';

/** Records what answers read in full held; one per gateway. */
export class AnswerRecords {
  readonly #inference: InferenceRecorder;
  readonly #cacheChecks: CacheChecks;
  readonly #clock: Clock;

  constructor(inference: InferenceRecorder, cacheChecks: CacheChecks, clock: Clock) {
    this.#inference = inference;
    this.#cacheChecks = cacheChecks;
    this.#clock = clock;
  }

  /**
   * Watches a committed runner's answer for its timings and usage, beside the relay's own reader
   * (attached in the same tick, so no chunk is missed).
   */
  watch(call: GatewayCall, response: RunnerResponse, type: AnswerType): AnswerWatch {
    const clock = this.#clock;
    const watch = new AnswerWatch({
      sse: type.sse,
      json: type.json,
      startedAt: call.startedAt,
      now: () => clock.now(),
    });
    response.body.on('data', (chunk: Buffer) => watch.chunk(chunk));
    return watch;
  }

  /** Reads a detached call's stored answer, whole: its duration and usage, no first token. */
  readWhole(call: GatewayCall, answer: Buffer | undefined): AnswerWatch {
    const clock = this.#clock;
    const watch = new AnswerWatch({ sse: false, json: true, startedAt: call.startedAt, now: () => clock.now() });
    if (answer) watch.chunk(answer);
    return watch;
  }

  /** Records one call's end; an answer relayed in full with a 2xx also hands on the engine's cached tokens. */
  answered(call: GatewayCall, end: InferenceEnd): void {
    this.#inference.record(end);
    if (end.ok) this.#cacheReported(call, end.runner, end.reading.usage);
  }

  /** Hands the engine's cached tokens of an answer relayed in full to the cache checks, when it reported them. */
  #cacheReported(call: GatewayCall, runner: string, usage: Usage | undefined): void {
    if (usage?.cached === undefined) return;
    const { cached, input } = usage;
    this.#cacheChecks.reported(call, runner, {
      cachedTokens: cached,
      ...(input === undefined ? {} : { promptTokens: input }),
    });
  }
}
