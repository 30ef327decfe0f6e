/**
 * The agent's side of a detached call: the call is handed whole to the detached room's
 * orchestrator (`DetachedRuns.serve`), which asks the agent to place it (placement.ts) and to
 * answer refusals (the responder); once it ends, the agent settles a client key's tokens and
 * stored bytes, records the stored answer's timings (answers.ts) and says how the call ended.
 */
import type { IncomingMessage } from 'node:http';
import type { KeyCall } from '../access/index.ts';
import { detachedResult } from '../detached/index.ts';
import type { DetachedReply, DetachedRuns, DetachedSignal } from '../detached/index.ts';
import type { CallResult, GatewayCall } from '../http/index.ts';
import { GEN_AI_OPERATIONS, traceOfResponse } from '../observe/index.ts';
import { RECORD_OVERHEAD_BYTES } from '../store/index.ts';
import type { CallLedger } from './ledger.ts';
import { endedResult, withColdStart } from './placement.ts';
import type { Turn } from './placement.ts';
import type { SyncPathParts } from './sync-path.ts';

/** What the detached path works with, all the gateway's own: the sync path's, and two more. */
export interface DetachedPathParts extends SyncPathParts {
  readonly runs: DetachedRuns;
  /** How long a stored result is kept, in ms: a client key's stored bytes count until then. */
  readonly resultTtl: number;
}

/** Hands detached calls to their orchestrator and counts how they ended; one per gateway. */
export class DetachedPath {
  readonly #parts: DetachedPathParts;

  constructor(parts: DetachedPathParts) {
    this.#parts = parts;
  }

  /**
   * Serves a detached call through its orchestrator: the agent places the call and answers
   * refusals when asked, then counts how the call ended.
   */
  async run(
    call: GatewayCall,
    incoming: IncomingMessage,
    reply: DetachedReply,
    signal: DetachedSignal,
    turn: Turn,
    keyCall: KeyCall | undefined,
    stripUsage: boolean,
    ledger: CallLedger,
  ): Promise<CallResult> {
    const { runs, placement, responder, cacheChecks, answers, clock } = this.#parts;
    let unplaced: CallResult | undefined;
    let queuedMs = 0;
    const room = keyCall ? (bytes: number, until: number) => keyCall.storedRoom(call.id, bytes, until) : undefined;
    const end = await runs.serve(
      call,
      { headers: incoming.headers, reply, signal, stripUsage, ...(room ? { room } : {}) },
      {
        refuse: (error, headers) => responder.refuse(reply.out, error, headers),
        place: async () => {
          ledger.queued();
          const placed = await placement.place(call, turn);
          ledger.done();
          const headers = withColdStart(reply.headers, placed.coldStartMs);
          if (placed.kind === 'placed') {
            queuedMs = placed.queuedMs;
            cacheChecks.placed(call, placed.runner.id);
            return { kind: 'placed', response: placed.response, runner: placed.runner.id, headers };
          }
          if (placed.refusal) responder.answer(reply.out, placed.refusal, headers);
          unplaced = placed.result;
          return { kind: 'ended', error: placed.result.error, headers };
        },
        running: () => ledger.running(),
      },
    );
    if (end.kind === 'refused') return endedResult(call, clock, 'errors', end.error.status, end.error);
    if (end.kind === 'replayed') return endedResult(call, clock, 'completed', 202);
    if (end.kind === 'unplaced') return unplaced!;
    const { outcome, runner } = end;
    traceOfResponse(reply.out)?.relayEnded(outcome.result?.status ?? 0);
    ledger.done();
    if (keyCall && outcome.result) {
      // The stored result: its usage settles the tokens, its bytes count until it expires.
      keyCall.answered(outcome.answer ?? outcome.result.body);
      keyCall.stored(
        call.id,
        RECORD_OVERHEAD_BYTES + outcome.result.body.length,
        (outcome.record.completedAt ?? clock.now()) + this.#parts.resultTtl,
      );
    }
    if (call.route !== 'invoke') {
      const answer = outcome.result ? (outcome.answer ?? outcome.result.body) : undefined;
      answers.answered(call, {
        model: call.fn,
        runner,
        operation: GEN_AI_OPERATIONS[call.route] ?? 'chat',
        durationMs: outcome.totalMs,
        queueWaitMs: queuedMs,
        ok:
          outcome.record.status === 'succeeded' &&
          outcome.result !== undefined &&
          outcome.result.status >= 200 &&
          outcome.result.status < 300,
        reading: answers.readWhole(call, answer).finish(),
      });
    }
    return detachedResult(outcome, runner);
  }
}
