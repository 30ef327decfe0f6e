/**
 * What a runner can host, as it advertises it to gateways (the Capacity of the wire): its
 * labels, the GPUs its engine does not hold, and the engine kinds whose binaries it has. The
 * gateway's reconciler places new replicas by these (gateway/control/replica-fit.ts).
 */
import { show } from '../placer/kernel/index.ts';
import { KIND_RULES, PROFILE_KINDS } from './engines/argv.ts';
import type { ProfileKind } from './engines/argv.ts';
import { RunnerConfigError } from './errors.ts';
import type { GpuInventory } from './protocol/index.ts';
import { REGISTRATION_LIMITS, labelPairProblem } from './protocol/index.ts';

/**
 * Checks the `labels` option: an object of keys and values, or a list of `key=value` texts (as
 * `--label zone=a,gpu=h100` gives them), each by the wire's LABEL_RULE (Kubernetes label syntax). A key given twice is
 * refused, since which one wins would be a guess.
 * @throws {RunnerConfigError} naming `labels`, the bad label and the rule.
 */
export function parseLabels(value: unknown): Readonly<Record<string, string>> {
  if (value === undefined) return Object.freeze({});
  let pairs: Array<[unknown, unknown]>;
  if (Array.isArray(value)) {
    pairs = value.map((item: unknown) => {
      if (typeof item !== 'string' || !item.includes('='))
        throw new RunnerConfigError(`labels must be key=value texts, got ${show(item)}`);
      const eq = item.indexOf('=');
      return [item.slice(0, eq), item.slice(eq + 1)];
    });
  } else if (value !== null && typeof value === 'object') {
    pairs = Object.entries(value);
  } else {
    throw new RunnerConfigError(
      `labels must be an object of keys and values or a list of key=value texts, got ${show(value)}`,
    );
  }
  const max = REGISTRATION_LIMITS.labels;
  if (pairs.length > max) throw new RunnerConfigError(`labels must hold at most ${max} labels, got ${pairs.length}`);
  const labels: Record<string, string> = {};
  for (const [key, text] of pairs) {
    const problem = labelPairProblem(key, text);
    if (problem) throw new RunnerConfigError(`labels: ${problem}`);
    if (Object.hasOwn(labels, key as string)) throw new RunnerConfigError(`labels gives ${show(key)} twice`);
    labels[key as string] = text as string;
  }
  return Object.freeze(labels);
}

/**
 * The inventory's GPU indices that `held` (the GPUs of the engine this runner launched) does not
 * take, in index order. An engine behind `--engine` is not the runner's: the GPUs it uses are
 * unknown here and count as free.
 */
export function freeGpus(inventory: GpuInventory, held: readonly number[]): number[] {
  const taken = new Set(held);
  return inventory.gpus
    .map((gpu) => gpu.index)
    .filter((index) => !taken.has(index))
    .sort((a, b) => a - b);
}

/**
 * The engine kinds this runner can launch: each kind whose default binary is on its PATH (one
 * lookup per kind, nothing spawned; for sglang that is the Python interpreter, so sglang itself
 * may still be missing), and `sim`, which the runner launches as itself.
 * @param findBinary the PATH search profile validation uses (runner/engines/profile.ts).
 */
export async function launchableKinds(
  findBinary: (name: string) => Promise<string | undefined>,
): Promise<ProfileKind[]> {
  const found = await Promise.all(
    PROFILE_KINDS.map(async (kind) => {
      const binary = KIND_RULES[kind].binary;
      if (binary === undefined) return kind === 'sim';
      return (await findBinary(binary)) !== undefined;
    }),
  );
  return PROFILE_KINDS.filter((_, i) => found[i]);
}
