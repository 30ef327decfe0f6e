/** placer/kernel/data-list.ts: a list file's entries (JSON or YAML), named for messages, and capped problem lists. */
import { describe, expect, it } from 'vitest';
import { cappedProblems, dataFormatOf, dataListEntries } from '../../../placer/kernel/index.ts';
import type { DataListFault } from '../../../placer/kernel/index.ts';

/** Refuses with an error whose message is the fault as JSON. */
const refuse = (fault: DataListFault) => new Error(JSON.stringify(fault));

describe('dataListEntries', () => {
  it('returns each entry with its index, named by its name field when that is a string', () => {
    const text = JSON.stringify([{ name: 'a' }, { name: 7 }, null, 'x', { other: 'b' }]);
    expect(dataListEntries(text, 'list.json', 'name', refuse).map(({ index, where }) => [index, where])).toEqual([
      [0, 'entry 0 ("a")'],
      [1, 'entry 1'],
      [2, 'entry 2'],
      [3, 'entry 3'],
      [4, 'entry 4'],
    ]);
    expect(dataListEntries(text, 'list.json', 'other', refuse)[4]).toEqual({
      entry: { other: 'b' },
      index: 4,
      where: 'entry 4 ("b")',
    });
  });

  it.each([
    ['text that is not JSON', '[1,', 'unparsable'],
    ['an object', '{"name":"a"}', 'not-list'],
    ['null', 'null', 'not-list'],
  ])('throws what refuse makes of %s', (_, text, kind) => {
    expect(() => dataListEntries(text, 'list.json', 'name', refuse)).toThrow(`{"kind":"${kind}"`);
  });

  it('hands refuse the value that is not a list, and the parser message of text that is not JSON', () => {
    expect(() => dataListEntries('{"a":1}', 'list.json', 'name', refuse)).toThrow(
      '{"kind":"not-list","format":"JSON","value":{"a":1}}',
    );
    expect(() => dataListEntries('', 'list.json', 'name', refuse)).toThrow(
      /"kind":"unparsable","format":"JSON","message":".+"/,
    );
  });
});

describe('dataListEntries on YAML', () => {
  it('returns the same entries from a YAML file as from its JSON twin', () => {
    const yaml = ['- name: a', '  models: [m1, m2]', '- name: b'].join('\n');
    const json = JSON.stringify([{ name: 'a', models: ['m1', 'm2'] }, { name: 'b' }]);
    expect(dataListEntries(yaml, 'keys.yaml', 'name', refuse)).toEqual(
      dataListEntries(json, 'keys.json', 'name', refuse),
    );
  });

  it('hands refuse the line and column of a YAML syntax fault, and a key given twice', () => {
    expect(() => dataListEntries('- name: a: b', 'k.yml', 'name', refuse)).toThrow(
      /"kind":"unparsable","format":"YAML","message":"[^"]*at line 1, column \d+:"/,
    );
    expect(() => dataListEntries('- name: a\n  name: b', 'k.yaml', 'name', refuse)).toThrow(/unique.*at line 2/);
  });

  it('hands refuse a YAML mapping as not a list', () => {
    expect(() => dataListEntries('name: a', 'k.yaml', 'name', refuse)).toThrow(
      '{"kind":"not-list","format":"YAML","value":{"name":"a"}}',
    );
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

describe('dataFormatOf', () => {
  it('reads the format from the extension, whatever the text', () => {
    expect(['keys.yaml', 'keys.YML', 'keys.json'].map((path) => dataFormatOf(path, '- a'))).toEqual([
      'YAML',
      'YAML',
      'JSON',
    ]);
  });

  it('reads it from how the text opens without a known extension: JSON for { or [, else YAML', () => {
    const texts = ['  [{"name":"a"}]', '\uFEFF{"a":1}', '- name: a', 'port: 8080'];
    expect(texts.map((text) => dataFormatOf('/etc/sluice/config', text))).toEqual(['JSON', 'JSON', 'YAML', 'YAML']);
  });
});
