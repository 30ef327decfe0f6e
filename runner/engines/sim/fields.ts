/**
 * Readers for the optional request fields the simulator checks, each refusing a value of the
 * wrong type as vLLM's schema (pydantic) does, before any meaning is given to it. A field sent
 * as `null` counts as absent, as it does in vLLM.
 */
import type { ApiError } from './refusals.ts';
import { schemaError } from './refusals.ts';

/** A field's value, or the refusal to answer with. */
export type FieldResult<T> =
  | { readonly kind: 'ok'; readonly value: T }
  | { readonly kind: 'bad'; readonly error: ApiError };

const ok = <T>(value: T): FieldResult<T> => ({ kind: 'ok', value });
const bad = (error: ApiError): FieldResult<never> => ({ kind: 'bad', error });

/** An optional integer; booleans and numeric strings are refused, as pydantic's strict reading would. */
export function optionalInteger(body: Record<string, unknown>, field: string): FieldResult<number | undefined> {
  const input = body[field];
  if (input === undefined || input === null) return ok(undefined);
  if (typeof input === 'number' && Number.isSafeInteger(input)) return ok(input);
  if (typeof input === 'number' && Number.isFinite(input)) {
    return bad(
      schemaError({
        field,
        kind: 'int_from_float',
        msg: 'Input should be a valid integer, got a number with a fractional part',
        input,
      }),
    );
  }
  return bad(schemaError({ field, kind: 'int_type', msg: 'Input should be a valid integer', input }));
}

/** An optional boolean. */
export function optionalBoolean(body: Record<string, unknown>, field: string): FieldResult<boolean | undefined> {
  const input = body[field];
  if (input === undefined || input === null) return ok(undefined);
  if (typeof input === 'boolean') return ok(input);
  return bad(schemaError({ field, kind: 'bool_type', msg: 'Input should be a valid boolean', input }));
}

/** An optional string from a fixed set, such as `encoding_format`. */
export function optionalChoice<T extends string>(
  body: Record<string, unknown>,
  field: string,
  choices: readonly T[],
): FieldResult<T | undefined> {
  const input = body[field];
  if (input === undefined || input === null) return ok(undefined);
  if (typeof input === 'string' && (choices as readonly string[]).includes(input)) return ok(input as T);
  // pydantic's wording: 'a', 'b' or 'c'.
  const quoted = choices.map((choice) => `'${choice}'`);
  const listed = quoted.length > 1 ? `${quoted.slice(0, -1).join(', ')} or ${quoted.at(-1)}` : (quoted[0] ?? '');
  return bad(schemaError({ field, kind: 'literal_error', msg: `Input should be ${listed}`, input }));
}
