/**
 * The deployments file (`--deployments deployments.json`, or `.yaml`): a list of deployments in
 * JSON or YAML (placer/kernel/data-text.ts), checked
 * whole at start-up, one problem a line, each naming the entry and the field. A bad file stops
 * the gateway. It is read once: a change takes a restart (the API changes deployments live).
 */
import { readFile } from 'node:fs/promises';
import { cappedProblems, dataListEntries } from '../../placer/kernel/index.ts';
import { DeploymentsFileError } from '../errors.ts';
import { checkDeployment } from './deployments.ts';
import type { Deployment } from './deployments.ts';
import type { LaunchPolicy } from '../../runner/protocol/index.ts';

/** The most problems one error lists; the rest are counted. */
const MAX_LISTED = 50;

/**
 * The deployments in a deployments file's text. `file` names the file in messages, and its
 * extension the format (JSON or YAML); `policy` is
 * the gateway's launch policy (checkDeployment's default when absent).
 * @throws DeploymentsFileError whose `problems` holds every problem, one line each.
 */
export function parseDeploymentsFile(text: string, file: string, policy?: LaunchPolicy): Deployment[] {
  const entries = dataListEntries(text, file, 'model', (fault) =>
    DeploymentsFileError.of(file, [
      fault.kind === 'unparsable'
        ? `not ${fault.format}: ${fault.message}`
        : `must be a ${fault.format} list of deployments, got ${fault.value === null ? 'null' : typeof fault.value}`,
    ]),
  );
  const problems: string[] = [];
  const deployments: Deployment[] = [];
  const seen = new Map<string, number>();
  for (const { entry, index, where } of entries) {
    const model = (entry as { model?: unknown } | null)?.model;
    const checked = checkDeployment(entry, where, policy);
    if (checked.kind === 'invalid') problems.push(...checked.problems);
    if (typeof model === 'string') {
      const first = seen.get(model);
      if (first !== undefined) problems.push(`${where}: model is already deployed by entry ${first}`);
      else seen.set(model, index);
    }
    if (checked.kind === 'valid') deployments.push(checked.deployment);
  }
  if (problems.length > 0) throw DeploymentsFileError.of(file, cappedProblems(problems, MAX_LISTED));
  return deployments;
}

/** Reads and checks a deployments file. @throws DeploymentsFileError when it cannot be read or is not valid. */
export async function loadDeploymentsFile(path: string, policy?: LaunchPolicy): Promise<Deployment[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw DeploymentsFileError.of(path, [`cannot be read: ${(error as Error).message}`], { cause: error });
  }
  return parseDeploymentsFile(text, path, policy);
}
