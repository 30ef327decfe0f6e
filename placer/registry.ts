/**
 * Turns a placer name from the command line or a config file into a Placer: a built-in by
 * name, or a custom one loaded from a module path.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createConsistentHashPlacer } from './consistent-hash/index.ts';
import { PlacerConfigError } from './errors.ts';
import { createLeastLoadedPlacer } from './least-loaded/index.ts';
import { createLoadWeightedPlacer } from './load-weighted/index.ts';
import { createPrefixAffinityPlacer } from './prefix-affinity/index.ts';
import { createRoundRobinPlacer } from './round-robin/index.ts';
import type { Placer } from './types.ts';

/**
 * The built-in placers by name, each with its default options. Factories, not instances, because
 * placers keep state (the round-robin counter, the sort cache, the prefix index) that two gateways
 * in one process must not share.
 */
export const builtinPlacers: Readonly<Record<string, (options?: Record<string, unknown>) => Placer>> = Object.freeze({
  'round-robin': (o) => createRoundRobinPlacer(o),
  'consistent-hash': (o) => createConsistentHashPlacer(o),
  'least-loaded': (o) => createLeastLoadedPlacer(o),
  'load-weighted': (o) => createLoadWeightedPlacer(o),
  'prefix-affinity': (o) => createPrefixAffinityPlacer(o),
});

/** The options each built-in takes from a config (functions such as random are code-only). */
const BUILTIN_OPTION_KEYS: Readonly<Record<string, readonly string[]>> = {
  'round-robin': [],
  'consistent-hash': ['loadFactor'],
  'least-loaded': ['staleAfterMs'],
  'load-weighted': ['staleAfterMs'],
  'prefix-affinity': ['staleAfterMs', 'blockSize', 'maxBlocks', 'minMatchRatio', 'balanceAbsThreshold', 'balanceRelThreshold'],
};

/** Options for {@link loadPlacer}. */
export interface LoadPlacerOptions {
  /**
   * Directory a relative module path is resolved against.
   * @default process.cwd()
   */
  cwd?: string;
  /**
   * Options for the placer: passed to a built-in's factory (e.g. `{ loadFactor: 1.5 }` for
   * consistent-hash), or to a module's factory as its one argument.
   */
  options?: Record<string, unknown>;
}

const MODULE_EXTENSION = /\.(?:[cm]?js|[cm]?ts)$/;

/**
 * Resolves `spec` to a placer. A built-in name gives a fresh built-in. A module path (starting
 * with `.` or `/`, absolute, or ending in .js/.mjs/.cjs/.ts/.mts/.cts) is imported, and its
 * `default` export, else its export named `placer`, is used: either a Placer object or a
 * zero-argument factory (sync or async) returning one. Loading .ts modules needs a TypeScript
 * loader such as tsx in the running process.
 * @throws PlacerConfigError naming `spec` and what is wrong with it.
 */
export async function loadPlacer(spec: string, opts: LoadPlacerOptions = {}): Promise<Placer> {
  if (Object.hasOwn(builtinPlacers, spec)) {
    // A misspelt option would otherwise be ignored without a word.
    const known = BUILTIN_OPTION_KEYS[spec] ?? [];
    for (const key of Object.keys(opts.options ?? {})) {
      if (!known.includes(key)) {
        throw new PlacerConfigError(`placer ${spec} has no option ${JSON.stringify(key)}; it takes ${known.length ? known.join(', ') : 'none'}`);
      }
    }
    return builtinPlacers[spec]!(opts.options);
  }
  if (!isModulePath(spec)) {
    const names = Object.keys(builtinPlacers).join(', ');
    throw new PlacerConfigError(`unknown placer ${JSON.stringify(spec)}: use ${names} or a module path`);
  }
  const label = `placer ${JSON.stringify(spec)}`;
  const file = resolve(opts.cwd ?? process.cwd(), spec);

  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    throw new PlacerConfigError(`${label} could not be loaded from ${file}: ${messageOf(error)}`, { cause: error });
  }

  let candidate = mod['default'] !== undefined ? mod['default'] : mod['placer'];
  if (candidate === undefined) {
    throw new PlacerConfigError(`${label} has neither a default export nor an export named placer`);
  }
  // A function without its own order() is a factory; a Placer that happens to be a function is not.
  if (typeof candidate === 'function' && typeof (candidate as { order?: unknown }).order !== 'function') {
    try {
      candidate = await (candidate as (options?: Record<string, unknown>) => unknown)(opts.options);
    } catch (error) {
      throw new PlacerConfigError(`${label} factory threw: ${messageOf(error)}`, { cause: error });
    }
  }
  return checkPlacer(label, candidate);
}

function isModulePath(spec: string): boolean {
  return spec.startsWith('.') || spec.startsWith('/') || isAbsolute(spec) || MODULE_EXTENSION.test(spec);
}

function checkPlacer(label: string, value: unknown): Placer {
  const shape = value as { name?: unknown; order?: unknown } | null | undefined;
  const isObject = (typeof value === 'object' || typeof value === 'function') && value !== null;
  if (!isObject || typeof shape?.order !== 'function') {
    throw new PlacerConfigError(`${label} does not export an object with order(call, runners)`);
  }
  if (typeof shape.name !== 'string' || shape.name === '') {
    throw new PlacerConfigError(`${label} does not export an object with a non-empty string name`);
  }
  return value as Placer;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
