/**
 * Deployments: per model, what engine to launch and how many replicas of it to keep. A
 * deployment is data; the reconciler (reconciler.ts) acts on it, ordering engines onto the
 * runners that take orders.
 *
 * Validation returns every problem found, one line each, naming the model and the field, so an
 * operator fixes a file in one pass. Messages never quote `profile.args` or `profile.env` values:
 * that is where an engine's credentials go (`--api-key`, HF_TOKEN).
 */
import { createHash } from 'node:crypto';
import { show } from '../../placer/kernel/index.ts';
import { DEFAULT_LAUNCH_POLICY, PROFILE_KINDS, launchProblems } from '../../runner/protocol/index.ts';
import type { LaunchPolicy, OrderedProfile, ProfileKind } from '../../runner/protocol/index.ts';

/**
 * The engine to launch for a deployment: what its replicas are ordered with (the wire's
 * OrderedProfile, runner/protocol/registration.ts, whose fields say what each holds and its
 * default), of a kind the runners know. The port is optional (the runner picks a free one) and
 * the GPUs are either indices or a count the runner satisfies from its free GPUs.
 */
export interface DeploymentProfile extends OrderedProfile {
  /** One of the runner's profile kinds; checked here, so a runner is never ordered an unknown one. */
  readonly kind: ProfileKind;
}

/** A deployment that passed {@link checkDeployment}, with defaults applied; frozen. */
export interface Deployment {
  /** The model name clients call (may hold a slash: `org/name`). */
  readonly model: string;
  readonly profile: DeploymentProfile;
  /** Replicas kept even with no calls; 0 allows scale to zero. @default see deploymentDefaults */
  readonly minReplicas: number;
  /** Replicas at most, however busy. @default see deploymentDefaults */
  readonly maxReplicas: number;
  /** Concurrent calls one replica is meant to carry; the reconciler scales on it. @default see deploymentDefaults */
  readonly targetConcurrency: number;
  /** How long load must stay under target before a replica is removed, in ms. @default see deploymentDefaults */
  readonly scaleDownDelay: number;
  /** Labels a runner must carry to host a replica (`{ zone: 'a' }`); empty, any runner. @default {} */
  readonly runnerLabels: Readonly<Record<string, string>>;
}

/**
 * The defaults of a deployment's fields, from the systems it follows (docs/operations.md,
 * "Deployments"): Knative's scale-to-zero minimum and concurrency target of 100 per replica,
 * LocalAI's 5-minute scale-down delay. maxReplicas has no outside default (Knative's is
 * unbounded); 1 keeps a deployment that forgot it from taking a fleet's GPUs.
 */
export const deploymentDefaults = Object.freeze({
  minReplicas: 0,
  maxReplicas: 1,
  targetConcurrency: 100,
  scaleDownDelay: 300_000,
});

/** The most replicas one deployment may ask for: past this it is a typo, not a plan. */
export const MAX_REPLICAS = 1024;
/** The longest scale-down delay, in ms (a day). */
const MAX_DELAY_MS = 86_400_000;

const FIELDS = [
  'model',
  'profile',
  'minReplicas',
  'maxReplicas',
  'targetConcurrency',
  'scaleDownDelay',
  'runnerLabels',
];
const PROFILE_FIELDS = ['kind', 'model', 'gpus', 'port', 'binary', 'args', 'env', 'startTimeout'];
/** Label names and values as runners give them (`--label zone=a`). */
const LABEL = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$/;

/** What {@link checkDeployment} found: the deployment, or every problem with it. */
export type DeploymentCheck =
  | { readonly kind: 'valid'; readonly deployment: Deployment }
  | { readonly kind: 'invalid'; readonly problems: readonly string[] };

/**
 * Checks one deployment and applies defaults. `where` starts each problem (`deployment
 * "org/m"`), so a file's problems name their entry. The profile must keep to `policy`, the
 * launch policy runners enforce too (runner/protocol/launch-policy.ts): binaries it lists,
 * environment names it allows, no reserved option in any spelling.
 */
export function checkDeployment(
  value: unknown,
  where?: string,
  policy: LaunchPolicy = DEFAULT_LAUNCH_POLICY,
): DeploymentCheck {
  const problems: string[] = [];
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'invalid', problems: [`${where ?? 'deployment'}: must be an object, got ${kindOf(value)}`] };
  }
  const d = value as Record<string, unknown>;
  const model = d.model;
  const at = where ?? (typeof model === 'string' ? `deployment ${JSON.stringify(model)}` : 'deployment');
  const fail = (message: string): void => void problems.push(`${at}: ${message}`);

  for (const key of Object.keys(d))
    if (!FIELDS.includes(key)) fail(`unknown field ${show(key)}; known fields: ${FIELDS.join(', ')}`);
  if (typeof model !== 'string' || model.trim() === '' || model !== model.trim() || /[\0-\x1f]/.test(model)) {
    fail(`model must be a non-empty string without control characters or surrounding spaces, got ${show(model)}`);
  }
  const min = count(d.minReplicas, deploymentDefaults.minReplicas, 0, 'minReplicas', fail);
  const max = count(d.maxReplicas, deploymentDefaults.maxReplicas, 1, 'maxReplicas', fail);
  if (min !== undefined && max !== undefined && min > max)
    fail(`minReplicas ${min} must be at most maxReplicas ${max}`);
  const target = count(d.targetConcurrency, deploymentDefaults.targetConcurrency, 1, 'targetConcurrency', fail);
  const delay = d.scaleDownDelay ?? deploymentDefaults.scaleDownDelay;
  if (!Number.isSafeInteger(delay) || (delay as number) < 0 || (delay as number) > MAX_DELAY_MS) {
    fail(`scaleDownDelay must be a whole number of ms from 0 to ${MAX_DELAY_MS}, got ${show(delay)}`);
  }
  const labels = checkLabels(d.runnerLabels, fail);
  const profile = checkProfile(d.profile, typeof model === 'string' ? model : '', fail, policy);

  if (problems.length > 0) return { kind: 'invalid', problems };
  return {
    kind: 'valid',
    deployment: Object.freeze({
      model: model as string,
      profile: profile!,
      minReplicas: min!,
      maxReplicas: max!,
      targetConcurrency: target!,
      scaleDownDelay: delay as number,
      runnerLabels: labels!,
    }),
  };
}

/**
 * A deployment's revision: 16 hex digits of a SHA-256 of what its replicas were launched with
 * and where (the profile and the runner labels, keys sorted), the same on every gateway. The
 * replica counts, the target and the delay are not in it: changing them never restarts an
 * engine. It goes to runners in their orders and comes back in their reports, on the runner wire
 * that carries the profile itself; no route or log shows it, since args and env may hold an
 * engine's credentials.
 */
export function deploymentRevision(deployment: Pick<Deployment, 'profile' | 'runnerLabels'>): string {
  return createHash('sha256')
    .update(sortedJson({ profile: deployment.profile, runnerLabels: deployment.runnerLabels }))
    .digest('hex')
    .slice(0, 16);
}

/** JSON with every object's keys in order, so equal profiles read equal however they were written. */
function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${sortedJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function count(
  value: unknown,
  fallback: number,
  min: number,
  field: string,
  fail: (m: string) => void,
): number | undefined {
  const v = value ?? fallback;
  if (Number.isSafeInteger(v) && (v as number) >= min && (v as number) <= MAX_REPLICAS) return v as number;
  fail(`${field} must be a whole number from ${min} to ${MAX_REPLICAS}, got ${show(value)}`);
  return undefined;
}

function checkLabels(value: unknown, fail: (m: string) => void): Readonly<Record<string, string>> | undefined {
  if (value === undefined) return Object.freeze({});
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(`runnerLabels must be an object of label names to values, e.g. {"zone":"a"}, got ${kindOf(value)}`);
    return undefined;
  }
  let ok = true;
  for (const [name, v] of Object.entries(value)) {
    if (!LABEL.test(name)) {
      fail(`runnerLabels has an invalid label name ${show(name)} (letters, digits, . _ / -, up to 63)`);
      ok = false;
    } else if (typeof v !== 'string' || !LABEL.test(v)) {
      fail(`runnerLabels.${name} must be a label value (letters, digits, . _ / -, up to 63), got ${show(v)}`);
      ok = false;
    }
  }
  return ok ? Object.freeze({ ...(value as Record<string, string>) }) : undefined;
}

function checkProfile(
  value: unknown,
  model: string,
  fail: (m: string) => void,
  policy: LaunchPolicy,
): DeploymentProfile | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(`profile must be an object with at least a kind (${PROFILE_KINDS.join(', ')}), got ${kindOf(value)}`);
    return undefined;
  }
  const p = value as Record<string, unknown>;
  let ok = true;
  const bad = (message: string): void => {
    fail(message);
    ok = false;
  };
  for (const key of Object.keys(p))
    if (!PROFILE_FIELDS.includes(key))
      bad(`profile has an unknown field ${show(key)}; known fields: ${PROFILE_FIELDS.join(', ')}`);
  const kind = p.kind as ProfileKind;
  const known = typeof kind === 'string' && (PROFILE_KINDS as readonly string[]).includes(kind);
  if (!known) bad(`profile.kind must be one of ${PROFILE_KINDS.join(', ')}, got ${show(kind)}`);
  const engineModel = p.model ?? model;
  if (typeof engineModel !== 'string' || engineModel.trim() === '') {
    // Without profile.model the deployment's model is used, and a bad one is reported as model.
    if (p.model === undefined) ok = false;
    else bad(`profile.model must be a non-empty string, got ${show(p.model)}`);
  }
  const gpus = p.gpus ?? 0;
  if (Array.isArray(gpus)) {
    const seen = new Set<unknown>();
    gpus.forEach((gpu, i) => {
      if (!Number.isSafeInteger(gpu) || (gpu as number) < 0)
        bad(`profile.gpus[${i}] must be a GPU index (a whole number from 0), got ${show(gpu)}`);
      else if (seen.has(gpu)) bad(`profile.gpus lists GPU ${gpu as number} twice`);
      seen.add(gpu);
    });
  } else if (!Number.isSafeInteger(gpus) || (gpus as number) < 0 || (gpus as number) > 64) {
    bad(`profile.gpus must be a list of GPU indices or a GPU count from 0 to 64, got ${show(gpus)}`);
  }
  const gpuCount = Array.isArray(gpus) ? gpus.length : (gpus as number);
  if (known && kind === 'sim' && gpuCount > 0)
    bad(`profile.gpus must be empty or 0 for kind sim (the simulated engine uses no GPUs), got ${show(gpus)}`);
  if (
    p.port !== undefined &&
    (!Number.isSafeInteger(p.port) || (p.port as number) < 1 || (p.port as number) > 65_535)
  ) {
    bad(
      `profile.port must be a whole number from 1 to 65535, or absent for the runner to pick one, got ${show(p.port)}`,
    );
  }
  if (p.binary !== undefined && (typeof p.binary !== 'string' || p.binary === ''))
    bad(`profile.binary must be a non-empty string, got ${show(p.binary)}`);
  if (p.startTimeout !== undefined && (!Number.isSafeInteger(p.startTimeout) || (p.startTimeout as number) < 1)) {
    bad(`profile.startTimeout must be a whole number of ms from 1, got ${show(p.startTimeout)}`);
  }
  const args = p.args ?? [];
  if (!Array.isArray(args)) bad(`profile.args must be a list of strings, got ${kindOf(args)}`);
  else {
    args.forEach((arg, i) => {
      if (typeof arg !== 'string' || arg.includes('\0'))
        bad(`profile.args[${i}] must be a string without NUL bytes, got ${kindOf(arg)}`);
    });
  }
  const env = p.env ?? {};
  if (typeof env !== 'object' || env === null || Array.isArray(env))
    bad(`profile.env must be an object of string values, got ${kindOf(env)}`);
  else {
    for (const [name, v] of Object.entries(env)) {
      if (name === '' || name.includes('=') || name.includes('\0'))
        bad(`profile.env has an invalid variable name ${show(name)}`);
      else if (typeof v !== 'string' || v.includes('\0'))
        bad(`profile.env.${name} must be a string without NUL bytes, got ${kindOf(v)}`);
    }
  }
  // What the runners will refuse to launch, refused here first: the same rules, from the wire.
  if (known)
    for (const problem of launchProblems({ kind, model: engineModel, binary: p.binary, args, env }, policy))
      bad(problem.message);
  if (!ok) return undefined;
  return Object.freeze({
    kind,
    model: engineModel as string,
    gpus: Array.isArray(gpus) ? Object.freeze([...(gpus as number[])]) : (gpus as number),
    ...(p.port === undefined ? {} : { port: p.port as number }),
    ...(p.binary === undefined ? {} : { binary: p.binary as string }),
    args: Object.freeze([...(args as string[])]),
    env: Object.freeze({ ...(env as Record<string, string>) }),
    ...(p.startTimeout === undefined ? {} : { startTimeout: p.startTimeout as number }),
  });
}

/** What sort of value `value` is, for a message that must not quote it. */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return `${/^[aeiou]/.test(typeof value) ? 'an' : 'a'} ${typeof value}`;
}
