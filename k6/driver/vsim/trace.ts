/**
 * The block structure of each call's prompt, as the simulator's engines cache it.
 *
 * A prompt's cache blocks are named from the workload's structure rather than by hashing its
 * text: block i is the system prompt's own (shared by every session using it) while it lies
 * wholly inside the system message, and the session's otherwise. Every turn resends the history
 * before it, so block i of a session is the same block at every turn that has it. That is exact
 * for this workload and a fraction of the cost of SHA-256 over every prompt.
 */
import { BLOCK_SIZE } from '../../../runner/index.ts';
import { promptTokensOf } from '../workload.ts';
import type { TraceCall, WorkloadShape } from '../workload.ts';

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
