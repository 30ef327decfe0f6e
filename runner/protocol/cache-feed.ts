/**
 * The cache feed: how a runner carries its engine's KV-cache truth to every gateway it is
 * registered with, so each gateway knows which runner's engine holds which blocks (named as in
 * block-hash.ts) whichever gateway sent the calls that filled them.
 *
 * - At registration and in every heartbeat the runner announces its {@link CacheAnnouncement}:
 *   the tokenizer and block scheme a gateway needs to name a call's blocks as the engine does.
 * - It POSTs {@link CacheUpdate}s to {@link cacheFeedPath}: the blocks its engine stored and
 *   removed since the last update to that gateway, numbered `seq` 1, 2, 3... within an `epoch`.
 *   A gateway that missed one (a gap in `seq`, an epoch it does not know) answers 409, and the
 *   runner sends a `reset` update holding every block it knows the engine holds, from which the
 *   sequence starts again. An update with nothing in it is a keep-alive, sent at least every
 *   heartbeat, so a gateway can tell a quiet engine from a dead feed.
 * - `engineFeed: 'down'` says the runner has lost its engine's events (the engine restarted, its
 *   event socket is gone, it skipped a sequence number): the gateway treats that runner's cache as
 *   unknown until an update says `'live'` again, which always comes with `reset`.
 */
import type { BlockScheme } from './block-hash.ts';

/** What a gateway needs to name a call's blocks as this runner's engine does. */
export interface CacheAnnouncement {
  /** The engine's tokenizer: {@link SIM_TOKENIZER} or a Hugging Face tokenizer name (its `--tokenizer`, else its model). */
  readonly tokenizer: string;
  readonly scheme: BlockScheme;
  /** True when the runner forwards the engine's KV-cache events; false when it only relays per-call cached tokens. */
  readonly events: boolean;
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
