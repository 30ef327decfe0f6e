/**
 * The docs pages as the docs specs read them: README.md and docs/*.md, each as its lines, with the
 * sections that name retired names on purpose (a heading starting "Renamed") left out. The
 * dated diary, docs/benchmarks-history.md, records what ran then and is not held to today's names.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { read, root } from '../layers/sources.ts';

/** One line of a page, with where it is and whether it sits in a fenced code block. */
export interface PageLine {
  /** `docs/api.md:12`, for a finding. */
  readonly at: string;
  readonly text: string;
  readonly fenced: boolean;
}

/** One page: its path from the root, its headings' anchors, and its lines. */
export interface Page {
  readonly file: string;
  readonly anchors: ReadonlySet<string>;
  readonly lines: readonly PageLine[];
}

/** Pages no spec holds to the current names. */
const DIARIES: ReadonlySet<string> = new Set(['docs/benchmarks-history.md']);

/** A heading whose section lists old names beside their new ones. */
const RENAMES = /^#+\s+Renamed\b/;

/** The depth of a Markdown heading line (`## x` is 2), or 0 for another line. */
const depthOf = (line: string): number => /^(#+)\s/.exec(line)?.[1]?.length ?? 0;

/**
 * GitHub's anchor for a heading: lowercase, markup and punctuation dropped, spaces to hyphens;
 * `seen` counts earlier headings of the same anchor, which get `-1`, `-2`, ...
 */
export function anchorOf(heading: string, seen: Map<string, number>): string {
  const base = heading
    .trim()
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
  const count = seen.get(base) ?? 0;
  seen.set(base, count + 1);
  return count === 0 ? base : `${base}-${count}`;
}

/** Reads one page from `text`: anchors of every heading and `<a id>`, lines outside the renames sections. */
export function parsePage(file: string, text: string): Page {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const lines: PageLine[] = [];
  let fenced = false;
  let skipDepth = 0;
  text.split('\n').forEach((text, i) => {
    if (/^\s*```/.test(text)) fenced = !fenced;
    const depth = fenced ? 0 : depthOf(text);
    if (depth > 0) {
      anchors.add(anchorOf(text.replace(/^#+\s+/, ''), seen));
      if (skipDepth > 0 && depth <= skipDepth) skipDepth = 0;
      if (skipDepth === 0 && RENAMES.test(text)) skipDepth = depth;
    }
    for (const m of text.matchAll(/<a (?:id|name)="([^"]+)"/g)) anchors.add(m[1]!);
    if (skipDepth === 0) lines.push({ at: `${file}:${i + 1}`, text, fenced });
  });
  return { file, anchors, lines };
}

/** Every page held to the code's names. */
export function readPages(): Page[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs].filter((file) => !DIARIES.has(file)).map((file) => parsePage(file, read(file)));
}

/** The code spans of the page's prose, `like this`, each as a line of its own. */
export function codeSpans(page: Page): PageLine[] {
  return page.lines
    .filter((line) => !line.fenced)
    .flatMap((line) => [...line.text.matchAll(/`([^`]+)`/g)].map((m) => ({ at: line.at, text: m[1]!, fenced: false })));
}

/**
 * The command lines of fenced blocks, a line continued with `\` joined to the next, each with
 * where it starts.
 */
export function commandLines(page: Page): PageLine[] {
  const out: PageLine[] = [];
  let open: { at: string; text: string } | undefined;
  for (const line of page.lines) {
    if (!line.fenced) {
      open = undefined;
      continue;
    }
    const text = open ? `${open.text} ${line.text.trim()}` : line.text;
    const at = open?.at ?? line.at;
    if (text.endsWith('\\')) open = { at, text: text.slice(0, -1) };
    else {
      open = undefined;
      out.push({ at, text, fenced: true });
    }
  }
  return out;
}
