/**
 * `--deployments deployments.json` on `sluice gateway` and `sluice up`: the file is read and
 * checked before the gateway is made, and a bad one stops it with each problem on its own line.
 */
import { DeploymentsFileError } from '../errors.ts';
import type { DeploymentStore } from '../deploy/store.ts';
import type { Setting } from './settings.ts';

/** The deployments setting, shared by `gateway` and `up`. */
export const deploymentSettings: readonly Setting[] = [
  {
    key: 'deployments',
    type: 'string',
    description: 'deployments file: a JSON list of deployments (model, engine profile, min/max replicas, target, scale-down delay, runner labels), checked at start-up and read once; nothing scales from them yet (docs/operations.md)',
    defaultText: 'none: deployments only through the API',
  },
];

/**
 * The deployment store for `values`: with --deployments, one holding the file's deployments
 * (read-only through the API). The CLI prints only an error's first line, so a bad file's
 * problems are written here, one a line, to `write`, and the error thrown sums them up.
 * @throws DeploymentsFileError when the file cannot be read or holds an invalid deployment.
 */
export async function deploymentsOptions(
  values: Record<string, unknown>,
  now: () => number,
  write: (text: string) => void = (text) => void process.stderr.write(text),
): Promise<{ deployments?: DeploymentStore }> {
  const file = values.deployments as string | undefined;
  if (file === undefined) return {};
  const [{ loadDeploymentsFile }, { MemoryDeploymentStore }] = await Promise.all([import('../deploy/file.ts'), import('../deploy/store.ts')]);
  try {
    return { deployments: new MemoryDeploymentStore({ fileDeployments: await loadDeploymentsFile(file), now }) };
  } catch (error) {
    if (!(error instanceof DeploymentsFileError)) throw error;
    for (const problem of error.problems) write(`${problem}\n`);
    const count = error.problems.length;
    throw new DeploymentsFileError([`deployments file ${file}: ${count} problem${count === 1 ? '' : 's'}, each on its own line above; the gateway does not start`], { cause: error });
  }
}
