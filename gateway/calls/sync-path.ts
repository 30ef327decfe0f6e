/**
 * A sync call from its placement to its answer's end: the walk (placement.ts), then the relay of
 * whichever runner committed (relay.ts), with the answer watched for its timings and usage
 * (answers.ts). A call no runner took is answered by the responder.
 */
import type { ServerResponse } from 'node:http';
import type { Clock } from '../../placer/kernel/index.ts';
import type { KeyCall } from '../access/index.ts';
import type { CallResult, GatewayCall } from '../http/index.ts';
import { GEN_AI_OPERATIONS, traceOfResponse } from '../observe/index.ts';
import type { AnswerRecords } from './answers.ts';
import type { CacheChecks } from './cache-checks.ts';
import type { CallLedger } from './ledger.ts';
import { withColdStart } from './placement.ts';
import type { CallPlacement, Turn } from './placement.ts';
import { answerType, relay } from './relay.ts';
import type { CallResponder } from './responder.ts';

/** What the sync path works with, all the gateway's own. */
export interface SyncPathParts {
  readonly placement: CallPlacement;
  readonly responder: CallResponder;
  readonly cacheChecks: CacheChecks;
  readonly answers: AnswerRecords;
  readonly clock: Clock;
}

/** Places and relays sync calls; one per gateway. */
export class SyncPath {
  readonly #placement: CallPlacement;
  readonly #responder: CallResponder;
  readonly #cacheChecks: CacheChecks;
  readonly #answers: AnswerRecords;
  readonly #clock: Clock;

  constructor(parts: SyncPathParts) {
    this.#placement = parts.placement;
    this.#responder = parts.responder;
    this.#cacheChecks = parts.cacheChecks;
    this.#answers = parts.answers;
    this.#clock = parts.clock;
  }

  /** The walk, then the relay of whichever runner committed; resolves with how the call ended. */
  async run(
    call: GatewayCall,
    out: ServerResponse,
    callHeaders: Record<string, string>,
    turn: Turn,
    keyCall: KeyCall | undefined,
    stripUsage: boolean,
    ledger: CallLedger,
  ): Promise<CallResult> {
    ledger.queued();
    const placed = await this.#placement.place(call, turn);
    const headers = withColdStart(callHeaders, placed.coldStartMs);
    if (placed.kind === 'ended') {
      ledger.done();
      if (placed.refusal) this.#responder.answer(out, placed.refusal, headers);
      return placed.result;
    }
    ledger.running();
    this.#cacheChecks.placed(call, placed.runner.id);
    const type = answerType(placed.response.headers);
    const relaying = relay(placed.response, out, headers, placed.runner, call.abort, { type, stripUsage });
    // Beside the relay's own reader, attached in the same tick: the answer's end holds its usage.
    keyCall?.watch(placed.response.body);
    const watch = call.route === 'invoke' ? undefined : this.#answers.watch(call, placed.response, type);
    const relayed = await relaying;
    const reading = watch?.finish();
    // A client that left is not the relay's failure.
    traceOfResponse(out)?.relayEnded(
      relayed.status,
      relayed.outcome === 'cancelled' ? undefined : relayed.error,
      reading?.usage,
    );
    ledger.done();
    const totalMs = this.#clock.now() - call.startedAt;
    const { outcome, status, execMs, error } = relayed;
    if (reading) {
      this.#answers.answered(call, {
        model: call.fn,
        runner: placed.runner.id,
        operation: GEN_AI_OPERATIONS[call.route] ?? 'chat',
        durationMs: totalMs,
        queueWaitMs: placed.queuedMs,
        ok: outcome === 'completed' && status >= 200 && status < 300,
        reading,
      });
    }
    return {
      outcome,
      status,
      execMs,
      ...(error ? { error } : {}),
      runner: placed.runner.id,
      totalMs,
      latencyMs: totalMs - (execMs ?? 0),
    };
  }
}
