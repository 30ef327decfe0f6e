/**
 * `--deployments deployments.json` on `sluice gateway` and `sluice up`: the file is read and
 * checked before the gateway is made, and a bad one stops it with each problem on its own line.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import { DeploymentsFileError } from '../errors.ts';
import type { Deployment } from '../control/deployments.ts';
import type { ReconcilerDeploymentStatus } from '../control/reconciler-options.ts';
import type { ReconcilerSettings } from '../control/serverless.ts';
import type { DeploymentStore } from '../control/store.ts';
import type { Setting } from './settings.ts';
import { SettingsError } from './settings.ts';
import { storeRedisOf } from './store-redis.ts';
import { resolveLaunchPolicy } from '../../runner/protocol/index.ts';
import type { LaunchPolicy } from '../../runner/protocol/index.ts';

/** The deployments setting, shared by `gateway` and `up`. */
export const deploymentSettings: readonly Setting[] = [
  {
    key: 'deployments',
    type: 'string',
    description:
      "deployments file: a JSON or YAML list of deployments (model, engine profile, min/max replicas, target, scale-down delay, runner labels), checked at start-up and read once; the reconciler keeps each one's replicas on the runners that take orders (docs/operations.md)",
    defaultText: 'none: deployments only through the API',
  },
  {
    key: 'reconcilePeriod',
    type: 'duration',
    description: 'time between reconciler passes (a call for a model with no ready replica brings one at once)',
    defaultText: '30s',
  },
  {
    key: 'scaleStableWindow',
    type: 'duration',
    description: 'window the reconciler averages concurrent calls over to size a deployment',
    defaultText: '60s',
  },
  {
    key: 'scalePanicWindow',
    type: 'duration',
    description:
      'short window that scales a deployment up at once on a burst (at twice its target); concurrency is sampled every second, or six times a window shorter than 6s',
    defaultText: '6s',
  },
  {
    key: 'startBackoff',
    type: 'duration',
    description: 'wait before retrying a failed replica start; doubles each attempt',
    defaultText: '30s',
  },
  {
    key: 'startBackoffCap',
    type: 'duration',
    description: 'longest wait between replica start attempts',
    defaultText: '15m',
  },
  {
    key: 'startAttempts',
    type: 'integer',
    description: 'replica start attempts before the operation goes to the dead-letter list',
    defaultText: '10',
  },
  {
    key: 'engineBinary',
    type: 'list',
    repeatable: true,
    description:
      "executables deployments may name as profile.binary besides each kind's usual entry point, kind=path, comma-separated or repeated, e.g. vllm=/opt/vllm/bin/vllm; runners check their own list too (docs/security.md)",
    defaultText: "none: each kind's usual entry point only",
  },
  {
    key: 'engineEnvAllow',
    type: 'list',
    repeatable: true,
    description:
      "environment variables deployments may set besides each kind's allow-list, NAME or kind=NAME, comma-separated or repeated; LD_*, BASH_ENV, NODE_OPTIONS, PYTHON*, PATH and the like are never allowed (docs/security.md)",
    defaultText: "none: each kind's allow-list only",
  },
  {
    key: 'leaseTtl',
    type: 'duration',
    description:
      'several gateways on one Redis store: how long the reconciling gateway keeps the lease without renewing it (another takes over after)',
    defaultText: '15s',
  },
];

/**
 * The launch policy `--engine-binary` and `--engine-env-allow` give (the gateway makes the same
 * from its engineBinaries and engineEnvAllow options).
 * @throws SettingsError naming the bad entry.
 */
export function launchPolicyOf(values: Record<string, unknown>): LaunchPolicy {
  const resolved = resolveLaunchPolicy({
    binaries: values.engineBinary as string[] | undefined,
    envAllow: values.engineEnvAllow as string[] | undefined,
  });
  if (resolved.kind === 'invalid')
    throw new SettingsError(
      resolved.problem.replace(/^engineBinaries/, '--engine-binary').replace(/^engineEnvAllow/, '--engine-env-allow'),
    );
  return resolved.policy;
}

/** The reconciler settings by CLI key, as named in the gateway's `reconciler` option. */
const RECONCILER_KEYS = {
  reconcilePeriod: 'period',
  scaleStableWindow: 'stableWindow',
  scalePanicWindow: 'panicWindow',
  startBackoff: 'startBackoffBase',
  startBackoffCap: 'startBackoffCap',
  startAttempts: 'startAttempts',
} as const;

/** The reconciler's settings given in `values`, under their option names; the reconciler checks them. */
export function reconcilerSettings(values: Record<string, unknown>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, option] of Object.entries(RECONCILER_KEYS))
    if (values[key] !== undefined) out[option] = values[key] as number;
  // Concurrency is sampled every second, or six times a panic window shorter than six seconds
  // (the default window holds six samples), so a short window still averages several.
  if (out.panicWindow !== undefined && out.panicWindow < 6_000)
    out.sampleInterval = Math.max(10, Math.floor(out.panicWindow / 6));
  return out;
}

/** What {@link deploymentsOptions} needs besides the settings. */
export interface DeploymentsContext {
  now: () => number;
  logger: Logger;
  /** This gateway's id: the reconciler's Redis lease is held under it. */
  gatewayId: string;
  /** Where a bad file's problems are written, one a line. @default stderr */
  write?: (text: string) => void;
}

/**
 * The deployment store and the reconciler's settings for `values`. With --deployments, the
 * store holds the file's deployments (read-only through the API). With a Redis `--store`, API
 * deployments, the reconciler's lease and its demand and status boards live in that Redis, on one
 * connection, so every gateway on it shares them and one reconciles. The CLI prints only an
 * error's first line, so a bad file's problems are written here, one a line, and the error
 * thrown sums them up.
 * @throws DeploymentsFileError when the file cannot be read or holds an invalid deployment.
 */
export async function deploymentsOptions(
  values: Record<string, unknown>,
  context: DeploymentsContext,
): Promise<{ deployments?: DeploymentStore; reconciler: ReconcilerSettings }> {
  const { now, logger, gatewayId, write = (text: string) => void process.stderr.write(text) } = context;
  const file = values.deployments as string | undefined;
  const redis = storeRedisOf(values);
  const tunables = reconcilerSettings(values);
  const deploy = await import('../control/index.ts');
  const policy = launchPolicyOf(values);
  let fileDeployments: readonly Deployment[] = [];
  if (file !== undefined) {
    try {
      fileDeployments = await deploy.loadDeploymentsFile(file, policy);
    } catch (error) {
      if (!(error instanceof DeploymentsFileError)) throw error;
      for (const problem of error.problems) write(`${problem}\n`);
      const count = error.problems.length;
      throw new DeploymentsFileError(
        [
          `deployments file ${file}: ${count} problem${count === 1 ? '' : 's'}, each on its own line above; the gateway does not start`,
        ],
        { cause: error },
      );
    }
  }
  const period = tunables.period ?? deploy.reconcilerDefaults.period;
  const leaseTtl = values.leaseTtl as number | undefined;
  if (redis === undefined) {
    return {
      ...(file === undefined ? {} : { deployments: new deploy.MemoryDeploymentStore({ fileDeployments, now }) }),
      reconciler: tunables,
    };
  }
  // One connection for the deployment pieces, made as each would make its own; they leave a
  // shared client open, so it is closed once, after them.
  const { openRedis, closeRedis } = await import('../control/redis-client.ts');
  const connection = openRedis({ url: redis.url, ...redis.timeouts }, 'deployments');
  const client = connection.client;
  const shared = { client };
  return {
    deployments: new deploy.RedisDeploymentStore({ ...shared, fileDeployments, now, logger, policy }),
    reconciler: {
      ...tunables,
      lease: new deploy.RedisLease({
        ...shared,
        gatewayId,
        logger,
        ...(leaseTtl === undefined ? {} : { ttl: leaseTtl }),
      }),
      demand: new deploy.RedisDemandBoard({ ...shared, gatewayId, logger, now }),
      statusBoard: new deploy.RedisStatusBoard<ReconcilerDeploymentStatus>({ ...shared, logger, periodMs: period }),
      onClose: () => closeRedis(connection),
    },
  };
}
