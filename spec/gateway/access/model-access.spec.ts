/** gateway/access/model-access.ts: the one model check of a client key with a model list. */
import { describe, expect, it } from 'vitest';
import {
  invokeBodyModel,
  invokeRefusal,
  keyOf,
  modelRefusal,
  visibleModels,
} from '../../../gateway/access/model-access.ts';
import type { ClientKey } from '../../../gateway/access/scopes.ts';
import { ForbiddenError } from '../../../gateway/errors.ts';

const LISTED: ClientKey = { id: 'k1', name: 'team a', models: ['m1', 'm2'], limits: {} };
const ANY: ClientKey = { id: 'k2', name: 'team b', limits: {} };
const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));

describe('keyOf', () => {
  it('returns the key of a client caller, and none for any other caller', () => {
    expect(keyOf({ kind: 'client', key: LISTED })).toBe(LISTED);
    expect(keyOf({ kind: 'operator', id: 'op' })).toBeUndefined();
    expect(keyOf({ kind: 'anonymous' })).toBeUndefined();
    expect(keyOf(undefined)).toBeUndefined();
  });
});

describe('modelRefusal', () => {
  it('returns nothing for no key, a key without a model list, or a listed model', () => {
    expect(modelRefusal(undefined, 'anything')).toBeUndefined();
    expect(modelRefusal(ANY, 'anything')).toBeUndefined();
    expect(modelRefusal(LISTED, 'm2')).toBeUndefined();
  });

  it("returns a 403 naming the key, the model and the key's models when the model is not listed", () => {
    const refusal = modelRefusal(LISTED, 'm3');
    expect(refusal).toBeInstanceOf(ForbiddenError);
    expect(refusal!.message).toBe('client key "team a" may not call model "m3": its models are m1, m2');
  });

  it('returns a refusal saying the model is not a model name when it is not a string', () => {
    expect(modelRefusal(LISTED, 7)!.message).toContain('model 7 (not a model name)');
    expect(modelRefusal(LISTED, undefined)!.message).toContain('model undefined (not a model name)');
  });
});

describe('visibleModels', () => {
  it('returns only the listed models for a key with a list, and all of them otherwise', () => {
    expect(visibleModels(LISTED, ['m3', 'm2', 'm1'])).toEqual(['m2', 'm1']);
    expect(visibleModels(ANY, ['m3', 'm1'])).toEqual(['m3', 'm1']);
    expect(visibleModels(undefined, ['m3'])).toEqual(['m3']);
  });
});

describe('invokeBodyModel', () => {
  it.each([
    ['an empty body', Buffer.alloc(0), { kind: 'none' }],
    ['a body that is not JSON-like', Buffer.from('RIFF....WAVE'), { kind: 'none' }],
    ['a JSON array', json(['m1']), { kind: 'none' }],
    ['a JSON object without model', json({ prompt: 'hi' }), { kind: 'none' }],
    ['a JSON object with model', json({ model: 'm1' }), { kind: 'named', model: 'm1' }],
    ['a model of another type', json({ model: 3 }), { kind: 'named', model: 3 }],
    [
      'leading whitespace and a UTF-8 byte-order mark',
      Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(' \n\t{"model":"m1"}')]),
      { kind: 'named', model: 'm1' },
    ],
    ['an object JSON.parse refuses', Buffer.from('{"model": NaN}'), { kind: 'unreadable' }],
    ['a UTF-16 byte-order mark', Buffer.from([0xff, 0xfe, 0x7b, 0x00]), { kind: 'unreadable' }],
    ['a zero byte among the first four', Buffer.from([0x7b, 0x00, 0x22, 0x00]), { kind: 'unreadable' }],
  ])('returns what %s says', (_label, body, said) => {
    expect(invokeBodyModel(body)).toEqual(said);
  });
});

describe('invokeRefusal', () => {
  it('returns nothing for a key without a list, whatever the body', () => {
    expect(invokeRefusal(ANY, 'm9', json({ model: 'm8' }))).toBeUndefined();
    expect(invokeRefusal(undefined, 'm9', Buffer.from('{bad'))).toBeUndefined();
  });

  it('returns a refusal when the function is not listed, before the body is read', () => {
    expect(invokeRefusal(LISTED, 'm3', Buffer.from('{bad'))!.message).toContain('may not call model "m3"');
  });

  it('returns a refusal when the body names a model the key may not call', () => {
    expect(invokeRefusal(LISTED, 'm1', json({ model: 'm3' }))!.message).toContain('may not call model "m3"');
    expect(invokeRefusal(LISTED, 'm1', json({ model: 'm2' }))).toBeUndefined();
    expect(invokeRefusal(LISTED, 'm1', json({ prompt: 'hi' }))).toBeUndefined();
  });

  it('returns a refusal asking for UTF-8 JSON when the body cannot be checked', () => {
    const refusal = invokeRefusal(LISTED, 'm1', Buffer.from('{"model": NaN}'));
    expect(refusal).toBeInstanceOf(ForbiddenError);
    expect(refusal!.message).toContain('send UTF-8 JSON');
  });
});
