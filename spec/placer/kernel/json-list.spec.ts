/** placer/kernel/json-list.ts: a JSON list file's entries, named for messages, and capped problem lists. */
import { describe, expect, it } from 'vitest';
import { cappedProblems, jsonListEntries } from '../../../placer/kernel/index.ts';
import type { JsonListFault } from '../../../placer/kernel/index.ts';

/** Refuses with an error whose message is the fault as JSON. */
const refuse = (fault: JsonListFault) => new Error(JSON.stringify(fault));

describe('jsonListEntries', () => {
  it('returns each entry with its index, named by its name field when that is a string', () => {
    const text = JSON.stringify([{ name: 'a' }, { name: 7 }, null, 'x', { other: 'b' }]);
    expect(jsonListEntries(text, 'name', refuse).map(({ index, where }) => [index, where])).toEqual([
      [0, 'entry 0 ("a")'],
      [1, 'entry 1'],
      [2, 'entry 2'],
      [3, 'entry 3'],
      [4, 'entry 4'],
    ]);
    expect(jsonListEntries(text, 'other', refuse)[4]).toEqual({
      entry: { other: 'b' },
      index: 4,
      where: 'entry 4 ("b")',
    });
  });

  it.each([
    ['text that is not JSON', '[1,', 'not-json'],
    ['an object', '{"name":"a"}', 'not-list'],
    ['null', 'null', 'not-list'],
  ])('throws what refuse makes of %s', (_, text, kind) => {
    expect(() => jsonListEntries(text, 'name', refuse)).toThrow(`{"kind":"${kind}"`);
  });

  it('hands refuse the value that is not a list, and the parser message of text that is not JSON', () => {
    expect(() => jsonListEntries('{"a":1}', 'name', refuse)).toThrow('{"kind":"not-list","value":{"a":1}}');
    expect(() => jsonListEntries('', 'name', refuse)).toThrow(/"kind":"not-json","message":".+"/);
  });
});

describe('cappedProblems', () => {
  it.each([
    [['a', 'b'], 2, ['a', 'b']],
    [['a', 'b', 'c'], 2, ['a', 'b', 'and 1 more']],
    [[], 2, []],
  ])('returns %j capped at %i as %j', (problems, max, expected) => {
    expect(cappedProblems(problems, max)).toEqual(expected);
  });
});
