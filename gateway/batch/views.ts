/**
 * What clients see of files, batches and lines, in OpenAI's shapes: the `file` and `batch`
 * objects (times in seconds since the epoch) and the lines of output and error files.
 */
import type { BatchRecord, FileRecord, Page } from '../store/index.ts';
import type { LineAnswer } from './line-calls.ts';
import type { BatchLine } from './jsonl.ts';

const seconds = (ms: number | undefined): number | null => (ms === undefined ? null : Math.floor(ms / 1000));

/** A file as GET /v1/files/{id} answers it. */
export function fileView(record: FileRecord): Record<string, unknown> {
  return {
    id: record.id,
    object: 'file',
    bytes: record.bytes,
    created_at: seconds(record.createdAt),
    expires_at: seconds(record.expiresAt),
    filename: record.filename,
    purpose: record.purpose,
    status: 'processed',
  };
}

/** A batch as GET /v1/batches/{id} answers it. */
export function batchView(record: BatchRecord): Record<string, unknown> {
  return {
    id: record.id,
    object: 'batch',
    endpoint: record.endpoint,
    errors: record.errors ? { object: 'list', data: record.errors.map(errorView) } : null,
    input_file_id: record.inputFileId,
    completion_window: record.completionWindow,
    status: record.status,
    output_file_id: record.outputFileId ?? null,
    error_file_id: record.errorFileId ?? null,
    created_at: seconds(record.createdAt),
    in_progress_at: seconds(record.inProgressAt),
    expires_at: seconds(record.expiresAt),
    finalizing_at: seconds(record.finalizingAt),
    completed_at: seconds(record.completedAt),
    failed_at: seconds(record.failedAt),
    expired_at: seconds(record.expiredAt),
    cancelling_at: seconds(record.cancellingAt),
    cancelled_at: seconds(record.cancelledAt),
    request_counts: { ...record.requestCounts },
    metadata: record.metadata ?? null,
  };
}

/** A list page in OpenAI's shape. */
export function listView<T extends { id: string }>(
  page: Page<T>,
  view: (record: T) => Record<string, unknown>,
): Record<string, unknown> {
  return {
    object: 'list',
    data: page.data.map(view),
    first_id: page.data[0]?.id ?? null,
    last_id: page.data.at(-1)?.id ?? null,
    has_more: page.hasMore,
  };
}

function errorView(error: NonNullable<BatchRecord['errors']>[number]): Record<string, unknown> {
  return { code: error.code, message: error.message, param: error.param ?? null, line: error.line ?? null };
}

/**
 * A line of the output file (a 2xx answer) or the error file (any other): OpenAI's
 * `{id, custom_id, response: {status_code, request_id, body}, error: null}`. A body that is not
 * JSON is kept as text.
 */
export function answeredLine(id: string, line: BatchLine, answer: LineAnswer): string {
  const text = answer.body.toString('utf8');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Kept as text: an engine's or a proxy's answer that is not JSON.
  }
  const response = { status_code: answer.status, request_id: answer.requestId ?? null, body };
  return JSON.stringify({ id, custom_id: line.customId, response, error: null });
}

/** A line of the error file for a request that got no answer: `{..., response: null, error: {code, message}}`. */
export function unansweredLine(id: string, line: BatchLine, code: string, message: string): string {
  return JSON.stringify({ id, custom_id: line.customId, response: null, error: { code, message } });
}
