/**
 * gateway/calls/inference.ts: the answer watch's event boundaries and timings on a fake clock, the
 * usage block read from an answer's end, and the recorder's attribute sets.
 */
import { describe, expect, it } from 'vitest';
import { AnswerWatch, InferenceRecorder, readUsage } from '../../../gateway/calls/inference.ts';
import type { InferenceInstruments } from '../../../gateway/observe/metrics.ts';
import { StatsWindow } from '../../../gateway/observe/stats.ts';

/** A clock the test moves. */
function clock(start = 1_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms), sleep: async () => {} };
}

const chunk = (id: number, content: string, extra = '') =>
  `data: {"id":"c${id}","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"${content}"}}]${extra}}\n\n`;
const USAGE_CHUNK =
  'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}\n\n';

function streamWatch(c = clock()) {
  return { c, watch: new AnswerWatch({ sse: true, json: false, startedAt: 1_000, now: c.now }) };
}

describe('AnswerWatch on a stream', () => {
  it('returns the time to the first chunk and the mean gap between events, one event per chunk', () => {
    const { c, watch } = streamWatch();
    c.advance(150);
    watch.chunk(Buffer.from(chunk(1, 'a')));
    c.advance(20);
    watch.chunk(Buffer.from(chunk(2, 'b')));
    c.advance(40);
    watch.chunk(Buffer.from(chunk(3, 'c')));
    expect(watch.finish()).toEqual({ ttftMs: 150, perEventMs: 30, events: 3 });
  });

  it('counts events, not chunks: three events in one chunk, and one event split across three chunks', () => {
    const { c, watch } = streamWatch();
    c.advance(10);
    watch.chunk(Buffer.from(chunk(1, 'a') + chunk(2, 'b') + chunk(3, 'c')));
    const split = chunk(4, 'd');
    c.advance(30);
    watch.chunk(Buffer.from(split.slice(0, 10)));
    watch.chunk(Buffer.from(split.slice(10, split.length - 1)));
    // The event's end, its second line feed, arrives alone.
    c.advance(30);
    watch.chunk(Buffer.from('\n'));
    const reading = watch.finish();
    expect(reading.events).toBe(4);
    expect(reading.ttftMs).toBe(10);
    // From the first event (t=10) to the fourth (t=70), three gaps.
    expect(reading.perEventMs).toBe(20);
  });

  it('finds a CRLF blank line split between two chunks, CR in one and LF in the next', () => {
    const { c, watch } = streamWatch();
    watch.chunk(Buffer.from('data: {"a":1}\r\n\r'));
    c.advance(50);
    // The first event ends here, with its LF: it and the second one both at t=50.
    watch.chunk(Buffer.from('\ndata: {"a":2}\r\n\r\n'));
    c.advance(60);
    watch.chunk(Buffer.from('data: {"a":3}\r\n\r\n'));
    expect(watch.finish()).toMatchObject({ events: 3, perEventMs: 30 });
  });

  it('does not end an event at a line feed inside it, nor count blank lines between events', () => {
    const { watch } = streamWatch();
    watch.chunk(Buffer.from('event: message\ndata: {"a":1}\n\n\n\ndata: {"a":2}\n'));
    watch.chunk(Buffer.from('data: more\n\n'));
    expect(watch.finish().events).toBe(2);
  });

  it('reads the usage of the last chunk when the client asked for it, and leaves it and [DONE] out of the events', () => {
    const { c, watch } = streamWatch();
    c.advance(100);
    watch.chunk(Buffer.from(chunk(1, 'a', ',"usage":null')));
    c.advance(10);
    watch.chunk(Buffer.from(chunk(2, 'b', ',"usage":null')));
    c.advance(10);
    watch.chunk(Buffer.from(chunk(3, 'c', ',"usage":null')));
    c.advance(500);
    watch.chunk(Buffer.from(`${USAGE_CHUNK}data: [DONE]\n\n`));
    // The closing chunks came 500 ms late: they do not stretch the gap between tokens.
    expect(watch.finish()).toEqual({ ttftMs: 100, perEventMs: 10, events: 3, usage: { input: 12, output: 3 } });
  });

  it('returns no usage for a stream without one (include_usage not asked), and no gap for a single event', () => {
    const { watch } = streamWatch();
    watch.chunk(Buffer.from(`${chunk(1, 'a')}data: [DONE]\n\n`));
    expect(watch.finish()).toEqual({ ttftMs: 0, events: 1 });
  });

  it('returns no time to first token for a stream that sent no byte', () => {
    const { watch } = streamWatch();
    expect(watch.finish()).toEqual({ events: 0 });
  });
});

describe('AnswerWatch on a JSON answer', () => {
  const completion = (pad: number) =>
    `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"${'z'.repeat(pad)}"}}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"prompt_tokens_details":null}}`;

  it("returns no time to first token, and the usage block from the answer's end", () => {
    const c = clock();
    const watch = new AnswerWatch({ sse: false, json: true, startedAt: 1_000, now: c.now });
    c.advance(300);
    watch.chunk(Buffer.from(completion(10)));
    expect(watch.finish()).toEqual({ events: 0, usage: { input: 7, output: 2 } });
  });

  it('reads the usage of a long answer from its last two chunks', () => {
    const text = completion(100_000);
    const watch = new AnswerWatch({ sse: false, json: true, startedAt: 0, now: () => 0 });
    for (let i = 0; i < text.length; i += 16_384) watch.chunk(Buffer.from(text.slice(i, i + 16_384)));
    expect(watch.finish().usage).toEqual({ input: 7, output: 2 });
  });

  it('finds a usage block split across the last two chunks', () => {
    const text = completion(10);
    const at = text.indexOf('"completion_tokens"');
    const watch = new AnswerWatch({ sse: false, json: true, startedAt: 0, now: () => 0 });
    watch.chunk(Buffer.from(text.slice(0, at)));
    watch.chunk(Buffer.from(text.slice(at)));
    expect(watch.finish().usage).toEqual({ input: 7, output: 2 });
  });

  it('does not look at an answer that is not JSON', () => {
    const watch = new AnswerWatch({ sse: false, json: false, startedAt: 0, now: () => 0 });
    watch.chunk(Buffer.from(completion(10)));
    expect(watch.finish()).toEqual({ events: 0 });
  });
});

describe('readUsage', () => {
  it.each([
    [
      'chat completions',
      '{"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}',
      { input: 5, output: 6 },
    ],
    ['the Responses API', '{"usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11}}', { input: 5, output: 6 }],
    ['embeddings (input only)', '{"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}', { input: 4 }],
    ['spaces around the colon', '{"usage" : {"prompt_tokens":1,"completion_tokens":2}}', { input: 1, output: 2 }],
    [
      'a string holding a brace in the block',
      '{"usage":{"note":"}{","prompt_tokens":1,"completion_tokens":2}}',
      { input: 1, output: 2 },
    ],
    [
      'cached tokens in the prompt details',
      '{"usage":{"prompt_tokens":80,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":64}}}',
      { input: 80, output: 2, cached: 64 },
    ],
    [
      'cached tokens in the Responses API input details',
      '{"usage":{"input_tokens":80,"output_tokens":2,"input_tokens_details":{"cached_tokens":0}}}',
      { input: 80, output: 2, cached: 0 },
    ],
    [
      'null prompt details (no cached count)',
      '{"usage":{"prompt_tokens":8,"completion_tokens":2,"prompt_tokens_details":null}}',
      { input: 8, output: 2 },
    ],
    [
      'a stream usage chunk',
      'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":32}}}\n\ndata: [DONE]\n\n',
      { input: 40, output: 3, cached: 32 },
    ],
  ])('returns the counts of %s', (_name, text, expected) => {
    expect(readUsage(Buffer.from(text))).toEqual(expected);
  });

  it.each([
    ['no usage block', '{"choices":[]}'],
    ['a null usage', '{"usage":null}'],
    ["a block cut at the tail's start or end", '{"usage":{"prompt_tokens":1,'],
    ['a block with no count', '{"usage":{"foo":1}}'],
    ['negative or fractional counts', '{"usage":{"prompt_tokens":-1,"completion_tokens":1.5}}'],
    ['a block that is not JSON', '{"usage":{prompt_tokens:1}}'],
  ])('returns undefined for %s', (_name, text) => {
    expect(readUsage(Buffer.from(text))).toBeUndefined();
  });
});

describe('InferenceRecorder', () => {
  /** Instruments that keep what was recorded, with the attribute objects as given. */
  function recording() {
    const records: Array<[string, number, object]> = [];
    const histogram = (name: string) => ({
      record: (value: number, attributes: object) => void records.push([name, value, attributes]),
    });
    const instruments = {
      timeToFirstToken: histogram('ttft'),
      timePerOutputToken: histogram('tpot'),
      requestDuration: histogram('duration'),
      tokenUsage: histogram('tokens'),
      queueWait: histogram('queue'),
    } as unknown as InferenceInstruments;
    return { records, instruments };
  }

  it('records in seconds with one attribute set per model and runner, built once', () => {
    const { records, instruments } = recording();
    const c = clock();
    const recorder = new InferenceRecorder(instruments, new StatsWindow({ clock: c }));
    const reading = { ttftMs: 250, perEventMs: 20, events: 5, usage: { input: 10, output: 5 } };
    recorder.record({
      model: 'm',
      runner: 'r1',
      operation: 'chat',
      durationMs: 1500,
      queueWaitMs: 40,
      ok: true,
      reading,
    });
    recorder.record({
      model: 'm',
      runner: 'r1',
      operation: 'chat',
      durationMs: 1000,
      queueWaitMs: 0,
      ok: true,
      reading,
    });
    expect(records.slice(0, 6).map(([name, value]) => [name, value])).toEqual([
      ['queue', 0.04],
      ['duration', 1.5],
      ['ttft', 0.25],
      ['tpot', 0.02],
      ['tokens', 10],
      ['tokens', 5],
    ]);
    // The GenAI conventions' required attributes on every record: the operation and the provider.
    const base = {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'sluice',
      'gen_ai.request.model': 'm',
      'sluice.runner.id': 'r1',
    };
    expect(records[0]![2]).toEqual(base);
    expect(records[4]![2]).toEqual({ ...base, 'gen_ai.token.type': 'input' });
    expect(records[5]![2]).toEqual({ ...base, 'gen_ai.token.type': 'output' });
    // The same objects for the second call: nothing built per call.
    expect(records[6]![2]).toBe(records[0]![2]);
    expect(records[10]![2]).toBe(records[4]![2]);
    expect(recorder.attributes('m', 'r2', 'chat')).not.toBe(recorder.attributes('m', 'r1', 'chat'));
    expect(recorder.attributes('m', 'r1', 'embeddings')).not.toBe(recorder.attributes('m', 'r1', 'chat'));
  });

  it('records only the queue wait of an answer not relayed in full with a 2xx status, and counts it without a TTFT in the window', () => {
    const { records, instruments } = recording();
    const c = clock(0);
    const window = new StatsWindow({ clock: c });
    const recorder = new InferenceRecorder(instruments, window);
    recorder.record({
      model: 'm',
      runner: 'r1',
      operation: 'chat',
      durationMs: 10,
      queueWaitMs: 5,
      ok: false,
      reading: { ttftMs: 3, events: 1 },
    });
    expect(records.map(([name]) => name)).toEqual(['queue']);
    const m = window.models().m!;
    expect(m.ttftMs).toBeNull();
    expect(m.series.at(-1)).toMatchObject({ calls: 1, p50: null });
  });
});
