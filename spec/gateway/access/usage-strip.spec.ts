import { describe, expect, it } from 'vitest';
import { stripInjectedUsage } from '../../../gateway/access/usage-strip.ts';

const event = (payload: object | string) =>
  `data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`;

describe('stripInjectedUsage', () => {
  it('drops the usage-only event and the null usage of the others, keeping every event whole', () => {
    const stream = [
      event({ id: 'c', choices: [{ index: 0, delta: { content: 'hi "usage"' } }], usage: null }),
      event({ usage: null, id: 'c', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
      event({ id: 'c', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }),
      event('[DONE]'),
    ].join('');
    expect(stripInjectedUsage(Buffer.from(stream)).toString()).toBe(
      [
        event({ id: 'c', choices: [{ index: 0, delta: { content: 'hi "usage"' } }] }),
        event({ id: 'c', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
        event('[DONE]'),
      ].join(''),
    );
  });

  it('keeps CRLF events, and answers a usage-only chunk with nothing', () => {
    const usage = 'data: {"choices": [], "usage": {"total_tokens": 5}}\r\n\r\n';
    expect(stripInjectedUsage(Buffer.from(usage)).length).toBe(0);
    const kept = 'data: {"choices":[{"text":"a"}], "usage": null}\r\n\r\n';
    expect(stripInjectedUsage(Buffer.from(kept + usage)).toString()).toBe('data: {"choices":[{"text":"a"}]}\r\n\r\n');
  });

  it('passes a chunk without usage on as the same buffer', () => {
    const chunk = Buffer.from(event({ choices: [{ delta: { content: 'x' } }] }));
    expect(stripInjectedUsage(chunk)).toBe(chunk);
  });
});
