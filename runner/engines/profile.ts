/**
 * Engine profiles: what the runner launches, and the checks that refuse a bad one before
 * launch. An engine that dislikes its arguments says so only after minutes of loading
 * weights, so everything the runner can know in advance (binary, GPUs, port, arguments)
 * is checked here, and the first problem found is thrown as one message naming the field.
 */
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import { checksFor, show } from '../../placer/kernel/index.ts';
import { PROFILE_KINDS, KIND_RULES } from './argv.ts';
import { ProfileError } from './errors.ts';
import type { ProfileKind, EngineLaunch } from './argv.ts';
import { launchProblems } from '../protocol/index.ts';
import type { LaunchPolicy } from '../protocol/index.ts';

/** An engine profile as written in the runner's JSON config. */
export interface EngineProfile {
  kind: ProfileKind;
  /** Model to serve: a Hugging Face id or a local path (a GGUF file for llamacpp; a tag for ollama). */
  model: string;
  /** Indices of the GPUs the engine may use (nvidia-smi's `index`). @default none: the engine sees what the runner sees */
  gpus?: number[];
  /** Port the engine listens on. */
  port: number;
  /** Interface the engine listens on. @default `127.0.0.1` */
  host?: string;
  /**
   * Executable, searched on PATH unless it contains a `/`. For sglang it is the Python interpreter
   * (`-m sglang.launch_server` follows it); for sim, the `sluice` command.
   * @default vllm: `vllm`; sglang: `python3`; llamacpp: `llama-server`; tgi: `text-generation-launcher`;
   * ollama: `ollama`; sim: none, the caller's `simCommand` is used
   */
  binary?: string;
  /** Extra arguments appended after the ones the runner sets. @default [] */
  args?: string[];
  /** Environment variables set over the runner's own. @default {} */
  env?: Record<string, string>;
  /** How long the engine may take to become ready, in ms. @default see KIND_RULES (runner/engines/argv.ts), per engine kind */
  startTimeout?: number;
}

/** A profile that passed {@link validateProfile}, with defaults applied; frozen. */
export interface ValidProfile extends EngineLaunch {
  readonly startTimeout: number;
}

/** What validation needs to know about this node; injected so tests are exact. */
export interface ProfileFacts {
  /** Indices of the GPUs on this node; empty on a CPU-only node. */
  gpuIndices: readonly number[];
  /** Absolute path of an executable by name (PATH search) or path, or undefined when there is none. */
  findBinary(name: string): Promise<string | undefined>;
  /** True when `host:port` can be bound now; rejects when `host` cannot be bound at all. */
  portFree(host: string, port: number): Promise<boolean>;
}

const FIELDS = ['kind', 'model', 'gpus', 'port', 'host', 'binary', 'args', 'env', 'startTimeout'];
const check = checksFor(ProfileError);

/**
 * Checks a profile against its kind's rules and this node, and applies defaults. With `policy`
 * (a profile that came in an order, not the runner's own) it must also keep to what this node's
 * operator allows: a listed binary, allowed environment names (runner/protocol/launch-policy.ts).
 * @throws {ProfileError} naming the first bad field and its value (never an args or env value).
 */
export async function validateProfile(
  profile: unknown,
  facts: ProfileFacts,
  policy?: LaunchPolicy,
): Promise<ValidProfile> {
  if (typeof profile !== 'object' || profile === null || Array.isArray(profile)) {
    throw check.fail(`profile must be an object, got ${show(profile)}`);
  }
  const p = profile as Record<string, unknown>;
  // A misspelt field (`gpu` for `gpus`) would otherwise launch silently on the wrong hardware.
  const unknown = Object.keys(p).find((key) => !FIELDS.includes(key));
  if (unknown !== undefined)
    throw check.fail(`profile has an unknown field ${show(unknown)}; known fields: ${FIELDS.join(', ')}`);

  const kind = p.kind;
  if (typeof kind !== 'string' || !(PROFILE_KINDS as readonly string[]).includes(kind)) {
    throw check.fail(`profile.kind must be one of ${PROFILE_KINDS.join(', ')}, got ${show(kind)}`);
  }
  const rules = KIND_RULES[kind as ProfileKind];
  if (typeof p.model !== 'string' || p.model.trim() === '')
    throw check.fail(`profile.model must be a non-empty string, got ${show(p.model)}`);
  const port = check.integer('profile.port', p.port, { min: 1, max: 65_535 });
  const host = p.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host === '')
    throw check.fail(`profile.host must be a non-empty string, got ${show(host)}`);
  const gpus = checkGpus(p.gpus, kind as ProfileKind, facts.gpuIndices);
  const args = checkArgs(p.args, kind as ProfileKind, p.model);
  const env = checkEnv(p.env, rules.env);
  if (policy !== undefined) {
    const [problem] = launchProblems({ kind, binary: p.binary, args, env }, policy);
    if (problem !== undefined) throw check.fail(problem.message);
  }
  const startTimeout = check.ms('profile.startTimeout', p.startTimeout ?? rules.startTimeout, 1);

  let binary: string | undefined;
  const name = p.binary ?? rules.binary;
  if (name !== undefined) {
    if (typeof name !== 'string' || name === '')
      throw check.fail(`profile.binary must be a non-empty string, got ${show(name)}`);
    binary = await facts.findBinary(name);
    if (binary === undefined) {
      throw check.fail(
        p.binary === undefined
          ? `${name} (the default binary for kind ${kind}) was not found on PATH; install it or set profile.binary`
          : `profile.binary ${show(name)} was not found${name.includes('/') ? ' or is not executable' : ' on PATH'}`,
      );
    }
  }

  let free: boolean;
  try {
    free = await facts.portFree(host, port);
  } catch (error) {
    const code = (error as { code?: unknown }).code ?? (error as Error).message;
    throw new ProfileError(`profile.host ${show(host)} cannot be bound on this node (${String(code)})`, {
      cause: error,
    });
  }
  if (!free)
    throw check.fail(
      `profile.port ${port} is not free on ${host}: something listens there or binding it is not allowed`,
    );

  return Object.freeze({
    kind: kind as ProfileKind,
    model: p.model,
    gpus: Object.freeze(gpus),
    port,
    host,
    binary,
    args: Object.freeze(args),
    env: Object.freeze(env),
    startTimeout,
  });
}

function checkGpus(value: unknown, kind: ProfileKind, onNode: readonly number[]): number[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw check.fail(`profile.gpus must be an array of GPU indices, got ${show(value)}`);
  if (kind === 'sim' && value.length > 0) {
    throw check.fail(`profile.gpus must be empty for kind sim (the simulated engine uses no GPUs), got ${show(value)}`);
  }
  const seen = new Set<number>();
  for (const [i, gpu] of value.entries()) {
    check.integer(`profile.gpus[${i}]`, gpu, { min: 0 });
    if (seen.has(gpu)) throw check.fail(`profile.gpus lists GPU ${gpu} twice`);
    seen.add(gpu);
    if (!onNode.includes(gpu)) {
      const has = onNode.length === 0 ? 'this node has no GPUs' : `this node has GPUs ${onNode.join(', ')}`;
      throw check.fail(`profile.gpus[${i}]: GPU ${gpu} is not on this node (${has})`);
    }
  }
  return [...value] as number[];
}

function checkArgs(value: unknown, kind: ProfileKind, model: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw check.fail(`profile.args must be an array of strings, got ${show(value)}`);
  for (const [i, arg] of value.entries()) {
    // spawn() refuses a NUL byte only at launch; say so now, with the index.
    if (typeof arg !== 'string' || arg.includes('\0'))
      throw check.fail(`profile.args[${i}] must be a string without NUL bytes, got ${show(arg)}`);
  }
  const args = value as string[];
  const rules = KIND_RULES[kind];
  if (rules.noArgs !== undefined && args.length > 0)
    throw check.fail(`profile.args must be empty for kind ${kind} (${rules.noArgs}), got ${show(args)}`);
  // Reserved options in every spelling the kind's parser reads (`--ho=0.0.0.0` is `--host` to
  // argparse). Forbidden ones are refused in orders only (validateProfile's policy): the runner's
  // own profile is its operator's, who may trust a model's remote code.
  const [reserved] = launchProblems({ kind, model, args }).filter((p) => p.rule === 'reserved' || p.rule === 'model');
  if (reserved !== undefined) throw check.fail(reserved.message);
  for (const [i, arg] of args.entries()) {
    const eq = arg.startsWith('-') ? arg.indexOf('=') : -1;
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    if (!rules.valued.has(flag)) continue;
    if (eq !== -1) {
      if (eq === arg.length - 1)
        throw check.fail(`profile.args[${i}] ${show(arg)} needs a value, got nothing after "="`);
      continue;
    }
    const next = args[i + 1];
    // Negative numbers (`--seed -1`) are values, not options.
    if (next === undefined || /^-[^\d.]/.test(next)) {
      throw check.fail(
        `profile.args[${i}] ${show(arg)} needs a value, got ${next === undefined ? 'nothing after it' : `${show(next)} after it`}`,
      );
    }
  }
  return [...args];
}

/**
 * The messages name what is wrong with profile.env but never quote its values: that is where an
 * engine's credentials go (HF_TOKEN, VLLM_API_KEY).
 */
function checkEnv(value: unknown, reserved: Readonly<Record<string, string>>): Record<string, string> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw check.fail(`profile.env must be an object of string values, got ${kindOf(value)}`);
  }
  const env: Record<string, string> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key === '' || key.includes('=') || key.includes('\0'))
      throw check.fail(`profile.env has an invalid variable name ${show(key)}`);
    if (typeof v !== 'string') throw check.fail(`profile.env.${key} must be a string, got ${kindOf(v)}`);
    if (v.includes('\0')) throw check.fail(`profile.env.${key} must not contain NUL bytes`);
    const field = reserved[key];
    if (field !== undefined)
      throw check.fail(`profile.env.${key} is set by the runner from profile.${field}; set it there instead`);
    env[key] = v;
  }
  return env;
}

/** The GPU list of a node, as the runner's inventory reports it. */
export interface GpuList {
  readonly gpus: readonly { readonly index: number }[];
}

/**
 * Facts read from this node: the inventory's GPU indices, a PATH search, and a real bind test.
 * @param searchPath directories to search, `:`-separated. @default `process.env.PATH`, the PATH
 * the engine inherits, since the runner spawns the path found here.
 */
export function defaultProfileFacts(inventory: GpuList, searchPath: string = process.env.PATH ?? ''): ProfileFacts {
  return {
    gpuIndices: inventory.gpus.map((gpu) => gpu.index),
    async findBinary(name) {
      if (name.includes('/')) return (await isExecutable(name)) ? resolve(name) : undefined;
      for (const dir of searchPath.split(delimiter)) {
        if (dir === '' || !isAbsolute(dir)) continue; // a relative PATH entry depends on the cwd
        const candidate = join(dir, name);
        if (await isExecutable(candidate)) return candidate;
      }
      return undefined;
    },
    portFree(host, port) {
      return new Promise((resolvePromise, reject) => {
        const server = createServer();
        server.once('error', (error: NodeJS.ErrnoException) => {
          if (error.code === 'EADDRINUSE' || error.code === 'EACCES') resolvePromise(false);
          else reject(error);
        });
        server.listen({ host, port, exclusive: true }, () => server.close(() => resolvePromise(true)));
      });
    },
  };
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** What sort of value `value` is, for a message that must not quote it. */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `${/^[aeiou]/.test(typeof value) ? 'an' : 'a'} ${typeof value}`;
}
