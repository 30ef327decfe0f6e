/**
 * A batch runner's file keeper for specs on the fake clock: a store that always has room and a
 * key limiter that never refuses, so a spec's batches are bounded by what it checks, not by bytes.
 */
import { createMemoryLimiter } from '../../../gateway/access/index.ts';
import { FileKeeper } from '../../../gateway/batch/files.ts';
import type { BatchStore } from '../../../gateway/store/index.ts';
import type { FakeClock } from '../../placer/fake.ts';

const DAY = 24 * 3_600_000;

/** A keeper of `store`'s files on `clock`, with a day's file lifetime and a gibibyte of room. */
export function roomyFileKeeper(store: BatchStore, clock: FakeClock): FileKeeper {
  return new FileKeeper({
    store,
    calls: { health: async () => ({ ok: true, storedBytes: 0, maxStoredBytes: 1 << 30 }) },
    limiter: createMemoryLimiter({ clock }),
    clock,
    fileTtl: DAY,
  });
}
