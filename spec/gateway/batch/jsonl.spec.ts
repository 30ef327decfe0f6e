/**
 * The input file's rules as tables: what an upload must be (JSONL at all), and what a batch
 * checks of each line before any runs, with OpenAI's codes and the line each problem is on.
 */
import { describe, expect, it } from 'vitest';
import { MAX_LISTED_ERRORS, jsonlProblem, parseBatchInput } from '../../../gateway/batch/jsonl.ts';

const CHAT = '/v1/chat/completions';
const line = (fields: Record<string, unknown>) =>
  JSON.stringify({ custom_id: 'a', method: 'POST', url: CHAT, body: { model: 'm' }, ...fields });
const file = (...lines: string[]) => Buffer.from(lines.join('\n'));

describe('jsonlProblem', () => {
  it.each([
    ['one object a line, blank lines and CRLF allowed', file(line({}), '', `${line({ custom_id: 'b' })}\r`), undefined],
    [
      'a line that is not JSON',
      file(line({}), 'nope'),
      'line 2 is not a JSON object; a batch file holds one JSON object a line',
    ],
    ['a JSON array line', file('[1,2]'), 'line 1 is not a JSON object; a batch file holds one JSON object a line'],
    ['an empty file', file('', '  '), 'the file holds no JSON lines'],
    ['bytes that are not UTF-8', Buffer.from([0xff, 0xfe, 0x7b, 0x7d]), 'the file is not UTF-8 text'],
  ])('%s', (_, content, problem) => {
    expect(jsonlProblem(content)).toBe(problem);
  });
});

describe('parseBatchInput', () => {
  it('returns each line with its custom id, model and body, numbered as in the file', () => {
    const input = parseBatchInput(file(line({}), '', line({ custom_id: 'b', body: { model: 'x', n: 2 } })), CHAT, 10);
    expect(input.kind).toBe('lines');
    if (input.kind !== 'lines') return;
    expect(input.lines.map((l) => [l.line, l.customId, l.model, JSON.parse(l.body.toString())])).toEqual([
      [1, 'a', 'm', { model: 'm' }],
      [3, 'b', 'x', { model: 'x', n: 2 }],
    ]);
  });

  it.each([
    ['a custom_id used twice', [line({}), line({})], 'duplicate_custom_id', 2, 'custom_id'],
    ['no custom_id', [line({ custom_id: undefined })], 'missing_custom_id', 1, 'custom_id'],
    ['an empty custom_id', [line({ custom_id: '' })], 'missing_custom_id', 1, 'custom_id'],
    ['a method other than POST', [line({ method: 'GET' })], 'invalid_method', 1, 'method'],
    ['a url other than the endpoint', [line({ url: '/v1/embeddings' })], 'mismatched_url', 1, 'url'],
    ['a body that is not an object', [line({ body: [1] })], 'invalid_body', 1, 'body'],
    ['a streamed body', [line({ body: { model: 'm', stream: true } })], 'invalid_body', 1, 'body.stream'],
    ['a line that is not JSON', ['{'], 'invalid_json_line', 1, undefined],
  ])('fails %s', (_, lines, code, at, param) => {
    const input = parseBatchInput(file(...lines), CHAT, 10);
    expect(input.kind).toBe('invalid');
    if (input.kind !== 'invalid') return;
    expect(input.errors).toHaveLength(1);
    expect(input.errors[0]).toMatchObject({ code, line: at, ...(param ? { param } : {}) });
    expect(input.errors[0]!.message).toMatch(new RegExp(`^line ${at}`));
  });

  it('lists every problem, up to the bound, and counts the rest', () => {
    const lines = Array.from({ length: MAX_LISTED_ERRORS + 5 }, () => line({ method: 'PUT' }));
    const input = parseBatchInput(file(...lines.map((l, i) => l.replace('"a"', `"c${i}"`))), CHAT, 1000);
    if (input.kind !== 'invalid') throw new Error('expected problems');
    expect(input.errors).toHaveLength(MAX_LISTED_ERRORS);
    expect(input.errors.at(-1)).toEqual({ code: 'too_many_errors', message: '6 more problems are not listed' });
  });

  it('fails a file with more requests than a batch holds, and one with none', () => {
    const many = parseBatchInput(file(line({}), line({ custom_id: 'b' }), line({ custom_id: 'c' })), CHAT, 2);
    expect(many).toEqual({
      kind: 'invalid',
      errors: [{ code: 'too_many_tasks', message: 'the input file holds 3 requests; a batch holds at most 2' }],
    });
    expect(parseBatchInput(file(''), CHAT, 2)).toEqual({
      kind: 'invalid',
      errors: [{ code: 'empty_file', message: 'the input file holds no requests' }],
    });
  });
});
