/**
 * A fleet of real processes whose gateway reads a keys file (`--keys`), for the specs of client
 * keys' limits: the file is written to a directory of its own, removed with the fleet.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFleet, startedForSuite, suiteFleet } from './fleet.ts';
import type { Fleet, FleetOptions, SuiteFleet } from './fleet.ts';
import { keysFileText } from './keyed-gateway.ts';
import type { SpecKey } from './keyed-gateway.ts';

/**
 * Starts, before the tests of the enclosing describe (or file), a fleet with `options` whose
 * gateway reads a keys file listing `keys` (its `gatewayArgs` follow `--keys`), and stops it after
 * them. The handle's fields throw when read before the fleet started.
 */
export function keyedFleetForSuite(keys: readonly SpecKey[], options: FleetOptions): SuiteFleet {
  const started = startedForSuite(
    'keyed fleet',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'sluice-keyed-fleet-'));
      try {
        const keysFile = join(dir, 'keys.json');
        await writeFile(keysFile, keysFileText(keys));
        return {
          dir,
          fleet: await startFleet({ ...options, gatewayArgs: ['--keys', keysFile, ...(options.gatewayArgs ?? [])] }),
        };
      } catch (error) {
        await rm(dir, { recursive: true, force: true });
        throw error;
      }
    },
    async ({ dir, fleet }: { dir: string; fleet: Fleet }) => {
      await fleet.stop();
      await rm(dir, { recursive: true, force: true });
    },
    60_000,
  );
  return suiteFleet(() => started().fleet);
}
