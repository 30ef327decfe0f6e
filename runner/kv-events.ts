/**
 * Reading an engine's KV-cache events: vLLM's format over vLLM's transport (the simulated engine
 * publishes the same, runner/engines/sim/kv-events.ts). Followed: vLLM v0.12,
 * `vllm/distributed/kv_events.py` (BlockStored ends in `lora_name` since vllm-project/vllm#27577);
 * newer vLLM sends each event as a map tagged by `type`, which is read too. SGLang publishes the
 * same shapes (`python/sglang/srt/disaggregation/kv_events.py`, v0.5: no `lora_name`, `medium`
 * in newer builds, its batch's third field `attn_dp_rank`), its hashes signed 64-bit integers.
 *
 * The runner's SUB socket binds 127.0.0.1 on a port of its own and the engine is handed that
 * address as its `--kv-events-config` endpoint: vLLM's publisher connects to an endpoint that
 * names no wildcard, so no port is picked and released for the engine to race for. Messages are
 * `[topic, seq as 8 bytes big-endian, msgpack payload]`; the payload is the batch
 * `[ts, events, data_parallel_rank]` (or the same as a map), each event a tagged array
 * (`["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium, lora_name]`,
 * `["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`) or a map with its tag under
 * `type`, as vLLM versions differ. A block hash is its 32 bytes, or an integer with
 * `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`; either becomes the wire's block key. Events for another
 * medium than the GPU (vLLM's CPU offload tier) are not the engine's cache and are skipped.
 */
import { decode } from '@msgpack/msgpack';
import { Subscriber } from 'zeromq';
import type { Logger } from '../placer/kernel/index.ts';
import { blockKey } from './protocol/index.ts';

/**
 * Blocks an engine stored, named by their wire keys, and as its BlockStored tells them: enough to
 * name them again from their tokens (cache-rekey.ts). Blocks named anew carry their keys only.
 */
export interface StoredBlocksEvent {
  readonly kind: 'stored';
  readonly keys: readonly string[];
  /** The engine's key of the block before the first; null when the first starts a prompt. */
  readonly parent?: string | null;
  /** The blocks' token ids, block after block; absent when the event's are not plain token ids. */
  readonly tokens?: readonly number[];
  /** Tokens per block as the event says; absent when it says none a block can have. */
  readonly blockSize?: number;
  /** False when the blocks' hashes take more than their tokens (a LoRA adapter, extra keys). */
  readonly plain?: boolean;
}

/** One change to an engine's cache, its blocks named by their wire keys. */
export type KvEvent =
  | StoredBlocksEvent
  | { readonly kind: 'removed'; readonly keys: readonly string[] }
  | { readonly kind: 'cleared' };

/** A decoded message: its sequence number and its events. */
export interface KvEventBatch {
  readonly seq: bigint;
  readonly events: readonly KvEvent[];
}

/** What a payload decodes to: its events, or why it is not a KV event batch. */
export type DecodedKvEvents =
  | { readonly kind: 'ok'; readonly events: KvEvent[] }
  | { readonly kind: 'bad'; readonly problem: string };

/** Thrown inside the decoder only, caught by {@link decodeKvEvents}: a bad part ends the whole payload. */
class Unreadable {
  constructor(readonly problem: string) {}
}

/** Field positions of the array form, after the tag. */
const STORED_HASHES = 1;
const STORED_PARENT = 2;
const STORED_TOKENS = 3;
const STORED_BLOCK_SIZE = 4;
const STORED_LORA_ID = 5;
const STORED_MEDIUM = 6;
const STORED_LORA_NAME = 7;
const REMOVED_HASHES = 1;
const REMOVED_MEDIUM = 2;

/** The events of one payload, or why it is not msgpack of a batch of known events. */
export function decodeKvEvents(payload: Uint8Array): DecodedKvEvents {
  let batch: unknown;
  try {
    batch = decode(payload, { useBigInt64: true });
  } catch (error) {
    return { kind: 'bad', problem: `not msgpack: ${(error as Error).message}` };
  }
  const events = Array.isArray(batch) ? batch[1] : isMap(batch) ? batch.events : undefined;
  if (!Array.isArray(events)) return { kind: 'bad', problem: 'the batch holds no events list' };
  const out: KvEvent[] = [];
  try {
    for (const event of events) {
      const decoded = decodeEvent(event);
      if (decoded !== undefined) out.push(decoded);
    }
  } catch (error) {
    if (error instanceof Unreadable) return { kind: 'bad', problem: error.problem };
    throw error;
  }
  return { kind: 'ok', events: out };
}

function decodeEvent(event: unknown): KvEvent | undefined {
  const array = Array.isArray(event);
  const tag = array ? event[0] : isMap(event) ? event.type : undefined;
  const field = (position: number, name: string): unknown =>
    array ? (event as unknown[])[position] : (event as Record<string, unknown>)[name];
  switch (tag) {
    case 'BlockStored':
      if (!onGpu(field(STORED_MEDIUM, 'medium'))) return undefined;
      return {
        kind: 'stored',
        keys: keysOf(field(STORED_HASHES, 'block_hashes')),
        parent: parentOf(field(STORED_PARENT, 'parent_block_hash')),
        ...tokensOf(field(STORED_TOKENS, 'token_ids')),
        ...blockSizeOf(field(STORED_BLOCK_SIZE, 'block_size')),
        plain:
          absent(field(STORED_LORA_ID, 'lora_id')) &&
          absent(field(STORED_LORA_NAME, 'lora_name')) &&
          noExtraKeys(array ? undefined : (event as Record<string, unknown>).extra_keys),
      };
    case 'BlockRemoved':
      if (!onGpu(field(REMOVED_MEDIUM, 'medium'))) return undefined;
      return { kind: 'removed', keys: keysOf(field(REMOVED_HASHES, 'block_hashes')) };
    case 'AllBlocksCleared':
      return { kind: 'cleared' };
    default:
      throw new Unreadable(`unknown event ${JSON.stringify(String(tag))}`);
  }
}

/** An absent medium is the GPU's: older vLLM sends none. */
function onGpu(medium: unknown): boolean {
  return medium === undefined || medium === null || medium === 'GPU';
}

function keysOf(hashes: unknown): string[] {
  if (!Array.isArray(hashes)) throw new Unreadable('an event holds no block_hashes list');
  return hashes.map(keyOf);
}

/** A hash's wire key: 32 bytes, or an integer (vLLM's int hashes; SGLang's signed int64). */
function keyOf(hash: unknown): string {
  if (hash instanceof Uint8Array || typeof hash === 'bigint') return blockKey(hash);
  if (typeof hash === 'number' && Number.isSafeInteger(hash)) return blockKey(hash);
  throw new Unreadable(`a block hash is bytes or an integer, got ${typeof hash}`);
}

function parentOf(hash: unknown): string | null {
  return hash === undefined || hash === null ? null : keyOf(hash);
}

/** Plain token ids, or nothing for anything else (EAGLE's bigram pairs, a missing list). */
function tokensOf(value: unknown): { tokens?: number[] } {
  if (!Array.isArray(value)) return {};
  for (const token of value) if (!(Number.isSafeInteger(token) && token >= 0)) return {};
  return { tokens: value as number[] };
}

function blockSizeOf(value: unknown): { blockSize?: number } {
  return Number.isSafeInteger(value) && (value as number) >= 1 ? { blockSize: value as number } : {};
}

function absent(value: unknown): boolean {
  return value === undefined || value === null;
}

/** Newer vLLM lists each block's extra keys (cache salt, multimodal input): plain only when none has any. */
function noExtraKeys(value: unknown): boolean {
  return !Array.isArray(value) || value.every(absent);
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/** How a {@link KvEventSubscriber} is set up. */
export interface KvEventSubscriberOptions {
  /** The topic the engine publishes under (its `--kv-events-config` topic). @default '' */
  topic?: string;
  /** Called with each message's batch, in order. */
  onBatch(batch: KvEventBatch): void;
  logger: Logger;
}

/** A SUB socket bound on 127.0.0.1 for one engine's events; see the module comment. */
export class KvEventSubscriber {
  readonly #options: KvEventSubscriberOptions;
  readonly #socket = new Subscriber({ linger: 0 });
  #endpoint: string | undefined;
  #closed = false;
  #reading: Promise<void> | undefined;

  constructor(options: KvEventSubscriberOptions) {
    this.#options = options;
  }

  /** The address the engine is to publish to; undefined before {@link open}. */
  get endpoint(): string | undefined {
    return this.#endpoint;
  }

  /** Binds 127.0.0.1 on a free port, for an engine to publish to, and starts reading; resolves with the address. */
  async open(): Promise<string> {
    if (this.#endpoint !== undefined) return this.#endpoint;
    await this.#socket.bind('tcp://127.0.0.1:*');
    const endpoint = this.#socket.lastEndpoint;
    if (!endpoint) throw new Error('the KV event socket bound no address');
    this.#start(endpoint);
    return endpoint;
  }

  /** Connects to an engine that binds its own endpoint (one the runner did not launch), and starts reading. */
  connect(endpoint: string): void {
    if (this.#endpoint !== undefined) return;
    this.#socket.connect(endpoint);
    this.#start(endpoint);
  }

  #start(endpoint: string): void {
    this.#socket.subscribe(this.#options.topic ?? '');
    this.#endpoint = endpoint;
    this.#reading = this.#read();
  }

  /** Stops reading and closes the socket. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.close();
    await this.#reading;
  }

  async #read(): Promise<void> {
    const log = this.#options.logger;
    try {
      for await (const frames of this.#socket) {
        const [, seqFrame, payload] = frames;
        if (seqFrame?.length !== 8 || payload === undefined) {
          log.warn('kv event message malformed, skipped', { frames: frames.length });
          continue;
        }
        const decoded = decodeKvEvents(payload);
        if (decoded.kind === 'bad') {
          // Skipped, and its sequence number with it: the mirror sees a gap and starts over.
          log.warn('kv event batch unreadable, skipped', { problem: decoded.problem });
          continue;
        }
        this.#options.onBatch({ seq: seqFrame.readBigUInt64BE(), events: decoded.events });
      }
    } catch (error) {
      if (!this.#closed) log.error('kv event socket failed', { error: error as Error });
    }
  }
}
