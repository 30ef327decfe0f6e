import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PrometheusParseError } from '../../../runner/engines/errors.ts';
import { findSamples, parsePrometheusText, sample, sumSamples } from '../../../runner/engines/prometheus.ts';
import type { MetricFamily } from '../../../runner/engines/prometheus.ts';

const fixture = (name: string): string =>
  readFileSync(new URL(`../../fixtures/metrics/${name}`, import.meta.url), 'utf8');

/** Parses strictly, so a test fails loudly on any line the parser would skip. */
const parse = (text: string): MetricFamily[] => parsePrometheusText(text, { strict: true });
const family = (families: MetricFamily[], name: string): MetricFamily => {
  const found = families.find((f) => f.name === name);
  if (!found) throw new Error(`no family ${name}`);
  return found;
};

describe('parsePrometheusText', () => {
  it('returns HELP, TYPE and labelled samples for a gauge with a colon in its name', () => {
    const page =
      '# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n' +
      'vllm:num_requests_running{engine="0",model_name="m"} 3.0\nvllm:num_requests_running{engine="1",model_name="m"} 4.0\n';
    expect(parse(page)).toEqual([
      {
        name: 'vllm:num_requests_running',
        type: 'gauge',
        help: 'Number of requests.',
        samples: [
          { name: 'vllm:num_requests_running', labels: { engine: '0', model_name: 'm' }, value: 3 },
          { name: 'vllm:num_requests_running', labels: { engine: '1', model_name: 'm' }, value: 4 },
        ],
      },
    ]);
  });

  it('returns label values unescaped for \\\\, \\" and \\n, and keeps an empty value', () => {
    const [f] = parse('m{path="C:\\\\tmp",quote="say \\"hi\\"",nl="a\\nb",empty=""} 1\n');
    expect(f!.samples[0]!.labels).toEqual({ path: 'C:\\tmp', quote: 'say "hi"', nl: 'a\nb', empty: '' });
  });

  it('returns a label value containing "}" , "," and "=" as written', () => {
    const [f] = parse('m{a="x},y=z"} 1\n');
    expect(f!.samples[0]!.labels).toEqual({ a: 'x},y=z' });
  });

  it('returns NaN, infinities, exponents and signed values as numbers', () => {
    const text = [
      'a NaN',
      'b +Inf',
      'c -Inf',
      'd 1.5e+03',
      'e 2E-3',
      'f -0.25',
      'g 1.21342582784e+011',
      'h .5',
      'i Inf',
      'j 7',
    ].join('\n');
    const values = Object.fromEntries(parse(text).map((f) => [f.name, f.samples[0]!.value]));
    expect(values).toEqual({
      a: NaN,
      b: Infinity,
      c: -Infinity,
      d: 1500,
      e: 0.002,
      f: -0.25,
      g: 121342582784,
      h: 0.5,
      i: Infinity,
      j: 7,
    });
  });

  it('returns the timestamp in ms when a line carries one, and none otherwise', () => {
    const [f] = parse('m{a="1"} 2 1712345678901\nm{a="2"} 3   -5 \nm{a="3"} 4\n');
    expect(f!.samples.map((s) => s.timestampMs)).toEqual([1712345678901, -5, undefined]);
  });

  it('returns the same families for CRLF, blank and indented lines as for plain LF', () => {
    const page = fixture('vllm.txt');
    const crlf = `\r\n\t\r\n${page
      .split('\n')
      .map((l) => `  ${l}`)
      .join('\r\n')}\r\n\r\n`;
    expect(parse(crlf)).toEqual(parse(page));
  });

  it('returns histogram _bucket, _count and _sum samples under their family, in page order', () => {
    const page = '# TYPE lat histogram\nlat_bucket{le="0.1"} 1\nlat_bucket{le="+Inf"} 3\nlat_count 3\nlat_sum 0.9\n';
    const [f, ...rest] = parse(page);
    expect(rest).toEqual([]);
    expect(f!.type).toBe('histogram');
    expect(f!.samples.map((s) => [s.name, s.labels.le, s.value])).toEqual([
      ['lat_bucket', '0.1', 1],
      ['lat_bucket', '+Inf', 3],
      ['lat_count', undefined, 3],
      ['lat_sum', undefined, 0.9],
    ]);
  });

  it('returns summary quantiles, _sum and _count under their family, but a summary _bucket on its own', () => {
    const page =
      '# TYPE rpc summary\nrpc{quantile="0.5"} 0.2\nrpc{quantile="0.99"} 1.1\nrpc_sum 40\nrpc_count 100\nrpc_bucket 1\n';
    const families = parse(page);
    expect(families.map((f) => [f.name, f.type, f.samples.length])).toEqual([
      ['rpc', 'summary', 4],
      ['rpc_bucket', 'untyped', 1],
    ]);
  });

  it('returns untyped families for samples without a TYPE line and for TYPE untyped', () => {
    const families = parse('# TYPE a untyped\na 1\nb_sum 2\n');
    expect(families.map((f) => [f.name, f.type])).toEqual([
      ['a', 'untyped'],
      ['b_sum', 'untyped'],
    ]);
  });

  it('returns a counter declared as x with samples x_total under x, as OpenMetrics writers do', () => {
    const families = parse('# TYPE x counter\nx_total{a="1"} 3\nx_total{a="2"} 4\n# TYPE y_total counter\ny_total 5\n');
    expect(families.map((f) => [f.name, f.type, f.samples.map((s) => s.name)])).toEqual([
      ['x', 'counter', ['x_total', 'x_total']],
      ['y_total', 'counter', ['y_total']],
    ]);
    expect(sumSamples(families, 'x_total')).toBe(7);
  });

  it('returns a suffixed sample in its own family when no histogram TYPE names the base', () => {
    const families = parse('# TYPE g gauge\ng_count 1\n');
    expect(families.map((f) => f.name)).toEqual(['g', 'g_count']);
  });

  it('returns the buckets of a histogram whose own name ends in _total (vllm:iteration_tokens_total)', () => {
    const f = family(parse(fixture('vllm.txt')), 'vllm:iteration_tokens_total');
    expect(f.type).toBe('histogram');
    expect(new Set(f.samples.map((s) => s.name))).toEqual(
      new Set([
        'vllm:iteration_tokens_total_bucket',
        'vllm:iteration_tokens_total_count',
        'vllm:iteration_tokens_total_sum',
      ]),
    );
    expect(f.samples).toHaveLength(2 * (14 + 2));
  });

  it('returns HELP unescaped, with trailing spaces and other backslashes kept', () => {
    const [f] = parse('# HELP h line one\\nline \\\\two \\d \n# TYPE h gauge\nh 1\n');
    expect(f!.help).toBe('line one\nline \\two \\d ');
  });

  it('returns families in order of first appearance and ignores plain comments', () => {
    const families = parse('# just a comment\nb 1\n# HELP a first seen here\n#another comment\na 2\nb{x="1"} 3\n');
    expect(families.map((f) => [f.name, f.samples.length])).toEqual([
      ['b', 2],
      ['a', 1],
    ]);
  });

  it('returns labels in a null-prototype object, so a __proto__ label is kept', () => {
    const [f] = parse('m{__proto__="p"} 1\n');
    expect(Object.getPrototypeOf(f!.samples[0]!.labels)).toBeNull();
    expect(f!.samples[0]!.labels.__proto__).toBe('p');
  });
});

describe('parsePrometheusText on bad lines', () => {
  const bad: Array<[string, RegExp]> = [
    ['m', /m has no value/],
    ['m{a="1"}', /m has no value/],
    ['m abc', /value "abc" is not a number/],
    ['m 0x10', /value "0x10" is not a number/],
    ['m{a="1} 2', /value of label a is not closed/],
    ['m{a="\\t"} 1', /invalid escape "\\\\t" in the value of label a/],
    ['m{1a="x"} 1', /invalid label name/],
    ['m{a "x"} 1', /label a is not followed by "="/],
    ['m{a=x} 1', /label a has no quoted value/],
    ['m{a="1",a="2"} 1', /label a appears twice/],
    ['m{a="1" b="2"} 1', /expected "," or "}" after label a/],
    ['m{a="1",', /label set is not closed/],
    ['m 1 12.5', /timestamp "12.5" is not an integer/],
    ['m 1 2 3', /unexpected text after the timestamp/],
    ['9m 1', /must start with a metric name/],
    ['m-x 1', /invalid character "-" in metric name/],
    ['# TYPE m info', /unknown metric type "info"/],
    ['# TYPE m', /# TYPE m needs a type/],
    ['# HELP', /# HELP needs a metric name/],
  ];

  it.each(bad)('skips %j and reports why with the line number', (line, why) => {
    const skipped: PrometheusParseError[] = [];
    const families = parsePrometheusText(`ok 1\n${line}\nok 2\n`, { onSkip: (e) => skipped.push(e) });
    expect(families.map((f) => [f.name, f.samples.map((s) => s.value)])).toEqual([['ok', [1, 2]]]);
    expect(skipped).toHaveLength(1);
    const [error] = skipped;
    expect(error).toBeInstanceOf(PrometheusParseError);
    expect([error!.code, error!.status, error!.line]).toEqual(['RUNNER_METRICS_PARSE', 502, 2]);
    expect(error!.message).toMatch(/^metrics line 2: /);
    expect(error!.message).toMatch(why);
  });

  it('skips a TYPE after the family has samples, and a second TYPE or HELP, keeping the first', () => {
    const skipped: number[] = [];
    const page =
      '# HELP a one\n# HELP a two\n# TYPE a gauge\n# TYPE a counter\na 1\n# TYPE b gauge\nc 1\n# TYPE c counter\n';
    const families = parsePrometheusText(page, { onSkip: (e) => skipped.push(e.line) });
    expect(families.map((f) => [f.name, f.type, f.help])).toEqual([
      ['a', 'gauge', 'one'],
      ['b', 'gauge', undefined],
      ['c', 'untyped', undefined],
    ]);
    expect(skipped).toEqual([2, 4, 8]);
  });

  it('keeps samples of an unknown TYPE as untyped, so an OpenMetrics-only family still reads', () => {
    const families = parsePrometheusText('# TYPE info_thing info\ninfo_thing{v="1"} 1\n', { onSkip: () => {} });
    expect(families.map((f) => [f.name, f.type, f.samples.length])).toEqual([['info_thing', 'untyped', 1]]);
  });

  it('throws the first bad line as a PrometheusParseError when strict', () => {
    expect(() => parsePrometheusText('ok 1\n\nm{a="1} 2\nn x\n', { strict: true })).toThrow(
      expect.objectContaining({ name: 'PrometheusParseError', code: 'RUNNER_METRICS_PARSE', line: 3 }),
    );
  });

  it('never throws without strict, whatever the page holds', () => {
    let skipped = 0;
    const garbage = '{{{\n"}"\n\\\n# TYPE\n=1\n m{ 1\n\u0000 2\n<html><body>502</body></html>\n';
    expect(parsePrometheusText(garbage, { onSkip: () => skipped++ })).toEqual([]);
    expect(skipped).toBe(8);
  });

  it('shortens a very long bad line in the message', () => {
    const skipped: PrometheusParseError[] = [];
    parsePrometheusText(`m{a="${'x'.repeat(500)}`, { onSkip: (e) => skipped.push(e) });
    expect(skipped[0]!.message.length).toBeLessThan(250);
    expect(skipped[0]!.message).toMatch(/\.\.\."$/);
  });
});

describe('findSamples, sample and sumSamples', () => {
  const families = parse(fixture('vllm.txt'));

  it('returns every label set of a name, and only those matching the given labels', () => {
    expect(findSamples(families, 'vllm:num_requests_running').map((s) => s.labels.engine)).toEqual(['0', '1']);
    expect(findSamples(families, 'vllm:num_requests_running', { engine: '1' }).map((s) => s.value)).toEqual([19]);
    expect(findSamples(families, 'vllm:num_requests_running', { engine: '9' })).toEqual([]);
  });

  it('returns the first value, the sum over label sets, or undefined when the name is absent', () => {
    expect(sample(families, 'vllm:num_requests_waiting')).toBe(4);
    expect(sumSamples(families, 'vllm:num_requests_waiting')).toBe(6);
    expect(sumSamples(families, 'vllm:request_success_total', { finished_reason: 'stop' })).toBe(43874 + 43281);
    expect(sample(families, 'vllm:no_such_metric')).toBeUndefined();
    expect(sumSamples(families, 'vllm:no_such_metric')).toBeUndefined();
  });

  it('returns a histogram bucket by its sample name and le label', () => {
    expect(sample(families, 'vllm:time_to_first_token_seconds_bucket', { engine: '0', le: '+Inf' })).toBe(48213);
  });

  it('tells a counter from its _created gauge family', () => {
    expect(family(families, 'vllm:prefix_cache_hits_total').type).toBe('counter');
    expect(family(families, 'vllm:prefix_cache_hits_created').type).toBe('gauge');
    expect(sumSamples(families, 'vllm:prefix_cache_hits_total')).toBe(21260288);
  });
});

describe('parsePrometheusText on the recorded engine pages', () => {
  const pages: Array<[string, number, string[]]> = [
    [
      'vllm.txt',
      844,
      [
        'vllm:kv_cache_usage_perc',
        'vllm:time_to_first_token_seconds',
        'process_resident_memory_bytes',
        'http_request_size_bytes',
      ],
    ],
    ['vllm-legacy.txt', 205, ['vllm:gpu_cache_usage_perc', 'vllm:lora_requests_info', 'vllm:spec_decode_efficiency']],
    ['sglang.txt', 147, ['sglang:token_usage', 'sglang:num_queue_reqs', 'sglang:time_to_first_token_seconds']],
    ['llamacpp.txt', 36, ['llamacpp:requests_processing', 'llamacpp:requests_deferred']],
    ['tgi.txt', 436, ['tgi_queue_size', 'tgi_batch_current_size', 'tgi_request_duration']],
  ];

  it.each(pages)('parses %s with no line skipped', (name, lines, expected) => {
    const text = fixture(name);
    expect(text.split('\n').length - 1).toBeGreaterThanOrEqual(lines);
    const families = parse(text);
    for (const n of expected) expect(families.map((f) => f.name)).toContain(n);
    for (const f of families)
      if (f.type === 'histogram') expect(f.samples.every((s) => /_(bucket|sum|count)$/.test(s.name))).toBe(true);
  });

  it('parses a 200 KB vLLM page (six engines) into every sample', () => {
    const page = fixture('vllm.txt')
      .split('\n')
      .flatMap((l) =>
        /engine="[01]"/.test(l)
          ? [0, 2, 4].map((k) => l.replace(/engine="([01])"/, (_, e: string) => `engine="${Number(e) + k}"`))
          : [l],
      )
      .join('\n');
    expect(page.length).toBeGreaterThan(200_000);
    const families = parse(page);
    expect(findSamples(families, 'vllm:num_requests_running').map((s) => s.labels.engine)).toEqual([
      '0',
      '2',
      '4',
      '1',
      '3',
      '5',
    ]);
    expect(families.reduce((n, f) => n + f.samples.length, 0)).toBe(
      page.split('\n').filter((l) => l !== '' && !l.startsWith('#')).length,
    );
  });
});
