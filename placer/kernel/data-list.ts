/**
 * Reading a file that holds a list of entries, in JSON or YAML (the gateway's keys file, its
 * deployments file): its entries, each with where it stands for messages, and the problems found
 * in them, capped for one message.
 */
import { parseDataText } from './data-text.ts';
import type { DataFormat } from './data-text.ts';

/**
 * Why a text is not a list: it does not parse as its `format` (`message` is the parser's), or it
 * parses to another `value`.
 */
export type DataListFault =
  | { readonly kind: 'unparsable'; readonly format: DataFormat; readonly message: string }
  | { readonly kind: 'not-list'; readonly format: DataFormat; readonly value: unknown };

/** One entry of a list and where it stands: `entry 2`, or `entry 2 ("name")` when its name field is a string. */
export interface DataListEntry {
  readonly entry: unknown;
  readonly index: number;
  readonly where: string;
}

/**
 * The entries of `text`, the content of the file `path` (JSON or YAML, see data-text.ts), a
 * list, each named in `where` by its `nameField` when that is a string.
 * @throws what `refuse` makes of a text that is not a list.
 */
export function dataListEntries(
  text: string,
  path: string,
  nameField: string,
  refuse: (fault: DataListFault) => Error,
): DataListEntry[] {
  const parsed = parseDataText(text, path);
  if (parsed.kind === 'unparsable') throw refuse(parsed);
  const { format, value: entries } = parsed;
  if (!Array.isArray(entries)) throw refuse({ kind: 'not-list', format, value: entries });
  return entries.map((entry, index) => {
    const name = (entry as Record<string, unknown> | null)?.[nameField];
    return {
      entry,
      index,
      where: typeof name === 'string' ? `entry ${index} (${JSON.stringify(name)})` : `entry ${index}`,
    };
  });
}

/** `problems`, the first `max` of them and then how many more there are. */
export function cappedProblems(problems: readonly string[], max: number): string[] {
  return problems.length > max ? [...problems.slice(0, max), `and ${problems.length - max} more`] : [...problems];
}
