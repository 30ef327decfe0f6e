/**
 * The simulated engine's KV-cache events, in vLLM's format and over vLLM's transport, so a
 * runner reads them with the code it runs against vLLM. Followed: vLLM v0.12,
 * `vllm/distributed/kv_events.py` (`ZmqEventPublisher`, `KVEventBatch`, `BlockStored`,
 * `BlockRemoved`, `AllBlocksCleared`) and `vllm/v1/core/block_pool.py` (when each is sent).
 *
 * - A ZMQ PUB socket binds the endpoint when it names a wildcard (`*`, `::`), ipc:// or
 *   inproc://, and connects to it otherwise (vLLM's "bind stable, connect volatile" rule), so a
 *   runner can bind 127.0.0.1 on a port of its own and hand the engine that address.
 * - Each message is three frames: the topic, the sequence number as 8 bytes big-endian (from 0,
 *   one more per message), and the msgpack payload `[ts, events, data_parallel_rank]`.
 * - Events are msgspec's tagged arrays: `["BlockStored", block_hashes, parent_block_hash,
 *   token_ids, block_size, lora_id, medium, lora_name]`, `["BlockRemoved", block_hashes,
 *   medium]`, `["AllBlocksCleared"]`, with block hashes as their 32 bytes.
 * - Events of one tick of the event loop go out as one batch, as vLLM sends one per engine step.
 * - With a replay endpoint, a ROUTER socket answers a request holding a start sequence number (8
 *   bytes big-endian) with every kept batch from it on, then an end marker (sequence -1).
 * - In SGLang's style the same transport and batches carry SGLang's events instead
 *   (kv-events-sglang.ts).
 */
import { encode } from '@msgpack/msgpack';
import { Publisher, Router } from 'zeromq';
import type { BlockHash } from '../../protocol/index.ts';
import type { SimKvEventsConfig } from './kv-events-config.ts';
import { SglangPages } from './kv-events-sglang.ts';

/** The medium vLLM names for blocks in GPU memory. */
const MEDIUM_GPU = 'GPU';

/** vLLM's end-of-replay marker: -1 as 8 bytes big-endian. */
const END_SEQ = Buffer.alloc(8, 0xff);

/** A run of consecutive blocks of one prompt, newly stored. */
export interface StoredBlocks {
  readonly hashes: readonly BlockHash[];
  /** The hash of the block before the run; null when the run starts the prompt. */
  readonly parent: BlockHash | null;
  /** The run's tokens, block after block. */
  readonly tokenIds: readonly number[];
  readonly blockSize: number;
}

/** Where the engine tells what its cache did; a no-op without events. */
export interface SimKvEvents {
  stored(blocks: StoredBlocks): void;
  removed(hash: BlockHash): void;
  cleared(): void;
}

/** Events nobody hears: the engine without `--kv-events-config`. */
export const NO_KV_EVENTS: SimKvEvents = Object.freeze({ stored() {}, removed() {}, cleared() {} });

/** A ZMQ publisher of the engine's KV-cache events; see the module comment. */
export class SimKvEventPublisher implements SimKvEvents {
  readonly #config: SimKvEventsConfig;
  readonly #now: () => number;
  readonly #pub = new Publisher({ linger: 0 });
  readonly #replay: Router | undefined;
  /** Tells stores and evictions as SGLang's pages; undefined in vLLM's style. */
  readonly #sglang: SglangPages | undefined;
  /** Kept batches for replay: sequence number and payload, oldest first. */
  readonly #kept: Array<[bigint, Buffer]> = [];
  #pending: unknown[] = [];
  #seq = 0n;
  #flushing = false;
  #sending: Promise<void> = Promise.resolve();
  #closed = false;

  /** @param now wall clock in ms since the epoch, for each batch's `ts`. */
  constructor(config: SimKvEventsConfig, now: () => number) {
    this.#config = config;
    this.#now = now;
    this.#replay = config.replayEndpoint === undefined ? undefined : new Router({ linger: 0 });
    this.#sglang = config.style.kind === 'sglang' ? new SglangPages(config.style.pageSize) : undefined;
  }

  /** Binds or connects the sockets. */
  async open(): Promise<void> {
    const { endpoint, replayEndpoint } = this.#config;
    if (bindsTo(endpoint)) await this.#pub.bind(endpoint);
    else this.#pub.connect(endpoint);
    if (this.#replay && replayEndpoint !== undefined) {
      await this.#replay.bind(replayEndpoint);
      void this.#answerReplays(this.#replay);
    }
  }

  stored(blocks: StoredBlocks): void {
    if (this.#sglang) {
      const { hashes, parent, tokenIds, blockSize } = blocks;
      for (const event of this.#sglang.stored(hashes, parent, tokenIds, blockSize)) this.#add(event);
      return;
    }
    this.#add([
      'BlockStored',
      [...blocks.hashes],
      blocks.parent,
      [...blocks.tokenIds],
      blocks.blockSize,
      null,
      MEDIUM_GPU,
      null,
    ]);
  }

  removed(hash: BlockHash): void {
    if (this.#sglang) {
      for (const event of this.#sglang.removed(hash)) this.#add(event);
      return;
    }
    // Evictions in one tick share one event, as a step's do in vLLM's batch.
    const last = this.#pending.at(-1) as unknown[] | undefined;
    if (last?.[0] === 'BlockRemoved') (last[1] as BlockHash[]).push(hash);
    else this.#add(['BlockRemoved', [hash], MEDIUM_GPU]);
  }

  cleared(): void {
    this.#sglang?.clear();
    this.#add(['AllBlocksCleared']);
  }

  /** Sends what is pending and closes the sockets. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush();
    this.#closed = true;
    await this.#sending;
    this.#pub.close();
    this.#replay?.close();
  }

  #add(event: unknown[]): void {
    if (this.#closed) return;
    this.#pending.push(event);
    if (this.#flushing) return;
    this.#flushing = true;
    setImmediate(() => this.#flush());
  }

  #flush(): void {
    this.#flushing = false;
    if (this.#closed || this.#pending.length === 0) return;
    // SGLang's hashes are signed 64-bit integers: msgpack's int 64.
    const payload = Buffer.from(encode([this.#now() / 1000, this.#pending, 0], { useBigInt64: true }));
    this.#pending = [];
    const seq = this.#seq;
    this.#seq += 1n;
    if (this.#replay) {
      this.#kept.push([seq, payload]);
      if (this.#kept.length > this.#config.bufferSteps) this.#kept.shift();
    }
    const message = [this.#config.topic, seqBytes(seq), payload];
    // One send at a time on a socket; a PUB socket never waits for subscribers.
    this.#sending = this.#sending.then(() => this.#pub.send(message)).catch(() => {});
  }

  async #answerReplays(router: Router): Promise<void> {
    try {
      for await (const [identity, , start] of router) {
        if (identity === undefined || start === undefined || start.length !== 8) continue;
        const from = start.readBigUInt64BE();
        for (const [seq, payload] of this.#kept)
          if (seq >= from) await router.send([identity, Buffer.alloc(0), seqBytes(seq), payload]);
        await router.send([identity, Buffer.alloc(0), END_SEQ, Buffer.alloc(0)]);
      }
    } catch {
      // The socket closed under the loop: the engine is stopping.
    }
  }
}

/** vLLM's rule: bind a wildcard, ipc:// or inproc:// endpoint, connect to any other. */
export function bindsTo(endpoint: string): boolean {
  return (
    endpoint.includes('*') ||
    endpoint.includes('::') ||
    endpoint.startsWith('ipc://') ||
    endpoint.startsWith('inproc://')
  );
}

function seqBytes(seq: bigint): Buffer {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64BE(seq);
  return bytes;
}
