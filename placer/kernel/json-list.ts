/**
 * Reading a file that holds a JSON list of entries (the gateway's keys file, its deployments
 * file): its entries, each with where it stands for messages, and the problems found in them,
 * capped for one message.
 */

/** Why a text is not a JSON list: it does not parse (`message` is the parser's), or it parses to another `value`. */
export type JsonListFault =
  | { readonly kind: 'not-json'; readonly message: string }
  | { readonly kind: 'not-list'; readonly value: unknown };

/** One entry of a JSON list and where it stands: `entry 2`, or `entry 2 ("name")` when its name field is a string. */
export interface JsonListEntry {
  readonly entry: unknown;
  readonly index: number;
  readonly where: string;
}

/**
 * The entries of `text`, a JSON list, each named in `where` by its `nameField` when that is a
 * string. @throws what `refuse` makes of a text that is not a JSON list.
 */
export function jsonListEntries(
  text: string,
  nameField: string,
  refuse: (fault: JsonListFault) => Error,
): JsonListEntry[] {
  let entries: unknown;
  try {
    entries = JSON.parse(text);
  } catch (error) {
    throw refuse({ kind: 'not-json', message: (error as Error).message });
  }
  if (!Array.isArray(entries)) throw refuse({ kind: 'not-list', value: entries });
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
