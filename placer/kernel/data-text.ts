/**
 * The text of a file an operator writes (a config file, the keys file, the deployments file), in
 * JSON or YAML: the format read from the file's extension (`.json`, `.yaml`, `.yml`), else from
 * the text (JSON when it opens with `{` or `[`, YAML otherwise), and the value it holds. Both
 * formats give the same values to the same checks, so a file's problems read the same in each.
 */
import { parse } from 'yaml';

/** A file's format. */
export type DataFormat = 'JSON' | 'YAML';

/** What {@link parseDataText} found: the value, or the parser's one-line message, with the format read. */
export type ParsedData =
  | { readonly kind: 'parsed'; readonly format: DataFormat; readonly value: unknown }
  | { readonly kind: 'unparsable'; readonly format: DataFormat; readonly message: string };

/** The format of `text`, read from `path`: by its extension, else by how the text opens. */
export function dataFormatOf(path: string, text: string): DataFormat {
  if (/\.ya?ml$/i.test(path)) return 'YAML';
  if (/\.json$/i.test(path)) return 'JSON';
  return /^\uFEFF?\s*[[{]/.test(text) ? 'JSON' : 'YAML';
}

/**
 * The value `text` (the content of `path`) holds. YAML is read as YAML 1.2's core schema (`yes`
 * stays a string), a key given twice refused; its messages say the line and column.
 */
export function parseDataText(text: string, path: string): ParsedData {
  const format = dataFormatOf(path, text);
  try {
    const value: unknown = format === 'JSON' ? JSON.parse(text) : parse(text, { uniqueKeys: true });
    return { kind: 'parsed', format, value: value ?? null };
  } catch (error) {
    // Parsers quote the text around the fault over several lines: the first says where.
    return { kind: 'unparsable', format, message: (error as Error).message.split('\n')[0]!.trim() };
  }
}
