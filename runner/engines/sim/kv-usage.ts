/**
 * KV-cache occupancy, for the `vllm:kv_cache_usage_perc` gauge: the blocks held by running
 * sequences over the device's total. A sequence holds ceil((prompt + generated) / block size) blocks, so
 * the gauge rises with every admitted prompt and with decode, and falls when a sequence ends, the
 * way a placer weighing KV utilisation sees it on vLLM. Admission does not depend on it: the
 * simulator does not model preemption when the pool is full, only reports the pressure.
 */
import { BLOCK_SIZE } from './prefix-cache.ts';

/** One running sequence's hold on the pool. */
export interface KvHold {
  /** Counts one more generated token; the hold grows by a block every block size of tokens. */
  grow(): void;
  /** Gives the blocks back. Idempotent, so `finally` blocks may repeat it. */
  release(): void;
}

/** The pool's occupancy. */
export class KvUsage {
  readonly #totalBlocks: number;
  readonly #blockSize: number;
  #held = 0;

  /**
   * @param totalBlocks blocks on the device, at least 1 (validated by the engine's options).
   * @param blockSize tokens per block.
   */
  constructor(totalBlocks: number, blockSize = BLOCK_SIZE) {
    this.#totalBlocks = totalBlocks;
    this.#blockSize = blockSize;
  }

  /** Blocks held by running sequences now. */
  get heldBlocks(): number {
    return this.#held;
  }

  /** Held over total, clamped to 1: more sequences than fit would be preempted on vLLM, never over 100%. */
  get fraction(): number {
    return Math.min(1, this.#held / this.#totalBlocks);
  }

  /** Starts holding blocks for a sequence whose prompt has `promptTokens` tokens. */
  hold(promptTokens: number): KvHold {
    let tokens = promptTokens;
    let blocks = Math.ceil(tokens / this.#blockSize);
    let released = false;
    this.#held += blocks;
    return {
      grow: () => {
        if (released) return;
        tokens += 1;
        const next = Math.ceil(tokens / this.#blockSize);
        this.#held += next - blocks;
        blocks = next;
      },
      release: () => {
        if (released) return;
        released = true;
        this.#held -= blocks;
      },
    };
  }
}
