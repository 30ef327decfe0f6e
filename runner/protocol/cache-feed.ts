/**
 * The cache feed: how a runner carries its engine's KV-cache truth to every gateway it is
 * registered with, so each gateway knows which runner's engine holds which blocks (named as in
 * block-hash.ts) whichever gateway sent the calls that filled them.
 *
 * - At registration and in every heartbeat the runner announces its {@link CacheAnnouncement}:
 *   the tokenizer and block scheme a gateway needs to name a call's blocks as the engine does.
 * - It POSTs {@link CacheUpdate}s to {@link cacheFeedPath}: the blocks its engine stored and
 *   removed since the last update to that gateway, numbered `seq` 1, 2, 3... within an `epoch`.
 *   A gateway answers 204 once it took an update. One that missed one (a gap in `seq`, an epoch
 *   it does not know) answers 409 (GW_CACHE_FEED_OUT_OF_ORDER), and the runner sends a `reset`
 *   update holding every block it knows the engine holds, from which the sequence starts again;
 *   404 (GW_RUNNER_NOT_FOUND) means the gateway forgot the runner, which registers again. An update with nothing in it is a keep-alive, sent at least every
 *   heartbeat, so a gateway can tell a quiet engine from a dead feed.
 * - Each update carries the runner's {@link FeedLoad} as it is when sent, the figures of its
 *   heartbeat's load that placement reads, and the runner sends one (with no blocks, if none
 *   changed) whenever they changed since the last, at most every feed interval: every gateway
 *   then sees the calls the others sent within that time, not only at the next heartbeat. A
 *   gateway takes it as a fresh load report for that runner.
 * - `engineFeed: 'down'` says the runner has lost its engine's events (the engine restarted, its
 *   event socket is gone, it skipped a sequence number): the gateway treats that runner's cache as
 *   unknown until an update says `'live'` again, which always comes with `reset`.
 */
import { BLOCK_HASH_ALGORITHMS } from './block-hash.ts';
import type { BlockScheme } from './block-hash.ts';

/** What a gateway needs to name a call's blocks as this runner's engine does. */
export interface CacheAnnouncement {
  /** The engine's tokenizer: {@link SIM_TOKENIZER} or a Hugging Face tokenizer name (its `--tokenizer`, else its model). */
  readonly tokenizer: string;
  readonly scheme: BlockScheme;
  /** True when the runner forwards the engine's KV-cache events; false when it only relays per-call cached tokens. */
  readonly events: boolean;
}

/**
 * A runner's load as its cache feed carries it: the figures of its heartbeat's load
 * (registration.ts's `ReportedLoad`) that placement reads, without the per-model counts.
 */
export interface FeedLoad {
  /** Calls holding a slot now. */
  readonly slotsInUse: number;
  readonly slots: number;
  /** Requests waiting inside the engine. */
  readonly queue: number;
  /** The engine's KV-cache use, 0..1, to the hundredth, when it publishes it. */
  readonly kvCacheUsage?: number;
}

/** The feed's figures of a heartbeat's load: the four placement reads, the KV-cache use to the hundredth. */
export function feedLoadOf(load: FeedLoad): FeedLoad {
  const { slotsInUse, slots, queue, kvCacheUsage } = load;
  return {
    slotsInUse,
    slots,
    queue,
    ...(kvCacheUsage === undefined ? {} : { kvCacheUsage: Math.round(kvCacheUsage * 100) / 100 }),
  };
}

/** One batch of cache changes from a runner to one gateway. */
export interface CacheUpdate {
  /** The feed's incarnation: new when the runner starts or its engine's event stream starts over. */
  readonly epoch: string;
  /** 1 for the first update of an epoch to this gateway, then one more each update. */
  readonly seq: number;
  /** Whether the runner is receiving its engine's events now (see the file comment). */
  readonly engineFeed: 'live' | 'down';
  /** The blocks in `stored` are all the engine holds: the gateway forgets what it had first. */
  readonly reset?: boolean;
  /** Keys of blocks stored since the last update, packed by {@link packBlockKeys}. */
  readonly stored?: string;
  /** Keys of blocks removed since the last update, packed likewise. */
  readonly removed?: string;
  /** The runner's load when it sent this update; absent from runners that do not carry it. */
  readonly load?: FeedLoad;
}

/** Where a runner POSTs its cache updates on a gateway. */
export function cacheFeedPath(runnerId: string): string {
  return `/v1/runners/${encodeURIComponent(runnerId)}/cache`;
}

/** Block keys (16 hex digits each) as base64 of their 8 bytes each: 10.7 bytes a block instead of 19 in JSON strings. */
export function packBlockKeys(keys: readonly string[]): string {
  const bytes = Buffer.allocUnsafe(keys.length * 8);
  keys.forEach((key, i) => bytes.write(key, i * 8, 8, 'hex'));
  return bytes.toString('base64');
}

/**
 * The keys packed by {@link packBlockKeys}, or undefined when `packed` is not base64 of whole
 * 8-byte keys.
 */
export function unpackBlockKeys(packed: string): string[] | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(packed)) return undefined;
  const bytes = Buffer.from(packed, 'base64');
  if (bytes.length % 8 !== 0) return undefined;
  const keys = new Array<string>(bytes.length / 8);
  for (let i = 0; i < keys.length; i += 1) keys[i] = bytes.toString('hex', i * 8, i * 8 + 8);
  return keys;
}

/**
 * A body checked against the feed's contract: the value, or why not. The shape of registration.ts's
 * Parsed, declared here so the registration's bodies can carry this file's announcement.
 */
export type FeedParsed<T> = { kind: 'ok'; value: T } | { kind: 'invalid'; message: string };

/** An epoch: what a runner may name one, as ids are named on the wire. */
const EPOCH_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
/** Largest block size announced: engines use 16 to 256 tokens. */
const MAX_BLOCK_SIZE = 4096;
/** Most slots a runner may report, as in its registration. */
const MAX_SLOTS = 65_536;
/** Longest tokenizer name or seed announced. */
const MAX_ANNOUNCED_TEXT = 256;

/**
 * A cache update as the gateway accepts it, or why not: `epoch` 1 to 128 letters, digits or
 * `._:-`; `seq` a whole number from 1; `engineFeed` `live` or `down`; `reset` a boolean;
 * `stored` and `removed` packed keys ({@link packBlockKeys}); `load` a {@link FeedLoad} (slot
 * counts whole numbers to 65,536, `queue` 0 or more, `kvCacheUsage` a fraction). A `down` feed
 * holds no blocks.
 */
export function parseCacheUpdate(body: unknown): FeedParsed<CacheUpdate> {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return invalid('cache update body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (typeof b.epoch !== 'string' || !EPOCH_PATTERN.test(b.epoch))
    return invalid(`cache update epoch must be 1 to 128 letters, digits or ._:-, got ${show(b.epoch)}`);
  if (typeof b.seq !== 'number' || !Number.isSafeInteger(b.seq) || b.seq < 1)
    return invalid(`cache update seq must be a whole number from 1, got ${show(b.seq)}`);
  if (b.engineFeed !== 'live' && b.engineFeed !== 'down')
    return invalid(`cache update engineFeed must be "live" or "down", got ${show(b.engineFeed)}`);
  if (b.reset !== undefined && typeof b.reset !== 'boolean')
    return invalid(`cache update reset must be a boolean, got ${show(b.reset)}`);
  for (const field of ['stored', 'removed'] as const) {
    const packed = b[field];
    if (packed === undefined) continue;
    if (typeof packed !== 'string' || unpackBlockKeys(packed) === undefined)
      return invalid(`cache update ${field} must be base64 of 8-byte block keys, got ${show(packed)}`);
  }
  if (b.engineFeed === 'down' && (b.stored || b.removed))
    return invalid('a cache update with engineFeed "down" carries no blocks');
  const loadProblem = b.load === undefined ? undefined : feedLoadProblem(b.load);
  if (loadProblem) return invalid(loadProblem);
  return {
    kind: 'ok',
    value: {
      epoch: b.epoch,
      seq: b.seq,
      engineFeed: b.engineFeed,
      ...(b.reset === undefined ? {} : { reset: b.reset }),
      ...(b.stored === undefined ? {} : { stored: b.stored as string }),
      ...(b.removed === undefined ? {} : { removed: b.removed as string }),
      ...(b.load === undefined ? {} : { load: feedLoadOf(b.load as FeedLoad) }),
    },
  };
}

/** Why a cache update's `load` is not a {@link FeedLoad}, or undefined. */
function feedLoadProblem(value: unknown): string | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return `cache update load must be an object, got ${show(value)}`;
  const load = value as Record<string, unknown>;
  for (const field of ['slotsInUse', 'slots'] as const) {
    const n = load[field];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0 || n > MAX_SLOTS)
      return `cache update load.${field} must be a whole number from 0 to ${MAX_SLOTS}, got ${show(n)}`;
  }
  if (typeof load.queue !== 'number' || !Number.isFinite(load.queue) || load.queue < 0)
    return `cache update load.queue must be a number of 0 or more, got ${show(load.queue)}`;
  const kv = load.kvCacheUsage;
  if (kv !== undefined && (typeof kv !== 'number' || !(kv >= 0 && kv <= 1)))
    return `cache update load.kvCacheUsage must be a fraction from 0 to 1, got ${show(kv)}`;
  return undefined;
}

/**
 * The announcement in a registration's or heartbeat's `cache` field, or undefined when there is
 * none or it is not one a gateway can use (an unknown hash algorithm, a bad block size): the
 * runner is then placed without cache truth, as one that announces nothing.
 */
export function readCacheAnnouncement(value: unknown): CacheAnnouncement | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const { tokenizer, scheme, events } = value as Record<string, unknown>;
  if (typeof tokenizer !== 'string' || tokenizer === '' || tokenizer.length > MAX_ANNOUNCED_TEXT) return undefined;
  if (typeof events !== 'boolean' || !scheme || typeof scheme !== 'object') return undefined;
  const { algorithm, seed, blockSize } = scheme as Record<string, unknown>;
  if (!(BLOCK_HASH_ALGORITHMS as readonly unknown[]).includes(algorithm)) return undefined;
  if (typeof seed !== 'string' || seed.length > MAX_ANNOUNCED_TEXT) return undefined;
  if (typeof blockSize !== 'number' || !Number.isSafeInteger(blockSize) || blockSize < 1 || blockSize > MAX_BLOCK_SIZE)
    return undefined;
  return { tokenizer, events, scheme: { algorithm: algorithm as BlockScheme['algorithm'], seed, blockSize } };
}

function invalid(message: string): FeedParsed<never> {
  return { kind: 'invalid', message };
}

/**
 * A bad value for an error message: a number, boolean or null as it is, anything else by its kind
 * and size only, so that whatever a runner put in a field (a token by mistake) is never echoed.
 */
function show(value: unknown): string {
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'string') return `a string of ${value.length} characters`;
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return value === undefined ? 'nothing' : `a${typeof value === 'object' ? 'n object' : ` ${typeof value}`}`;
}
