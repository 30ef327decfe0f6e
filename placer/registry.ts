/**
 * Turns a placer name from the command line or a config file into a Placer: a built-in by
 * name, or a custom one loaded from a package or a module path.
 */
import { pathToFileURL } from 'node:url';
import { descriptor as consistentHash } from './consistent-hash/index.ts';
import type { PlacerContext, PlacerDescriptor } from './descriptor.ts';
import { PlacerConfigError } from './errors.ts';
import { systemClock } from './kernel/index.ts';
import type { Clock } from './kernel/index.ts';
import { descriptor as kvAware } from './kv-aware/index.ts';
import { descriptor as leastLoaded } from './least-loaded/index.ts';
import { descriptor as loadWeighted } from './load-weighted/index.ts';
import { resolvePlacerModule } from './module.ts';
import { descriptor as prefixAffinity } from './prefix-affinity/index.ts';
import { descriptor as roundRobin } from './round-robin/index.ts';
import type { Placer } from './types.ts';

/** The built-in placers' descriptors by name, built from what each placer folder exports. */
export const placerDescriptors: Readonly<Record<string, PlacerDescriptor>> = Object.freeze(
  Object.fromEntries(
    [roundRobin, consistentHash, leastLoaded, loadWeighted, prefixAffinity, kvAware].map((d) => [d.name, d]),
  ),
);

/**
 * The built-in placers by name, as factories on the system clock (the gateway's default), for
 * code that makes a placer outside a gateway. Factories, not instances, because placers keep
 * state (the round-robin counter, the sort cache, the prefix index) that two gateways in one
 * process must not share.
 */
export const builtinPlacers: Readonly<Record<string, (options?: Record<string, unknown>) => Placer>> = Object.freeze(
  Object.fromEntries(
    Object.values(placerDescriptors).map((d) => [
      d.name,
      (o?: Record<string, unknown>) => d.create(o, { clock: systemClock }),
    ]),
  ),
);

/**
 * A fresh built-in placer by name, its options checked against the descriptor's keys first, since a
 * misspelt option would otherwise be ignored without a word.
 * @throws PlacerConfigError for an unknown name or option, or a bad option value.
 */
export function createBuiltinPlacer(
  name: string,
  options: Record<string, unknown> | undefined,
  context: PlacerContext,
): Placer {
  const descriptor = Object.hasOwn(placerDescriptors, name) ? placerDescriptors[name] : undefined;
  if (descriptor === undefined) {
    throw new PlacerConfigError(
      `unknown placer ${JSON.stringify(name)}: use ${Object.keys(placerDescriptors).join(', ')}, a package or a module path`,
    );
  }
  const known = descriptor.optionKeys;
  for (const key of Object.keys(options ?? {})) {
    if (!known.includes(key)) {
      throw new PlacerConfigError(
        `placer ${name} has no option ${JSON.stringify(key)}; it takes ${known.length ? known.join(', ') : 'none'}`,
      );
    }
  }
  return descriptor.create(options, context);
}

/** Options for {@link loadPlacer}. */
export interface LoadPlacerOptions {
  /**
   * Directory a package name or a relative module path is resolved from.
   * @default process.cwd()
   */
  cwd?: string;
  /**
   * Options for the placer: passed to a built-in's factory (e.g. `{ loadFactor: 1.5 }` for
   * consistent-hash), or to a module's factory as its first argument.
   */
  options?: Record<string, unknown>;
  /**
   * The gateway's clock, handed to the placer in its context (a module's factory gets it as its
   * second argument): load-aware placers compare report times with it.
   * @default the kernel's systemClock, the gateway's default clock
   */
  clock?: Clock;
}

/**
 * Resolves `spec` to a placer. A built-in name gives a fresh built-in. Anything else is a module,
 * resolved as Node resolves an import from a module in `cwd`: a package name or one of its
 * subpaths (`my-placer`, `@team/placers/sticky`), or a path (starting with `.` or `/`, absolute,
 * or ending in .js/.mjs/.cjs/.ts/.mts/.cts), ES module or CommonJS. Its `default` export, else
 * its export named `placer`, is used: either a Placer object or a factory (sync or async)
 * returning one, called with the options and the context (the clock). A CommonJS module's
 * `module.exports` is its default export, so `exports.default` and `exports.placer` count too.
 * Loading .ts modules needs a Node that strips types, or a TypeScript loader such as tsx.
 * @throws PlacerNotFoundError when no package or module resolves from `spec`.
 * @throws PlacerConfigError naming `spec` and what is wrong with the module or the options.
 */
export async function loadPlacer(spec: string, opts: LoadPlacerOptions = {}): Promise<Placer> {
  const context: PlacerContext = Object.freeze({ clock: opts.clock ?? systemClock });
  if (Object.hasOwn(placerDescriptors, spec)) return createBuiltinPlacer(spec, opts.options, context);
  const label = `placer ${JSON.stringify(spec)}`;
  const file = resolvePlacerModule(spec, opts.cwd ?? process.cwd(), Object.keys(placerDescriptors));

  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    throw new PlacerConfigError(`${label} could not be loaded from ${file}: ${messageOf(error)}`, { cause: error });
  }

  let candidate = exported(mod);
  if (candidate === undefined) {
    throw new PlacerConfigError(`${label} has neither a default export nor an export named placer`);
  }
  // A function without its own order() is a factory; a Placer that happens to be a function is not.
  if (typeof candidate === 'function' && typeof (candidate as { order?: unknown }).order !== 'function') {
    try {
      candidate = await (
        candidate as (options: Record<string, unknown> | undefined, context: PlacerContext) => unknown
      )(opts.options, context);
    } catch (error) {
      throw new PlacerConfigError(`${label} factory threw: ${messageOf(error)}`, { cause: error });
    }
  }
  return checkPlacer(label, candidate);
}

/**
 * The placer a module exports: its default export, else its export named `placer`. A CommonJS
 * module's default is its `module.exports`; when that is an object holding the placer as
 * `default` (TypeScript's CommonJS output) or `placer`, that holds it.
 */
function exported(mod: Record<string, unknown>): unknown {
  const candidate = mod.default !== undefined ? mod.default : mod.placer;
  if (typeof candidate !== 'object' || candidate === null || 'order' in candidate) return candidate;
  const inner = candidate as Record<string, unknown>;
  return inner.default ?? inner.placer ?? candidate;
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
