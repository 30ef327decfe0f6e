/**
 * Named hardware profiles for the simulated engine: the timing and capacity numbers of one model
 * on one kind of GPU. A profile only supplies defaults; every field can still be set on its own,
 * so `{ profile: 'h100-8b', maxNumSeqs: 4 }` is an H100 with a smaller batch.
 *
 * The numbers come from ../shared/REFERENCE.md ("A credible simulated engine", itself modelled on
 * llm-d-inference-sim) where it gives them; the rest are sluice's choices, marked as such.
 */

/** Names accepted by the `profile` option. */
export type SimProfileName = 'small' | 'h100-8b';

/** The fields a profile sets; each is also a {@link SimEngineOptions} field of the same name. */
export interface SimProfile {
  /** Fixed part of the time to first token, ms. */
  readonly prefillOverheadMs: number;
  /** Prefill time per uncached prompt token, ms (fractions allowed). */
  readonly prefillPerTokenMs: number;
  /** Standard deviation of the prefill time, ms (capped at 30% of its mean). */
  readonly prefillJitterStdMs: number;
  /** Mean time between output tokens, ms. */
  readonly itlMs: number;
  /** Standard deviation of each inter-token gap, ms (capped at 30% of its mean). */
  readonly itlJitterStdMs: number;
  /** Slow-down with every slot busy: times scale by 1 + (f - 1) x (running - 1) / (maxNumSeqs - 1). */
  readonly loadFactor: number;
  /** Sequences running at once (vLLM's `--max-num-seqs`). */
  readonly maxNumSeqs: number;
  /** Requests allowed to wait for a slot; one more is answered 429. */
  readonly maxQueue: number;
  /** Blocks of 16 tokens the prefix cache remembers (LRU). */
  readonly cacheBlocks: number;
  /** KV-cache blocks of 16 tokens on the device: the denominator of `vllm:kv_cache_usage_perc`. */
  readonly kvBlocks: number;
}

/**
 * A fast engine for tests and benchmarks of the gateway itself, and the default. Its timings are
 * the simulator's original fixed ones (20 ms to first token, 5 ms per token, no per-token prefill,
 * no jitter, no slow-down under load), so engines started without a profile behave exactly as
 * before profiles existed. Queue and cache sizes are sluice's choices: large enough never to be the
 * thing a test measures by accident.
 */
export const SMALL_PROFILE: SimProfile = Object.freeze({
  prefillOverheadMs: 20,
  prefillPerTokenMs: 0,
  prefillJitterStdMs: 0,
  itlMs: 5,
  itlJitterStdMs: 0,
  loadFactor: 1,
  maxNumSeqs: 16,
  maxQueue: 256,
  cacheBlocks: 4096,
  kvBlocks: 65_536,
});

/**
 * An 8B model (Llama-3.1-8B class, bf16) on one H100 80 GB.
 * - From REFERENCE: inter-token latency 12 +/- 2 ms, prefill 30 ms + 250 us per token, load
 *   factor 2.0, max-num-seqs 16.
 * - kvBlocks 27 000: sluice's estimate. Such a model keeps 128 KiB of KV per token (2 x 32 layers
 *   x 8 KV heads x 128 dims x 2 bytes), so a 16-token block is 2 MiB; vLLM at 0.9 GPU memory
 *   utilisation leaves about 55 GB once the 16 GB of weights are loaded, about 27 000 blocks
 *   (some 430 000 tokens), the order vLLM logs for this pairing.
 * - cacheBlocks equal to kvBlocks: in vLLM the prefix cache is the KV pool itself, a freed block
 *   staying reusable until it is handed out again.
 * - prefillJitterStdMs 3 and maxQueue 64 (four batches' worth, so that overload shows as 429
 *   within seconds rather than as an ever-growing wait): sluice's choices.
 */
export const H100_8B_PROFILE: SimProfile = Object.freeze({
  prefillOverheadMs: 30,
  prefillPerTokenMs: 0.25,
  prefillJitterStdMs: 3,
  itlMs: 12,
  itlJitterStdMs: 2,
  loadFactor: 2,
  maxNumSeqs: 16,
  maxQueue: 64,
  cacheBlocks: 27_000,
  kvBlocks: 27_000,
});

/** Every profile by name. */
export const SIM_PROFILES: Readonly<Record<SimProfileName, SimProfile>> = Object.freeze({
  small: SMALL_PROFILE,
  'h100-8b': H100_8B_PROFILE,
});

/** Whether `name` names a profile; a type guard for option validation. */
export function isSimProfileName(name: unknown): name is SimProfileName {
  return typeof name === 'string' && Object.hasOwn(SIM_PROFILES, name);
}
