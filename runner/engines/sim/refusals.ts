/**
 * The simulator's error answers, named as vLLM names them, so that a client (the OpenAI SDK among
 * them) sees from the simulator what it would see from vLLM. vLLM answers every error as
 * `{"error":{"message","type","param","code"}}`, `code` being the HTTP status as a number, and
 * names the `type` in one of two ways:
 *
 * - a body that does not fit the request schema (not JSON, a field of the wrong type, a value
 *   outside a fixed set) fails in pydantic before vLLM looks at it: `Bad Request`, `param` the
 *   dotted location (`body.n`), and a message listing each validation error;
 * - a request that fits the schema but asks for what cannot be done (`n` below 1, `best_of`, more
 *   dimensions than the model has) is `BadRequestError` with the field as `param`, and an unknown
 *   model is `NotFoundError` (404).
 *
 * Statuses vLLM has no error class for take their HTTP phrase, as vLLM's own graceful HTTP errors do.
 */
/**
 * An error answer, before it is written in vLLM's ErrorResponse shape. Build one with the
 * helpers below, which name its `type` as vLLM does.
 */
export interface ApiError {
  /** The HTTP status, which vLLM also sends as the body's `code`. */
  readonly status: number;
  /** vLLM's name for the kind of error, e.g. `BadRequestError`, `NotFoundError`, `Bad Request`. */
  readonly type: string;
  readonly message: string;
  /** The request field at fault, when one is. */
  readonly param?: string;
}

const PHRASES: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  404: 'Not Found',
  405: 'Method Not Allowed',
  413: 'Request Entity Too Large',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** A 400 for a request vLLM would parse and then refuse: `BadRequestError`. */
export function badRequest(message: string, param?: string): ApiError {
  return { status: 400, type: 'BadRequestError', message, ...(param === undefined ? {} : { param }) };
}

/** A 404 for something the request names that is not there, such as a model: `NotFoundError`. */
export function notFound(message: string, param?: string): ApiError {
  return { status: 404, type: 'NotFoundError', message, ...(param === undefined ? {} : { param }) };
}

/** A 500 for a failure inside the engine: `InternalServerError`. */
export function internalError(message: string): ApiError {
  return { status: 500, type: 'InternalServerError', message };
}

/** Any other status, typed by its HTTP phrase (`Service Unavailable`, `Too Many Requests`, ...). */
export function refusal(status: number, message: string): ApiError {
  return { status, type: PHRASES[status] ?? `HTTP ${status}`, message };
}

/** One schema failure, as pydantic reports it. */
export interface SchemaFailure {
  /** Where, after `body`: a field name (dotted for a nested one), or nothing for the body as a whole. */
  readonly field?: string;
  /** pydantic's error type, e.g. `int_type`, `literal_error`, `missing`. */
  readonly kind: string;
  /** pydantic's sentence, e.g. `Input should be a valid integer`. */
  readonly msg: string;
  /** The value that failed; shown bounded, never whole. */
  readonly input: unknown;
  /** The field to name as `param` when it is not the location (a check across fields). */
  readonly param?: string;
}

/** A 400 for a body that does not fit the schema, worded as vLLM's validation handler words it. */
export function schemaError(failure: SchemaFailure): ApiError {
  const loc =
    failure.field === undefined ? "('body',)" : `('body', ${failure.field.split('.').map(pyRepr).join(', ')})`;
  const detail = `{'type': ${pyRepr(failure.kind)}, 'loc': ${loc}, 'msg': ${pyRepr(failure.msg)}, 'input': ${pyRepr(failure.input)}}`;
  return {
    status: 400,
    type: 'Bad Request',
    message: `1 validation error:\n  ${detail}`,
    param: failure.param ?? (failure.field === undefined ? 'body' : `body.${failure.field}`),
  };
}

/** A schema failure of the body as a whole (not JSON, not an object). */
export function invalidBody(kind: string, msg: string, input: unknown): ApiError {
  return schemaError({ kind, msg, input });
}

// vLLM bounds what it echoes of a bad value, so that a large body cannot make a larger error.
const MAX_ECHOED_CHARS = 200;

/**
 * A value as Python's repr would show it in pydantic's message: strings quoted, `True`, `None`;
 * containers only described (`<list of 3 items>`) and long strings cut, as vLLM does.
 */
function pyRepr(value: unknown): string {
  if (value === null || value === undefined) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'number')
    return Number.isFinite(value) ? String(value) : value > 0 ? 'inf' : value < 0 ? '-inf' : 'nan';
  if (Array.isArray(value)) return `<list of ${value.length} items>`;
  if (typeof value === 'object') return `<dict of ${Object.keys(value).length} items>`;
  let text = String(value);
  if (text.length > MAX_ECHOED_CHARS) text = `${text.slice(0, MAX_ECHOED_CHARS)}...[truncated]`;
  // Python prefers single quotes, and switches to double ones to avoid escaping a single quote.
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const escaped = text.replace(/[\\\n\r\t]|[\x00-\x1f\x7f]/g, (c) => {
    const named: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
    return named[c] ?? `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;
  });
  return quote + (quote === "'" ? escaped.replaceAll("'", "\\'") : escaped) + quote;
}
