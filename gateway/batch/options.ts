/**
 * The batch room's settings: {@link BatchOptions} (declared with the gateway's options) with
 * their defaults, validated once when the gateway is built, so a bad one fails with one line
 * naming it.
 */
import { checksFor } from '../../placer/kernel/index.ts';
import type { BatchOptions } from '../options.ts';
import { BatchConfigError } from './errors.ts';

/** The defaults, frozen. */
export const batchDefaults = Object.freeze({
  maxFileBytes: 64 * 1024 * 1024,
  // OpenAI's own bound on a batch's requests.
  maxLines: 50_000,
  // Far above a fleet's free slots in practice: the window, not this, keeps lines in step with them.
  maxLinesInFlight: 256,
  fileTtl: 30 * 24 * 3_600_000,
  tick: 100,
  chunkLines: 50,
  leaseTtl: 10_000,
});

/** Resolved batch settings (the store aside, which the composition makes). */
export interface BatchConfig {
  readonly maxFileBytes: number;
  readonly maxLines: number;
  readonly maxLinesInFlight: number;
  readonly fileTtl: number;
  readonly tick: number;
  readonly chunkLines: number;
  readonly leaseTtl: number;
}

/**
 * Fills in defaults and validates every batch option.
 * @throws BatchConfigError naming the option (as `batch.<name>`) and the bad value.
 */
export function resolveBatchConfig(options: BatchOptions = {}): BatchConfig {
  const {
    maxFileBytes = batchDefaults.maxFileBytes,
    maxLines = batchDefaults.maxLines,
    maxLinesInFlight = batchDefaults.maxLinesInFlight,
    fileTtl = batchDefaults.fileTtl,
    tick = batchDefaults.tick,
    chunkLines = batchDefaults.chunkLines,
    leaseTtl = batchDefaults.leaseTtl,
  } = options;
  return Object.freeze({
    maxFileBytes: check.integer('batch.maxFileBytes', maxFileBytes, { min: 1 }),
    maxLines: check.integer('batch.maxLines', maxLines, { min: 1 }),
    maxLinesInFlight: check.integer('batch.maxLinesInFlight', maxLinesInFlight, { min: 1 }),
    // Not a timer: files expire when read, so it may exceed the longest timer.
    fileTtl: check.integer('batch.fileTtl', fileTtl, { min: 1 }),
    tick: check.ms('batch.tick', tick, 1),
    chunkLines: check.integer('batch.chunkLines', chunkLines, { min: 1 }),
    leaseTtl: checkLeaseTtl(leaseTtl),
  });
}

const check = checksFor(BatchConfigError);

/** A lease of at least a second: a shorter one would be lost to a slow store round trip. */
function checkLeaseTtl(value: unknown): number {
  const ttl = check.ms('batch.leaseTtl', value, 1);
  if (ttl < 1000) throw check.fail(`batch.leaseTtl must be at least 1000 ms, got ${ttl}`);
  return ttl;
}
