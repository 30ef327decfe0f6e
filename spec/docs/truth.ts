/**
 * The names the code defines, as the docs may write them: each command's flags and environment
 * variables (from the commands' own settings tables), the error codes, the metric families and
 * labels as Prometheus shows them, and the flags the product passes to other programs.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { commands } from '../../gateway/cli/commands.ts';
import { envNamesOf, envOf, flagOf } from '../../gateway/cli/settings.ts';
import { PRODUCT, read, root, sources } from '../layers/sources.ts';

/** Each command's flags, `--config` and `--help` included, and every environment variable they read. */
export interface CommandNames {
  readonly flags: ReadonlyMap<string, ReadonlySet<string>>;
  readonly envs: ReadonlySet<string>;
  /** Each flag's variables, over every command that takes it (`--runners`: the gateway's and `up`'s). */
  readonly envsOfFlag: ReadonlyMap<string, ReadonlySet<string>>;
}

/** The flags and variables of every sluice command, read from its settings table. */
export async function commandNames(): Promise<CommandNames> {
  const flags = new Map<string, Set<string>>();
  const envs = new Set<string>();
  const envsOfFlag = new Map<string, Set<string>>();
  for (const [name, load] of Object.entries(commands)) {
    const command = await load();
    const own = new Set(['--config', '--help']);
    for (const setting of command.settings) {
      const flag = flagOf(setting.key);
      own.add(flag);
      const ofFlag = envsOfFlag.get(flag) ?? envsOfFlag.set(flag, new Set()).get(flag)!;
      for (const env of envNamesOf(setting, command.envPrefix)) {
        envs.add(env);
        ofFlag.add(env);
      }
    }
    envs.add(envOf('config', command.envPrefix));
    flags.set(name, own);
  }
  return { flags, envs, envsOfFlag };
}

/** The command line's own scripts beside its TypeScript: the bin and the build. */
const SCRIPTS = ['gateway/cli/sluice.mjs', 'gateway/cli/build.mjs', 'gateway/cli/tsx-sluice.mjs'];

/** The product's source, every file's text joined (the folders the layer specs read, and SCRIPTS). */
export function productText(): string {
  return [...PRODUCT.flatMap(sources), ...SCRIPTS].map((file) => read(file)).join('\n');
}

/**
 * The specs' source, every file's text joined: a switch a spec reads is one a page may name. The
 * docs specs are left out: their planted names are not read by anything.
 */
export function specText(): string {
  return sources('spec')
    .filter((file) => !file.startsWith(join('spec', 'docs')))
    .map((file) => read(file))
    .join('\n');
}

/** Folders no page's file name can mean. */
const NOT_SOURCE: ReadonlySet<string> = new Set(['.git', 'node_modules', 'dist', 'bench-results']);

/** The name of every file in the repository's tree below `dir`, build output and dependencies aside. */
export function fileNames(dir = root): Set<string> {
  const out = new Set<string>();
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (NOT_SOURCE.has(entry.name)) continue;
    if (entry.isDirectory()) for (const name of fileNames(join(dir, entry.name))) out.add(name);
    else out.add(entry.name);
  }
  return out;
}

/** Every match of `pattern`'s first group in `text`. */
const all = (text: string, pattern: RegExp): string[] => [...text.matchAll(pattern)].map((m) => m[1]!);

/** Flags the product writes as literals: engines' argv, the bench's own scripts, `--version`. */
export function literalFlags(text: string): Set<string> {
  return new Set(all(text, /['"`](--[a-z][a-z0-9-]*)/g));
}

/**
 * SLUICE_* names the code reads or declares outside the settings tables: `env.SLUICE_X`, a quoted
 * `'SLUICE_X'`, a `const SLUICE_X`.
 */
export function literalEnvs(text: string): Set<string> {
  return new Set(all(text, /(?:env\.|['"`]|\bconst\s+)(SLUICE_[A-Z0-9_]*[A-Z0-9])\b/g));
}

/** The codes the product defines under `prefixes`: every quoted `PREFIX_NAME` literal. */
export function errorCodes(text: string, prefixes: readonly string[]): Set<string> {
  const code = new RegExp(`['"\`]((?:${prefixes.join('|')})[A-Z0-9_]*[A-Z0-9])['"\`]`, 'g');
  return new Set(all(text, code));
}

/** Each code declared with an errorClass (the kernel's, an area's own, or one over it) and the statuses it is declared with. */
export function declaredStatuses(text: string): Map<string, Set<number>> {
  const statuses = new Map<string, Set<number>>();
  for (const m of text.matchAll(/[eE]rrorClass\(\s*'([A-Z0-9_]+)',\s*(\d{3})\b/g)) {
    const of = statuses.get(m[1]!) ?? statuses.set(m[1]!, new Set()).get(m[1]!)!;
    of.add(Number(m[2]));
  }
  return statuses;
}

/** What a call that makes an instrument is, by the function's name. */
const isCounter = (fn: string): boolean => (/counter$/i.test(fn) && !/updown/i.test(fn)) || fn === 'count';
const isHistogram = (fn: string): boolean => /histogram$/i.test(fn);

/**
 * The metric names a Prometheus page of the product shows: a counter as `<name>_total`, a
 * histogram as its name and its `_bucket`, `_sum` and `_count` series, another instrument by its
 * name; a `sluice_*` literal made by no instrument call as written (a family the simulator writes
 * itself, a name a bench reads); an attribute `sluice.x.y` as its label `sluice_x_y`.
 */
export function metricNames(text: string): Set<string> {
  const names = new Set<string>();
  const made = new Set<string>();
  for (const m of text.matchAll(/(\w+)\(\s*(?:\w+,\s*)?'(sluice_[a-z0-9_]+)'/g)) {
    const [fn, name] = [m[1]!, m[2]!];
    made.add(name);
    if (isCounter(fn)) names.add(`${name}_total`);
    else if (isHistogram(fn)) for (const suffix of ['', '_bucket', '_sum', '_count']) names.add(`${name}${suffix}`);
    else names.add(name);
  }
  for (const name of all(text, /['"`](sluice_[a-z0-9_]*[a-z0-9])\b/g)) if (!made.has(name)) names.add(name);
  for (const name of all(text, /['"`](sluice\.[a-z0-9_.]*[a-z0-9])['"`]/g)) names.add(name.replaceAll('.', '_'));
  return names;
}
