/**
 * The gateway command's settings of the Files and Batch APIs (`--batch-*`, SLUICE_BATCH_*): each
 * feeds one `batch` option of the gateway (gateway/batch/options.ts), whose default it shows.
 */
import { batchDefaults } from '../batch/index.ts';
import type { BatchOptions } from '../options.ts';
import type { Setting } from './settings.ts';

/** Each setting's key, and the batch option it feeds. */
const FEEDS = {
  batchMaxFileBytes: 'maxFileBytes',
  batchMaxLines: 'maxLines',
  batchMaxLinesInFlight: 'maxLinesInFlight',
  batchFileTtl: 'fileTtl',
  batchTick: 'tick',
  batchChunkLines: 'chunkLines',
  batchLeaseTtl: 'leaseTtl',
} as const satisfies Record<string, keyof typeof batchDefaults>;

/** The library defaults behind the settings, by setting key. */
export const batchSettingDefaults: Readonly<Record<keyof typeof FEEDS, number>> = Object.freeze(
  Object.fromEntries(Object.entries(FEEDS).map(([key, option]) => [key, batchDefaults[option]])) as Record<
    keyof typeof FEEDS,
    number
  >,
);

const setting = (key: keyof typeof FEEDS, type: 'integer' | 'duration', description: string): Setting => ({
  key,
  type,
  libraryDefault: batchDefaults[FEEDS[key]],
  description,
});

/** The batch settings, in --help's order. */
export const batchSettings: readonly Setting[] = [
  setting('batchMaxFileBytes', 'integer', 'largest file POST /v1/files takes, in bytes; a larger one gets 413'),
  setting('batchMaxLines', 'integer', 'most requests one batch holds'),
  setting('batchMaxLinesInFlight', 'integer', 'most batch lines this gateway has in flight at once, over every batch'),
  setting('batchFileTtl', 'duration', 'how long a file is kept (input, output and error files alike)'),
  setting('batchTick', 'duration', "how often the batch release window is looked at besides each line's end"),
  setting('batchChunkLines', 'integer', 'lines in one chunk, the unit of batch work a gateway leases'),
  setting(
    'batchLeaseTtl',
    'duration',
    "how long a chunk's lease lasts unless renewed: a dead gateway's chunks are taken over after it",
  ),
];

/** The batch options the given settings set (those not given are left to their defaults). */
export function batchOptionsOf(values: Readonly<Record<string, unknown>>): BatchOptions {
  const options: Record<string, unknown> = {};
  for (const [key, option] of Object.entries(FEEDS)) if (values[key] !== undefined) options[option] = values[key];
  return options as BatchOptions;
}
