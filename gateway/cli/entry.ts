/**
 * Where the `sluice` command's entry script is, and how to start its commands as child
 * processes: the composition root knows its own bin, so the kernel, which starts processes, knows
 * no path of the product. `sluice up` and `sluice runner` start their children with it, `sluice
 * bench` hands it to the bench, and the specs import it.
 */
import { fileURLToPath } from 'node:url';
import { serviceStarter } from '../../placer/kernel/index.ts';
import type { StartService } from '../../placer/kernel/index.ts';

/**
 * Path of the `sluice` entry script that runs children the way this process runs. Compiled
 * (this file is dist/gateway/cli/entry.js), it is the checkout's gateway/cli/sluice.mjs, which
 * runs the build. On the sources (this file is entry.ts: the specs under vitest, or the bin
 * without a build), it is tsx-sluice.mjs beside it, which runs the sources even when a build
 * exists, so a test after an edit starts the edited code, never a stale build.
 */
export const SLUICE_BIN = fileURLToPath(
  import.meta.url.endsWith('.ts')
    ? new URL('./tsx-sluice.mjs', import.meta.url)
    : new URL('../../../gateway/cli/sluice.mjs', import.meta.url),
);

/** Starts `sluice <args>` and resolves once it listens. */
export const startService: StartService = serviceStarter(SLUICE_BIN, 'sluice');
