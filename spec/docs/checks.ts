/**
 * The checks of the docs specs: each takes pages and the code's names and returns its findings,
 * `page:line name`, one for each name a page writes that the code does not have.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { root } from '../layers/sources.ts';
import type { Page, PageLine } from './pages.ts';
import { codeSpans, commandLines } from './pages.ts';
import type { CommandNames } from './truth.ts';
import { literalEnvs, literalFlags, metricNames } from './truth.ts';

/**
 * Flags of other programs the pages show, by program; the ones the product passes to an engine
 * come from its source (literalFlags).
 */
const FOREIGN: Readonly<Record<string, readonly string[]>> = {
  vllm: ['--allowed-origins', '--api-key', '--enable-metrics', '--otlp-traces-endpoint', '--uds'],
  sglang: ['--enable-cache-report'],
  node: ['--cpu-prof', '--import', '--max-http-header-size'],
  curl: ['--data-binary', '--path-as-is', '--raw'],
  podman: ['--build-arg', '--format', '--init', '--no-healthcheck', '--pod', '--read-only', '--rm', '--stop-timeout'],
  npm: ['--omit'],
  hyperfine: ['--prepare'],
  'huggingface-cli': ['--local-dir'],
  tsc: ['--noEmit'],
  // The spellings an engine's parser reads, as security.md and runners.md explain them.
  spellings: ['--flag', '--ho', '--opt', '--po'],
};
const foreign: ReadonlySet<string> = new Set(Object.values(FOREIGN).flat());

/** Files a page has the reader write, named as the page's example names them. */
const USER_FILES: ReadonlySet<string> = new Set([
  'deployments.yaml',
  'keys.yaml',
  'my-gateway.ts',
  'random-placer.mjs',
  'sticky-placer.mjs',
]);

/** Names a page writes that look like a repository path but are not: a ratio's name. */
const NOT_PATHS: ReadonlySet<string> = new Set(['gateway/bare-proxy', 'runner/bare-proxy']);

/** Each match of `pattern` (its first group, else the whole match) on `lines` that `known` refuses. */
function unknown(lines: readonly PageLine[], pattern: RegExp, known: (name: string) => boolean): string[] {
  return lines.flatMap((line) =>
    [...line.text.matchAll(pattern)]
      .map((m) => m[1] ?? m[0])
      .flatMap((name) => (known(name) ? [] : [`${line.at} ${name}`])),
  );
}

/** The lines of every page. */
const linesOf = (pages: readonly Page[]): PageLine[] => pages.flatMap((page) => page.lines);

/** Every name `pattern` finds on the pages, whether known or not. */
export const namesOn = (pages: readonly Page[], pattern: RegExp): Set<string> =>
  new Set(unknown(linesOf(pages), pattern, () => false).map((finding) => finding.split(' ')[1]!));

/** Flags no sluice command takes, the product does not pass on, and no listed program documents. */
export function staleFlags(pages: readonly Page[], names: CommandNames, source: string): string[] {
  const known = new Set([...names.flags.values()].flatMap((flags) => [...flags]));
  const literal = literalFlags(source);
  const flag = (name: string) => name.endsWith('-') || known.has(name) || literal.has(name) || foreign.has(name);
  return unknown(linesOf(pages), /(?<![\w-])--[a-zA-Z][a-zA-Z0-9-]*/g, flag);
}

/** A line's start, or what may stand before a command in a shell line. */
const AT_COMMAND = String.raw`(?:^|[\s$;&|(])`;

/**
 * How a command line starts sluice, each way with the command it runs and the rest of the line:
 * `sluice`, `npx sluice`, `node .../sluice.mjs`, `npm run sluice --` name it; `npm start --` is
 * `up`, and `npm run bench:<scenario> --` is `bench`.
 */
const SLUICE_COMMANDS: readonly [RegExp, (m: RegExpExecArray) => [string, string]][] = [
  [
    new RegExp(
      String.raw`${AT_COMMAND}(?:npx\s+)?(?:sluice|node\s+\S*sluice\.mjs|npm\s+run\s+sluice\s+--)\s+([a-z-]+)(.*)`,
    ),
    (m) => [m[1]!, m[2]!],
  ],
  [new RegExp(String.raw`${AT_COMMAND}npm\s+start\s+--(.*)`), (m) => ['up', m[1]!]],
  [new RegExp(String.raw`${AT_COMMAND}npm\s+run\s+bench:[a-z]+\s+--(.*)`), (m) => ['bench', m[1]!]],
];

/** The sluice command a line runs and the rest of the line, or undefined for a line that runs none. */
function sluiceCommandOf(text: string): [string, string] | undefined {
  for (const [pattern, parts] of SLUICE_COMMANDS) {
    const m = pattern.exec(text);
    if (m) return parts(m);
  }
  return undefined;
}

/**
 * The flags a `sluice <command>` line (in a fenced block, or a code span of prose) gives that its
 * command does not take, as `page:line command flag`.
 */
export function wrongCommandFlags(pages: readonly Page[], names: CommandNames): string[] {
  const lines = pages.flatMap((page) => [...commandLines(page), ...codeSpans(page)]);
  return lines.flatMap((line) => {
    const [command, rest] = sluiceCommandOf(line.text) ?? [];
    const own = command === undefined ? undefined : names.flags.get(command);
    if (!own) return [];
    // The command's own part: up to a pipe, `&&`, `;`, a background `&` or a comment.
    const args = rest!.split(/\s(?:\||&&|;|&|#)/)[0]!;
    return [...args.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*(?=[\s=]|$)/g)]
      .map((f) => f[0])
      .filter((flag) => !own.has(flag))
      .map((flag) => `${line.at} ${command} ${flag}`);
  });
}

/** SLUICE_* names no command and no code reads; `SLUICE_BENCH_<SETTING>` patterns aside. */
export function staleEnvs(pages: readonly Page[], names: CommandNames, source: string): string[] {
  const literal = literalEnvs(source);
  const env = (name: string) => name.endsWith('_') || names.envs.has(name) || literal.has(name);
  return unknown(linesOf(pages), /\bSLUICE_[A-Z0-9_]+/g, env);
}

/** Settings table rows, `| --flag | SLUICE_X |`, whose variable is not the flag's, as `page:line --flag SLUICE_X`. */
export function mismatchedEnvs(pages: readonly Page[], names: CommandNames): string[] {
  return linesOf(pages).flatMap((line) => {
    const row = /^\|\s*`(--[a-z0-9-]+)`[^|]*\|\s*`(SLUICE_[A-Z0-9_]+)`/.exec(line.text);
    const ofFlag = row && names.envsOfFlag.get(row[1]!);
    return row && ofFlag && !ofFlag.has(row[2]!) ? [`${line.at} ${row[1]} ${row[2]}`] : [];
  });
}

/** sluice_* names no Prometheus page of the product shows, as family, series or label; `sluice_calls_` patterns aside. */
export function staleMetrics(pages: readonly Page[], source: string): string[] {
  const metrics = metricNames(source);
  const known = (name: string) => name.endsWith('_') || metrics.has(name);
  return unknown(linesOf(pages), /\bsluice_[a-z0-9_]+/g, known);
}

/**
 * Repository paths in prose that do not exist (a fenced block may name a file its commands make);
 * a pattern (`*`, `{id}`, `<name>`) is not a path.
 */
export function missingPaths(pages: readonly Page[]): string[] {
  const path = /(?<![\w./-])((?:gateway|runner|placer|spec|k6|docs)\/[\w./-]*[\w/])/g;
  const exists = (name: string) =>
    NOT_PATHS.has(name) || /[*{<]/.test(name) || existsSync(join(root, name.replace(/\/$/, '')));
  return unknown(
    linesOf(pages).filter((line) => !line.fenced),
    path,
    exists,
  );
}

/** File names written alone (`agent.ts`) that no file of the repository has, the reader's own files aside. */
export function missingFileNames(pages: readonly Page[], fileNames: ReadonlySet<string>): string[] {
  const name = /`([\w.-]+\.(?:ts|mjs|js|json|ya?ml|md|sh))`/g;
  return unknown(linesOf(pages), name, (file) => fileNames.has(file) || USER_FILES.has(file));
}

/** Links (and images) to a file that does not exist, or to a heading its page does not have. */
export function brokenLinks(pages: readonly Page[], all: readonly Page[]): string[] {
  const byFile = new Map(all.map((page) => [page.file, page]));
  const link = /\]\((?![a-z]+:)([\w./-]+)?(?:#([^)\s]+))?\)/g;
  return pages.flatMap((page) =>
    page.lines.flatMap((line) =>
      [...line.text.matchAll(link)].flatMap(([whole, file, anchor]) => {
        if (file === undefined && anchor === undefined) return [];
        const target = file === undefined ? page.file : join(page.file, '..', file);
        const to = byFile.get(target);
        const ok = to ? anchor === undefined || to.anchors.has(anchor) : existsSync(join(root, target));
        return ok ? [] : [`${line.at} ${whole}`];
      }),
    ),
  );
}

/** Table rows, `| CODE | status |`, whose status is not the one the code's class declares, as `page:line CODE status`. */
export function wrongStatuses(pages: readonly Page[], statuses: ReadonlyMap<string, ReadonlySet<number>>): string[] {
  return linesOf(pages).flatMap((line) => {
    const row = /^\|\s*`([A-Z][A-Z0-9_]+)`\s*\|\s*(\d{3})\s*\|/.exec(line.text);
    const declared = row && statuses.get(row[1]!);
    return row && declared && !declared.has(Number(row[2])) ? [`${line.at} ${row[1]} ${row[2]}`] : [];
  });
}

/** The pattern of an error code under `prefixes`; a user's `env.X` aside. */
export const codePattern = (prefixes: readonly string[]): RegExp =>
  new RegExp(`(?<!env\\.)\\b((?:${prefixes.join('|')})[A-Z0-9_]*[A-Z0-9])\\b`, 'g');

/** Codes under `prefixes` that are neither defined (`codes`) nor a constant the code declares. */
export function staleCodes(
  pages: readonly Page[],
  prefixes: readonly string[],
  codes: ReadonlySet<string>,
  source: string,
): string[] {
  const declared = new Set([...source.matchAll(/\b(?:const|let)\s+([A-Z][A-Z0-9_]+)\b/g)].map((m) => m[1]!));
  return unknown(linesOf(pages), codePattern(prefixes), (name) => codes.has(name) || declared.has(name));
}
