/**
 * Errors of the Files and Batch APIs, each with a stable `BATCH_` code (listed in
 * docs/errors.md). Routes refuse by throwing one; the app's onError answers it in OpenAI's shape.
 */
import { errorClass } from '../../placer/kernel/index.ts';

/** A batch option is missing or out of range (a configuration error, found at start). */
export class BatchConfigError extends errorClass('BATCH_INVALID_OPTION', 500, 'server_error') {}

/** An upload to POST /v1/files is not one the gateway takes: no `file` part, a purpose other than `batch`, not JSONL. */
export class InvalidFileError extends errorClass('BATCH_INVALID_FILE', 400, 'invalid_request_error') {}

/** An upload larger than the files' size bound. */
export class FileTooLargeError extends errorClass('BATCH_FILE_TOO_LARGE', 413, 'invalid_request_error') {}

/** A file id the caller has no file by: unknown, deleted, expired, or another key's. */
export class FileNotFoundError extends errorClass('BATCH_FILE_NOT_FOUND', 404, 'not_found_error') {}

/** The files and batch outputs fill the store's byte bound, or the key's storedBytes. */
export class FileStoreFullError extends errorClass('BATCH_STORE_FULL', 503, 'service_unavailable_error') {}

/** A POST /v1/batches body that does not name a batch the gateway can run. */
export class InvalidBatchError extends errorClass('BATCH_INVALID_REQUEST', 400, 'invalid_request_error') {}

/** A batch id the caller has no batch by: unknown, forgotten after its TTL, or another key's. */
export class BatchNotFoundError extends errorClass('BATCH_NOT_FOUND', 404, 'not_found_error') {}

/** A cancel of a batch that has already ended. */
export class BatchNotCancellableError extends errorClass('BATCH_NOT_CANCELLABLE', 409, 'invalid_request_error') {}
