/** The cache announcement the specs' simulated runners make. */
import { SIM_TOKENIZER } from '../../runner/protocol/index.ts';
import type { CacheAnnouncement } from '../../runner/protocol/index.ts';

/**
 * What a runner in front of a simulated engine announces: the simulated tokenizer, vLLM's
 * sha256_cbor blocks of 16 tokens seeded with '0', and a KV-event feed.
 */
export const SIM_ANNOUNCEMENT: CacheAnnouncement = Object.freeze({
  tokenizer: SIM_TOKENIZER,
  scheme: Object.freeze({ algorithm: 'sha256_cbor', seed: '0', blockSize: 16 }),
  events: true,
});
