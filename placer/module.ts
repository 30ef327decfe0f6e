/**
 * Where a custom placer's module is: `--placer` resolved as Node resolves an import written in a
 * module in the working directory, so a package installed there (`--placer my-placer`), one of
 * its subpaths (`--placer @team/placers/sticky`) and a file (`--placer ./my-placer.js`) all load.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isAbsolute, join, resolve } from 'node:path';
import { PlacerNotFoundError } from './errors.ts';

/**
 * The conditions an ES module import matches in a package's `exports`. Node's require.resolve
 * matches `require` instead, so a package that exports its entry only under `import` is looked up
 * again with these.
 */
const IMPORT_CONDITIONS: readonly string[] = ['node', 'import', 'default'];

const MODULE_EXTENSION = /\.(?:[cm]?js|[cm]?ts)$/;

/** True when `spec` names a file rather than a package: it starts with `.` or `/`, or has a module extension. */
export function isModulePath(spec: string): boolean {
  return spec.startsWith('.') || spec.startsWith('/') || isAbsolute(spec) || MODULE_EXTENSION.test(spec);
}

/**
 * The file `spec` (a package name, a package subpath, or a path) names, resolved from `cwd`.
 * @param builtins the built-in placers' names, which the error lists
 * @throws PlacerNotFoundError naming `spec`, the built-ins, `cwd` and what was tried.
 */
export function resolvePlacerModule(spec: string, cwd: string, builtins: readonly string[]): string {
  // A file need not exist to anchor a require: only its folder counts.
  const require = createRequire(join(resolve(cwd), 'placer-module.js'));
  const path = isModulePath(spec);
  try {
    return require.resolve(path ? resolve(cwd, spec) : spec);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const imported = code === 'ERR_PACKAGE_PATH_NOT_EXPORTED' ? importTarget(spec, require) : undefined;
    if (imported !== undefined) return imported;
    const tried = path ? `there is no module at ${resolve(cwd, spec)}` : `no package ${spec} resolves from ${cwd}`;
    throw new PlacerNotFoundError(
      `placer ${JSON.stringify(spec)} is none of the built-ins (${builtins.join(', ')}) and ${tried} (${code ?? 'not found'})`,
      { cause: error },
    );
  }
}

/** The file a package that exports `spec` only to ES module imports gives an import of it, if any. */
function importTarget(spec: string, require: NodeJS.Require): string | undefined {
  const parts = spec.split('/');
  const nameLength = spec.startsWith('@') ? 2 : 1;
  const name = parts.slice(0, nameLength).join('/');
  const subpath = ['.', ...parts.slice(nameLength)].join('/');
  for (const dir of require.resolve.paths(name) ?? []) {
    const manifest = join(dir, name, 'package.json');
    if (!existsSync(manifest)) continue;
    const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: unknown };
    const target = conditional(subpathsOf(exports)[subpath]);
    return target === undefined ? undefined : join(dir, name, target);
  }
  return undefined;
}

/** A package's `exports` as a map from subpath to target: a bare target or conditions stand for `.`. */
function subpathsOf(exports: unknown): Record<string, unknown> {
  const isMap =
    typeof exports === 'object' && exports !== null && Object.keys(exports).some((key) => key.startsWith('.'));
  return isMap ? (exports as Record<string, unknown>) : { '.': exports };
}

/** The path an export target gives under {@link IMPORT_CONDITIONS}, the first that matches in order. */
function conditional(target: unknown): string | undefined {
  if (typeof target === 'string') return target;
  if (Array.isArray(target)) return target.map(conditional).find((t) => t !== undefined);
  if (typeof target !== 'object' || target === null) return undefined;
  for (const [condition, value] of Object.entries(target)) {
    const found = IMPORT_CONDITIONS.includes(condition) ? conditional(value) : undefined;
    if (found !== undefined) return found;
  }
  return undefined;
}
