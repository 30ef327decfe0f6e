/**
 * The workload's traces at simulator scale, and the block structure of each call's prompt.
 *
 * `traceCalls` in workload.ts keeps its pending calls in one array sorted by insertion, which is
 * right for the live driver's tens of calls a second but quadratic at the thousands a second a
 * 1,000-runner fleet takes: every new session's first turn is inserted behind the later turns of
 * every session of the last few seconds. Here each turn number gets its own queue instead (turn k
 * of a later session is never due before turn k of an earlier one), and the earliest head is
 * taken. The random draws, and so the calls and their order, are exactly those of `traceCalls`
 * (spec/k6/vsim.spec.ts compares the two), so the live scenario and the simulator replay the same
 * trace.
 *
 * A prompt's cache blocks are named from the workload's structure rather than by hashing its
 * text: block i is the system prompt's own (shared by every session using it) while it lies
 * wholly inside the system message, and the session's otherwise. Every turn resends the history
 * before it, so block i of a session is the same block at every turn that has it. That is exact
 * for this workload and a fraction of the cost of SHA-256 over every prompt.
 */
import { BLOCK_SIZE } from '../../../runner/engines/sim/prefix-cache.ts';
import { seededRandom } from '../../../placer/random.ts';
import { promptTokensOf } from '../workload.ts';
import type { TraceCall, TraceOptions, WorkloadShape } from '../workload.ts';

/** The calls of a trace, in due order: the same calls, in the same order, as `traceCalls` gives. */
export function* simTraceCalls(shape: WorkloadShape, options: TraceOptions): Generator<TraceCall, void, undefined> {
  const sessionRate = options.rate / shape.turns / 1000;
  const lead = (shape.turns - 1) * shape.thinkMs;
  const random = seededRandom(options.seed);
  const maxCalls = options.maxCalls ?? Infinity;
  const pending = new TurnQueues(shape.turns);
  let emitted = 0;
  let session = (options.firstSession ?? (options.seed >>> 0) * 1_000_000) - 1;
  let start = -lead;
  while (emitted < maxCalls) {
    start += -Math.log(1 - random()) / sessionRate;
    // Sessions start in order, so nothing yet to start can be due before `start`.
    for (let next = pending.earliest(); next !== undefined && next.at <= start && emitted < maxCalls; next = pending.earliest()) {
      yield pending.take();
      emitted++;
    }
    if (start >= options.durationMs) break;
    const system = Math.floor(random() * shape.systemPrompts);
    session++;
    for (let turn = 1; turn <= shape.turns; turn++) {
      const at = start + (turn - 1) * shape.thinkMs;
      if (at >= 0 && at < options.durationMs) pending.add({ at, session, turn, system });
    }
  }
  while (pending.earliest() !== undefined && emitted < maxCalls) {
    yield pending.take();
    emitted++;
  }
}

/**
 * One first-in first-out queue per turn number. Calls of one turn arrive in due order, so the
 * earliest pending call is the earliest head; equal times go to the lower session, then the lower
 * turn, which is the order `traceCalls` inserts them in.
 */
class TurnQueues {
  readonly #queues: TraceCall[][];
  readonly #heads: number[];

  constructor(turns: number) {
    this.#queues = Array.from({ length: turns }, () => []);
    this.#heads = new Array<number>(turns).fill(0);
  }

  add(call: TraceCall): void {
    this.#queues[call.turn - 1]!.push(call);
  }

  /** The call {@link take} would return, without taking it. */
  earliest(): TraceCall | undefined {
    const i = this.#earliestQueue();
    return i < 0 ? undefined : this.#queues[i]![this.#heads[i]!];
  }

  /** Removes and returns the earliest call; only after {@link earliest} said there is one. */
  take(): TraceCall {
    const i = this.#earliestQueue();
    const queue = this.#queues[i]!;
    const call = queue[this.#heads[i]!]!;
    this.#heads[i]! += 1;
    // Drop the taken prefix now and then, so a long trace does not keep every call it emitted.
    if (this.#heads[i]! >= 4_096 && this.#heads[i]! * 2 >= queue.length) {
      queue.splice(0, this.#heads[i]!);
      this.#heads[i] = 0;
    }
    return call;
  }

  #earliestQueue(): number {
    let best = -1;
    let bestCall: TraceCall | undefined;
    for (let i = 0; i < this.#queues.length; i++) {
      const call = this.#queues[i]![this.#heads[i]!];
      if (call === undefined) continue;
      if (bestCall === undefined || call.at < bestCall.at || (call.at === bestCall.at && call.session < bestCall.session)) {
        best = i;
        bestCall = call;
      }
    }
    return best;
  }
}

/** A prompt as the engine's prefix cache sees it: whose blocks it is made of, and how many. */
export interface PromptBlocks {
  /** The system prompt, whose blocks every session using it shares. */
  readonly system: number;
  /** The session, whose blocks are its history. */
  readonly session: number;
  /** Prompt length in the simulated engine's tokens. */
  readonly tokens: number;
  /** Leading full blocks that lie wholly inside the system message. */
  readonly sharedBlocks: number;
  /** Full blocks of the prompt (a partial trailing block is never cached). */
  readonly blocks: number;
}

/** The block structure of `call`'s prompt. */
export function promptBlocksOf(shape: WorkloadShape, call: TraceCall): PromptBlocks {
  const { total, shared } = promptTokensOf(shape, call.turn);
  return {
    system: call.system,
    session: call.session,
    tokens: total,
    sharedBlocks: Math.floor(shared / BLOCK_SIZE),
    blocks: Math.floor(total / BLOCK_SIZE),
  };
}

/** The blocks of system prompt `system` alone: what every engine holds once it has served that prompt. */
export function systemBlocksOf(shape: WorkloadShape, system: number): PromptBlocks {
  const { shared } = promptTokensOf(shape, 1);
  const blocks = Math.floor(shared / BLOCK_SIZE);
  // No session of its own: the insert sets the system prompt's blocks only.
  return { system, session: -1, tokens: shared, sharedBlocks: blocks, blocks };
}
