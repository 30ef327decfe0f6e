/**
 * One detached call, from its client's request to its end: the one object the agent
 * (gateway/calls/detached-path.ts) hands a detached call to, in one call. Its two halves live beside it:
 * the client's side (detached-flow.ts: the intake before placement and the answer after) and
 * the background side (detached.ts: the run on a runner, its record and its callback).
 *
 * intake (callback and Idempotency-Key checks, the store's admission, the record `queued`) →
 * placement (the call path's own, under the detached deadline; the agent's step) → run (the
 * runner's commit, the record `running`, its answer read in the background) → answer (202, or
 * the result within `Prefer: wait=N`) → the run's end.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { SluiceError } from '../../placer/kernel/index.ts';
import { CALL_ID_HEADER } from '../../runner/protocol/index.ts';
import type { GatewayCall } from '../http/index.ts';
import type { RunnerResponse } from '../fleet/index.ts';
import { DetachedFlow } from './detached-flow.ts';
import type { DetachedFlowSettings, DetachedReply, DetachedSignal } from './detached-flow.ts';
import type { DetachedOutcome } from './detached.ts';

/** Where a detached call placed: on a runner, or nowhere (its client answered already, unless it left). */
export type DetachedPlacement =
  | { kind: 'placed'; response: RunnerResponse; runner: string }
  | { kind: 'ended'; error: Error | undefined };

/** What the agent does for a detached call, at the orchestrator's asking. */
export interface DetachedSteps {
  /**
   * Places the call and answers a client it did not place (the call path's responder);
   * `headers` are what the call's answer carries from then on (a cold start's header among them).
   */
  place(): Promise<DetachedPlacement & { headers: Record<string, string> }>;
  /** Answers a refusal found before placement (the call path's responder). */
  refuse(error: SluiceError, headers: Record<string, string>): void;
  /** A runner committed and the call runs: counted as running until it ends. */
  running(): void;
}

/** A detached call's request: its headers, where it is answered, and what it runs on. */
export interface DetachedRequest {
  readonly headers: IncomingHttpHeaders;
  readonly reply: DetachedReply;
  /** The call's signal: the client's until a runner commits, the gateway's after. */
  readonly signal: DetachedSignal;
  /** The engine was asked for a usage chunk the client did not ask for: kept out of the result. */
  readonly stripUsage: boolean;
  /** Reserves room for the call's result among its client key's stored bytes, when it has limits. */
  readonly room?: (bytes: number, until: number) => Promise<SluiceError | undefined>;
}

/** How a detached call ended, for the agent's counts. */
export type DetachedEnd =
  /** Refused before anything was recorded. */
  | { kind: 'refused'; error: SluiceError }
  /** An Idempotency-Key replay: the client got the first call's record or result. */
  | { kind: 'replayed' }
  /** No runner took it; its record ended so. */
  | { kind: 'unplaced' }
  /** It ran on `runner` to its end. */
  | { kind: 'ran'; runner: string; outcome: DetachedOutcome };

/** Runs detached calls for one gateway; see the file comment. */
export class DetachedRuns {
  readonly #settings: DetachedFlowSettings;
  readonly #flow: DetachedFlow;

  constructor(settings: DetachedFlowSettings) {
    this.#settings = settings;
    this.#flow = new DetachedFlow(settings);
  }

  /** Serves one detached call to its end; never rejects for a refusal, which `steps` answers. */
  async serve(call: GatewayCall, request: DetachedRequest, steps: DetachedSteps): Promise<DetachedEnd> {
    const { reply, signal } = request;
    const flow = this.#flow;
    const intake = await flow.prepare(call, request.headers, signal, request.room);
    if (intake.kind === 'refused') {
      steps.refuse(intake.error, reply.headers);
      return intake;
    }
    if (intake.kind === 'replay') {
      const { id } = intake.record;
      await flow.answer(intake.record, {
        ...reply,
        headers: { ...reply.headers, [CALL_ID_HEADER]: id, 'idempotent-replayed': 'true' },
      });
      return { kind: 'replayed' };
    }
    const placed = await steps.place();
    const answered: DetachedReply = { ...reply, headers: placed.headers };
    if (placed.kind === 'ended') {
      await flow.unplaced(intake.record, signal, placed.error, answered);
      return { kind: 'unplaced' };
    }
    const run = await this.#settings.calls.run(intake.record, call, placed.response, placed.runner, signal, {
      stripUsage: request.stripUsage,
    });
    steps.running();
    await flow.answer(run.record, answered, run.done);
    return { kind: 'ran', runner: placed.runner, outcome: await run.done };
  }
}
