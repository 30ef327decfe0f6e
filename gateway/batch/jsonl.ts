/**
 * The input file of a batch, read as OpenAI reads it: JSONL, one request a line, each
 * `{custom_id, method, url, body}`. The upload is checked for being JSONL at all (a file that is
 * not is refused at once); a batch checks its lines against itself (custom_id unique, method
 * POST, url its endpoint, body an object) and fails with every problem listed, by line, before
 * any line runs. Pure: the tables in spec/gateway/batch/jsonl.spec.ts hold it to that.
 */
import type { BatchLineError } from '../store/index.ts';

/** One line of a valid input file: a call to make. */
export interface BatchLine {
  /** 1-based line number in the input file. */
  readonly line: number;
  readonly customId: string;
  /** The route the line calls: the batch's endpoint. */
  readonly url: string;
  /** The line's `body`, as the call's JSON body. */
  readonly body: Buffer;
  /** The body's `model`, which the release window is kept per; '' when it names none. */
  readonly model: string;
}

/** What a batch's input file holds: lines to run, or the problems that fail the batch. */
export type BatchInput = { kind: 'lines'; lines: BatchLine[] } | { kind: 'invalid'; errors: BatchLineError[] };

/** At most this many problems are listed; the rest are counted in the last one's message. */
export const MAX_LISTED_ERRORS = 100;

/** The routes a batch may call. */
export const BATCH_ENDPOINTS: readonly string[] = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'];

/**
 * Why `content` is not a JSONL file, or undefined when it is: UTF-8 text whose every non-blank
 * line is a JSON object, and at least one such line.
 */
export function jsonlProblem(content: Buffer): string | undefined {
  const text = utf8(content);
  if (text === undefined) return 'the file is not UTF-8 text';
  let objects = 0;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!.trim();
    if (raw === '') continue;
    if (!isObject(parse(raw))) return `line ${i + 1} is not a JSON object; a batch file holds one JSON object a line`;
    objects++;
  }
  return objects === 0 ? 'the file holds no JSON lines' : undefined;
}

/**
 * The lines of a batch's input file for `endpoint`, or every problem found (up to
 * {@link MAX_LISTED_ERRORS}). `maxLines` bounds the requests a batch may hold.
 */
export function parseBatchInput(content: Buffer, endpoint: string, maxLines: number): BatchInput {
  const text = utf8(content) ?? '';
  const errors: BatchLineError[] = [];
  const lines: BatchLine[] = [];
  const seen = new Set<string>();
  const rows = text.split('\n');
  for (let i = 0; i < rows.length; i++) {
    const raw = rows[i]!.trim();
    if (raw === '') continue;
    const found = checkLine(raw, i + 1, endpoint, seen);
    if ('code' in found) errors.push(found);
    else lines.push(found);
  }
  if (lines.length + errors.length === 0)
    errors.push({ code: 'empty_file', message: 'the input file holds no requests' });
  if (lines.length + errors.length > maxLines) {
    errors.push({
      code: 'too_many_tasks',
      message: `the input file holds ${lines.length + errors.length} requests; a batch holds at most ${maxLines}`,
    });
  }
  return errors.length === 0 ? { kind: 'lines', lines } : { kind: 'invalid', errors: listed(errors) };
}

/** A line as a request, or its first problem. */
function checkLine(raw: string, line: number, endpoint: string, seen: Set<string>): BatchLine | BatchLineError {
  const json = parse(raw);
  if (!isObject(json)) return { code: 'invalid_json_line', message: `line ${line} is not a JSON object`, line };
  const { custom_id: customId, method, url, body } = json;
  if (typeof customId !== 'string' || customId === '')
    return problem('missing_custom_id', line, 'custom_id', 'a non-empty string custom_id is required');
  if (seen.has(customId))
    return problem('duplicate_custom_id', line, 'custom_id', `custom_id ${JSON.stringify(customId)} is used twice`);
  seen.add(customId);
  if (method !== 'POST')
    return problem('invalid_method', line, 'method', `method must be "POST", got ${JSON.stringify(method ?? null)}`);
  if (url !== endpoint) {
    const got = JSON.stringify(url ?? null);
    return problem('mismatched_url', line, 'url', `url must be the batch's endpoint ${endpoint}, got ${got}`);
  }
  if (!isObject(body)) return problem('invalid_body', line, 'body', 'body must be a JSON object');
  if (body.stream === true)
    return problem('invalid_body', line, 'body.stream', 'a batch request cannot stream; leave stream out');
  const model = typeof body.model === 'string' ? body.model : '';
  return { line, customId, url, body: Buffer.from(JSON.stringify(body)), model };
}

function problem(code: string, line: number, param: string, message: string): BatchLineError {
  return { code, message: `line ${line}: ${message}`, param, line };
}

/** The first problems, with how many more there were told in a last one. */
function listed(errors: BatchLineError[]): BatchLineError[] {
  if (errors.length <= MAX_LISTED_ERRORS) return errors;
  const more = errors.length - (MAX_LISTED_ERRORS - 1);
  return [
    ...errors.slice(0, MAX_LISTED_ERRORS - 1),
    { code: 'too_many_errors', message: `${more} more problems are not listed` },
  ];
}

const decoder = new TextDecoder('utf-8', { fatal: true });

function utf8(content: Buffer): string | undefined {
  try {
    return decoder.decode(content);
  } catch {
    return undefined;
  }
}

function parse(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
