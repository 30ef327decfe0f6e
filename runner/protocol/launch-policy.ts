/**
 * A launch policy: what an operator lets engine orders run on their node. A runner enforces its
 * own on every order it reads, whatever a gateway sent; a gateway checks its own on every
 * deployment before storing it, so a bad one is answered 400 at once rather than failing on
 * every runner. The rules per kind are launch-rules.ts's; this file adds what the operator
 * chose (`--engine-binary`, `--engine-env-allow`) and checks a profile against both.
 */
import { show } from '../../placer/kernel/index.ts';
import { LAUNCH_RULES, PROFILE_KINDS, isNeverEnv, isProfileKind, reservedFlagOf } from './launch-rules.ts';
import type { ProfileKind } from './launch-rules.ts';

/** What an operator allows engine orders to launch, per kind. */
export interface LaunchPolicy {
  /**
   * Executables an order may name as `binary`, exactly as written: the kind's usual entry point
   * (searched on the runner's PATH) and the ones the operator added. An order naming none gets
   * the kind's usual one.
   */
  readonly binaries: Readonly<Record<ProfileKind, readonly string[]>>;
  /** Environment variable names an order may set: the kind's allow-list and the operator's additions. */
  readonly envAllow: Readonly<Record<ProfileKind, readonly string[]>>;
}

/** What an operator gives: `kind=path` entries, and `NAME` (every kind) or `kind=NAME` entries. */
export interface LaunchPolicyOptions {
  /** `kind=path`, e.g. `vllm=/opt/vllm/bin/vllm`: an executable orders of that kind may name. @default none */
  readonly binaries?: readonly string[];
  /** `NAME` or `kind=NAME`: an environment variable orders (of that kind) may set. @default none */
  readonly envAllow?: readonly string[];
}

/** Names as a POSIX shell takes them; anything else is refused as an environment name. */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

function perKind<T>(make: (kind: ProfileKind) => T): Record<ProfileKind, T> {
  return Object.fromEntries(PROFILE_KINDS.map((kind) => [kind, make(kind)])) as Record<ProfileKind, T>;
}

/** The policy with nothing added: each kind's usual entry point and allow-list. */
export const DEFAULT_LAUNCH_POLICY: LaunchPolicy = Object.freeze({
  binaries: Object.freeze(
    perKind((kind) => Object.freeze(LAUNCH_RULES[kind].binary === undefined ? [] : [LAUNCH_RULES[kind].binary!])),
  ),
  envAllow: Object.freeze(perKind((kind) => Object.freeze([...LAUNCH_RULES[kind].envAllow]))),
});

/** A policy, or the first problem with the options, naming the option and the entry. */
export type LaunchPolicyCheck =
  | { readonly kind: 'ok'; readonly policy: LaunchPolicy }
  | { readonly kind: 'invalid'; readonly problem: string };

/**
 * The policy `options` describe: the defaults plus each entry. A binary must be an absolute path
 * or a bare name (a relative path would depend on the working directory); an environment name
 * may never be one of NEVER_ENV (launch-rules.ts) nor one the runner sets itself.
 */
export function resolveLaunchPolicy(options: LaunchPolicyOptions = {}): LaunchPolicyCheck {
  const binaries = perKind((kind) => [...DEFAULT_LAUNCH_POLICY.binaries[kind]]);
  const envAllow = perKind((kind) => [...DEFAULT_LAUNCH_POLICY.envAllow[kind]]);
  const invalid = (problem: string): LaunchPolicyCheck => ({ kind: 'invalid', problem });
  for (const [option, list] of [
    ['engineBinaries', options.binaries],
    ['engineEnvAllow', options.envAllow],
  ] as const) {
    if (list !== undefined && (!Array.isArray(list) || list.some((entry) => typeof entry !== 'string')))
      return invalid(`${option} must be a list of strings, got ${show(list)}`);
  }
  for (const entry of options.binaries ?? []) {
    const eq = entry.indexOf('=');
    const kind = entry.slice(0, eq);
    const path = entry.slice(eq + 1);
    if (eq === -1 || !isProfileKind(kind))
      return invalid(
        `engineBinaries entry ${show(entry)} must be kind=path with kind one of ${PROFILE_KINDS.join(', ')}`,
      );
    if (path === '' || /[\0\n\r]/.test(path) || (path.includes('/') && !path.startsWith('/'))) {
      return invalid(`engineBinaries entry ${show(entry)} must name an absolute path or a bare name searched on PATH`);
    }
    if (!binaries[kind].includes(path)) binaries[kind].push(path);
  }
  for (const entry of options.envAllow ?? []) {
    const eq = entry.indexOf('=');
    const kind = eq === -1 ? undefined : entry.slice(0, eq);
    const name = eq === -1 ? entry : entry.slice(eq + 1);
    if (kind !== undefined && !isProfileKind(kind))
      return invalid(
        `engineEnvAllow entry ${show(entry)} must be NAME or kind=NAME with kind one of ${PROFILE_KINDS.join(', ')}`,
      );
    if (!ENV_NAME.test(name))
      return invalid(`engineEnvAllow entry ${show(entry)} must name an environment variable (letters, digits, _)`);
    if (isNeverEnv(name))
      return invalid(
        `engineEnvAllow entry ${show(entry)}: ${name} can make a process run other code and is never allowed`,
      );
    for (const k of kind === undefined ? PROFILE_KINDS : [kind]) {
      const set = LAUNCH_RULES[k].reservedEnv[name];
      if (set !== undefined)
        return invalid(`engineEnvAllow entry ${show(entry)}: ${name} is set by the runner from profile.${set}`);
      if (!envAllow[k].includes(name)) envAllow[k].push(name);
    }
  }
  return {
    kind: 'ok',
    policy: Object.freeze({
      binaries: Object.freeze(perKind((kind) => Object.freeze(binaries[kind]))),
      envAllow: Object.freeze(perKind((kind) => Object.freeze(envAllow[kind]))),
    }),
  };
}

/** One thing a profile may not launch: the field (`profile.env.BASH_ENV`) and why, in one line. */
export interface LaunchProblem {
  readonly field: string;
  readonly message: string;
  /**
   * Which rule: `reserved`, an option the runner sets (refused in every profile); `forbidden`, an
   * option refused in orders only (a runner's own --profile is its operator's); `binary`, `env`
   * and `args` (arguments for a kind that takes none).
   */
  readonly rule: 'binary' | 'model' | 'args' | 'reserved' | 'forbidden' | 'env';
}

/** The launch-relevant fields of a profile, as an order or a deployment carries them. */
export interface LaunchFields {
  readonly kind: string;
  readonly model?: unknown;
  readonly binary?: unknown;
  readonly args?: unknown;
  readonly env?: unknown;
}

/**
 * Every problem with what `profile` would launch under `policy`: a binary the policy does not
 * list, arguments for a kind that takes none, an argument reaching a reserved or forbidden option
 * in any spelling the kind's parser takes, an environment name the runner sets, that is never allowed, or that the kind's
 * allow-list does not hold. Structure (types, NUL bytes) is the callers' check; values are never
 * quoted, since args and env carry an engine's credentials.
 */
export function launchProblems(profile: LaunchFields, policy: LaunchPolicy = DEFAULT_LAUNCH_POLICY): LaunchProblem[] {
  const { kind } = profile;
  if (!isProfileKind(kind)) return [];
  const problems: LaunchProblem[] = [];
  const add = (rule: LaunchProblem['rule'], field: string, message: string): void =>
    void problems.push({ field, message: `${field} ${message}`, rule });
  const allowed = policy.binaries[kind];
  if (typeof profile.binary === 'string' && !allowed.includes(profile.binary)) {
    const list =
      allowed.length === 0 ? 'none (the runner runs its own sluice)' : allowed.map((b) => JSON.stringify(b)).join(', ');
    add(
      'binary',
      'profile.binary',
      `${show(profile.binary)} is not an executable this node's operator allows for kind ${kind}: allowed ${list}; leave binary out for the kind's usual one, or add it with --engine-binary ${kind}=PATH`,
    );
  }
  // vLLM takes the model as a positional argument: one starting with `-` would be read as an
  // option (`--trust-remote-code`), and no engine names a model so.
  if (typeof profile.model === 'string' && profile.model.startsWith('-'))
    add('model', 'profile.model', 'must not start with "-": the engine would read it as an option');
  const { noArgs } = LAUNCH_RULES[kind];
  if (Array.isArray(profile.args) && profile.args.length > 0 && noArgs !== undefined)
    add('args', 'profile.args', `must be empty for kind ${kind} (${noArgs})`);
  if (Array.isArray(profile.args)) {
    profile.args.forEach((arg: unknown, i) => {
      if (typeof arg !== 'string') return;
      const hit = reservedFlagOf(kind, arg);
      if (hit === undefined) return;
      // The option's name, never the argument: `--api-key=…` would quote a key.
      // A short option may carry its value attached (`-p8000`): only a long option's name is shown.
      const name = arg.split('=', 1)[0]!;
      const seen =
        hit.flag === name
          ? show(name)
          : name.startsWith('--')
            ? `${show(name)} (read as ${hit.flag})`
            : `an option read as ${hit.flag}`;
      if (hit.field !== undefined)
        add(
          'reserved',
          `profile.args[${i}]`,
          `${seen} is set by the runner from profile.${hit.field}; set it there instead`,
        );
      else add('forbidden', `profile.args[${i}]`, `${seen} is not allowed: ${hit.why}`);
    });
  }
  if (profile.env !== null && typeof profile.env === 'object' && !Array.isArray(profile.env)) {
    for (const name of Object.keys(profile.env)) {
      const field = `profile.env.${ENV_NAME.test(name) ? name : JSON.stringify(name)}`;
      const set = LAUNCH_RULES[kind].reservedEnv[name];
      if (set !== undefined) add('env', field, `is set by the runner from profile.${set}; set it there instead`);
      else if (isNeverEnv(name)) add('env', field, 'can make the engine run other code and is never allowed');
      else if (!policy.envAllow[kind].includes(name)) {
        add(
          'env',
          field,
          `is not an environment variable this node's operator allows for kind ${kind}; add it with --engine-env-allow ${kind}=${ENV_NAME.test(name) ? name : 'NAME'} (docs/security.md lists each kind's)`,
        );
      }
    }
  }
  return problems;
}
