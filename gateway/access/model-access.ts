/**
 * The one model check of a client key with a model list, for every route that names a model:
 * the calls (the body's `model`; on /invoke the path's function and the body's `model` when it
 * has one, since the engine reads the body), `GET /v1/models` and `GET /v1/models/{id}`.
 *
 * A model outside the list is refused the same way whether or not any runner serves it, and
 * before the gateway looks: the answer tells the key what it may call, never what exists.
 */
import { ForbiddenError } from '../errors.ts';
import { allowsModel } from './keys.ts';
import type { Caller, ClientKey } from './scopes.ts';

/** The key a caller holds, if any. */
export function keyOf(caller: Caller | undefined): ClientKey | undefined {
  return caller?.kind === 'client' ? caller.key : undefined;
}

/**
 * The refusal for `key` naming `model`, or undefined when it may: no key (an operator, an open
 * gateway's anonymous caller) or a key without a model list may name any. `model` is what the
 * request named, a string or not (a JSON body's `model` may be anything).
 */
export function modelRefusal(key: ClientKey | undefined, model: unknown): ForbiddenError | undefined {
  if (key?.models === undefined) return undefined;
  if (typeof model === 'string' && allowsModel(key, model)) return undefined;
  const named =
    typeof model === 'string' ? JSON.stringify(model) : `${JSON.stringify(model) ?? String(model)} (not a model name)`;
  return new ForbiddenError(
    `client key ${JSON.stringify(key.name)} may not call model ${named}: its models are ${key.models!.join(', ')}`,
  );
}

/** The models of `models` that `key` may call (all of them without a key or a model list). */
export function visibleModels(key: ClientKey | undefined, models: readonly string[]): string[] {
  if (key?.models === undefined) return [...models];
  return models.filter((model) => allowsModel(key, model));
}

/** What an /invoke body says about its model. */
export type InvokeBodyModel =
  | { readonly kind: 'none' }
  | { readonly kind: 'named'; readonly model: unknown }
  | { readonly kind: 'unreadable' };

/**
 * The `model` an /invoke body names, read as an engine would read it. `named` for a JSON object
 * with that field (of any type); `none` for an empty body, a body that is not JSON-like (audio,
 * a form), or a JSON object without the field; `unreadable` for a body an engine's JSON parser
 * might still read but the gateway cannot check: one starting with `{` that JSON.parse refuses
 * (Python's parser takes `NaN`, say), or JSON in UTF-16 or UTF-32 (a byte-order mark, or a zero
 * byte among the first four, as Python's `json.loads` detects them).
 */
export function invokeBodyModel(body: Buffer): InvokeBodyModel {
  if (body.length === 0) return NONE;
  if (
    (body[0] === 0xfe && body[1] === 0xff) ||
    (body[0] === 0xff && body[1] === 0xfe) ||
    body.subarray(0, 4).includes(0)
  )
    return UNREADABLE;
  // A UTF-8 byte-order mark, which Python's json.loads skips on bytes.
  let i = body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
  while (i < body.length && (body[i] === 0x20 || body[i] === 0x0a || body[i] === 0x0d || body[i] === 0x09)) i++;
  if (body[i] !== 0x7b) return NONE;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8', i));
  } catch {
    return UNREADABLE;
  }
  if (typeof parsed !== 'object' || parsed === null || !Object.hasOwn(parsed, 'model')) return NONE;
  return { kind: 'named', model: (parsed as { model: unknown }).model };
}

const NONE: InvokeBodyModel = Object.freeze({ kind: 'none' });
const UNREADABLE: InvokeBodyModel = Object.freeze({ kind: 'unreadable' });

/**
 * The refusal of an /invoke call of `fn` with `body` for `key`, or undefined: the function must
 * be in the key's models, and so must the body's `model` when it names one, since the runner's
 * engine runs what the body names. Only a key with a model list has its body read.
 */
export function invokeRefusal(key: ClientKey | undefined, fn: string, body: Buffer): ForbiddenError | undefined {
  const refusal = modelRefusal(key, fn);
  if (refusal || key?.models === undefined) return refusal;
  const named = invokeBodyModel(body);
  if (named.kind === 'named') return modelRefusal(key, named.model);
  if (named.kind === 'unreadable') {
    return new ForbiddenError(
      `client key ${JSON.stringify(key.name)} may call only its models (${key.models.join(', ')}): this /invoke body looks like JSON the gateway cannot read, so the model it names cannot be checked; send UTF-8 JSON`,
    );
  }
  return undefined;
}
