/**
 * Where a new replica of a deployment may go: for every runner, a fit or the reason it does not
 * fit, then one runner among the fits, spreading a model's replicas over the runners' labels.
 *
 * A runner fits when, in the order checked (the first failed check is its reason):
 * - it reports a capacity (a runner of a version that hosts no ordered engines does not);
 * - it takes engine orders (`capacity.orders`; a runner started with its own engine does not);
 * - it is placeable (not draining, not missing heartbeats);
 * - it hosts no engine and is ordered none (one ordered engine per runner);
 * - it can launch the profile's kind;
 * - it carries every label the deployment selects on, with the wanted value;
 * - it has the GPUs: the count free, or each listed index free.
 * A runner an attempt of this same operation already failed on fits only when no other does,
 * and then the one whose failure is oldest goes first, so retries alternate over the runners.
 *
 * Among the fits the one whose labels are shared by the fewest replicas of the model wins, so
 * replicas spread over zones and racks; ties go to the smaller id, so placement is deterministic.
 */
import type { Deployment } from './deployments.ts';
import type { FleetRunner } from './fleet.ts';

/** An engine a runner hosts or is ordered to, as placement sees it. */
export interface Occupant {
  readonly replica: string;
  readonly model: string;
  /** `ordered`: ordered, not yet reported; `hosted`: reported by the runner. */
  readonly how: 'ordered' | 'hosted';
}

/** One runner's answer for a replica: it fits, or why not. */
export type RunnerFit =
  | { readonly kind: 'fits'; readonly runner: FleetRunner; readonly failedBefore: boolean }
  | { readonly kind: 'misfit'; readonly runner: FleetRunner; readonly reason: string };

/** Where placement found a replica's runner, or every runner's reason when none fits. */
export type Placement =
  | { readonly kind: 'placed'; readonly runner: FleetRunner }
  | { readonly kind: 'unplaced'; readonly reasons: Readonly<Record<string, string>> };

/** What placement reads besides the runners. */
export interface PlacementInput {
  readonly deployment: Deployment;
  readonly runners: readonly FleetRunner[];
  /** What each runner hosts or is ordered, by runner id (hosted engines that are stopped excluded). */
  readonly occupants: ReadonlyMap<string, Occupant>;
  /** Runners an attempt of this operation failed on, with when it last failed there. */
  readonly failedOn: ReadonlyMap<string, number>;
}

/** Whether `runner` can take a new replica of `deployment`, and if not, why (one line, no secrets). */
export function fitRunner(
  runner: FleetRunner,
  deployment: Deployment,
  occupant: Occupant | undefined,
  failedBefore: boolean,
): RunnerFit {
  const misfit = (reason: string): RunnerFit => ({ kind: 'misfit', runner, reason });
  const capacity = runner.capacity;
  if (!capacity) return misfit('reports no capacity (a runner older than engine orders)');
  if (capacity.orders !== true) return misfit('takes no engine orders (it runs an engine of its own)');
  if (!runner.placeable) return misfit('not placeable (draining, or missing heartbeats)');
  if (occupant)
    return misfit(
      `${occupant.how === 'hosted' ? 'hosts' : 'is ordered'} replica ${occupant.replica} of model ${occupant.model} (one ordered engine per runner)`,
    );
  const { profile, runnerLabels } = deployment;
  if (!capacity.engineKinds.includes(profile.kind)) {
    return misfit(
      `cannot launch kind ${profile.kind} (it can launch: ${capacity.engineKinds.length > 0 ? capacity.engineKinds.join(', ') : 'none'})`,
    );
  }
  for (const [key, wanted] of Object.entries(runnerLabels)) {
    const has = capacity.labels[key];
    if (has === undefined) return misfit(`label ${key} missing, wanted ${wanted}`);
    if (has !== wanted) return misfit(`label ${key} is ${has}, wanted ${wanted}`);
  }
  const free = capacity.freeGpus;
  if (Array.isArray(profile.gpus)) {
    const taken = (profile.gpus as readonly number[]).find((gpu) => !free.includes(gpu));
    if (taken !== undefined)
      return misfit(`GPU ${taken} not free (free: ${free.length > 0 ? free.join(', ') : 'none'})`);
  } else if ((profile.gpus as number) > free.length) {
    return misfit(`needs ${profile.gpus as number} free GPUs, has ${free.length}`);
  }
  return { kind: 'fits', runner, failedBefore };
}

/**
 * True when a replica of `deployment` would fit on `runner` once the ordered engine it hosts,
 * launched with `held` GPUs (indices, or a count), stopped: the runner free, those GPUs back. A
 * count comes back as stand-ins that no GPU index matches, so a profile naming indices is not
 * assumed to fit where the old engine's GPUs are unknown.
 */
export function fitsOnceFreed(runner: FleetRunner, held: readonly number[] | number, deployment: Deployment): boolean {
  if (!runner.capacity) return false;
  const back = Array.isArray(held)
    ? (held as readonly number[])
    : Array.from({ length: held as number }, (_, i) => -1 - i);
  const freed: FleetRunner = {
    ...runner,
    capacity: { ...runner.capacity, freeGpus: [...runner.capacity.freeGpus, ...back] },
  };
  return fitRunner(freed, deployment, undefined, false).kind === 'fits';
}

/** Every runner's fit for a new replica of the input's deployment, in the runners' order. */
export function fitsFor(input: PlacementInput): RunnerFit[] {
  return input.runners.map((runner) =>
    fitRunner(runner, input.deployment, input.occupants.get(runner.id), input.failedOn.has(runner.id)),
  );
}

/**
 * The runner a new replica goes to, or every runner's reason. A runner this operation failed
 * on already is chosen only when no other fits (a retry on it beats no retry at all), the
 * longest-ago failure first.
 */
export function placeReplica(input: PlacementInput): Placement {
  const fits = fitsFor(input);
  const fitting = fits.filter((f): f is Extract<RunnerFit, { kind: 'fits' }> => f.kind === 'fits');
  const fresh = fitting.filter((f) => !f.failedBefore);
  let candidates = (fresh.length > 0 ? fresh : fitting).map((f) => f.runner);
  if (fresh.length === 0 && candidates.length > 0) {
    const failedAt = (r: FleetRunner): number => input.failedOn.get(r.id) ?? 0;
    const oldest = Math.min(...candidates.map(failedAt));
    candidates = candidates.filter((r) => failedAt(r) === oldest);
  }
  if (candidates.length === 0) {
    const reasons: Record<string, string> = {};
    for (const f of fits) if (f.kind === 'misfit') reasons[f.runner.id] = f.reason;
    return { kind: 'unplaced', reasons };
  }
  const model = input.deployment.model;
  // Label pairs of the runners holding a replica of the model, counted once per replica.
  const byRunner = new Map(input.runners.map((r) => [r.id, r]));
  const shared = new Map<string, number>();
  for (const [runnerId, occupant] of input.occupants) {
    if (occupant.model !== model) continue;
    for (const pair of labelPairs(byRunner.get(runnerId))) shared.set(pair, (shared.get(pair) ?? 0) + 1);
  }
  const score = (r: FleetRunner): number => labelPairs(r).reduce((sum, pair) => sum + (shared.get(pair) ?? 0), 0);
  const best = candidates.reduce((a, b) => {
    const sa = score(a);
    const sb = score(b);
    return sb < sa || (sb === sa && b.id < a.id) ? b : a;
  });
  return { kind: 'placed', runner: best };
}

function labelPairs(runner: FleetRunner | undefined): string[] {
  return Object.entries(runner?.capacity?.labels ?? {}).map(([k, v]) => `${k}=${v}`);
}
