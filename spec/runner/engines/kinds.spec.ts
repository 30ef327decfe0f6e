import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { UnknownEngineKindError } from '../../../runner/engines/errors.ts';
import { ENGINE_KIND_SPECS, ENGINE_KINDS, engineKind } from '../../../runner/engines/kinds.ts';
import type { EngineKindName } from '../../../runner/engines/kinds.ts';
import type { EngineLoad } from '../../../runner/protocol/index.ts';
import { parsePrometheusText } from '../../../runner/engines/prometheus.ts';
import { expectThrows } from '../../support/throws.ts';

const fixture = (name: string): string =>
  readFileSync(new URL(`../../fixtures/metrics/${name}`, import.meta.url), 'utf8');

/** The load a kind reads from a page, parsed strictly so a skipped line cannot hide a figure. */
function load(kind: EngineKindName, page: string): EngineLoad {
  const metrics = ENGINE_KIND_SPECS[kind].metrics;
  if (!metrics) throw new Error(`kind ${kind} has no metrics`);
  return metrics.load(parsePrometheusText(page, { strict: true }));
}

describe('engine kinds reading the recorded /metrics pages', () => {
  const cases: Array<[EngineKindName, string, EngineLoad]> = [
    // Two data-parallel engines: counts and counters summed, KV usage averaged.
    [
      'vllm',
      'vllm.txt',
      { running: 42, waiting: 6, kvCacheUsage: 0.578125, prefixCacheHits: 21260288, prefixCacheQueries: 36656560 },
    ],
    ['vllm', 'vllm-legacy.txt', { running: 7, waiting: 0, kvCacheUsage: 0.23160424261720985 }],
    [
      'sim',
      'vllm.txt',
      { running: 42, waiting: 6, kvCacheUsage: 0.578125, prefixCacheHits: 21260288, prefixCacheQueries: 36656560 },
    ],
    ['sglang', 'sglang.txt', { running: 38, waiting: 11, kvCacheUsage: 0.71 }],
    ['llamacpp', 'llamacpp.txt', { running: 4, waiting: 2, kvCacheUsage: 0.4375 }],
    ['tgi', 'tgi.txt', { running: 14, waiting: 3 }],
  ];

  it.each(cases)('returns the exact load for kind %s from %s', (kind, page, expected) => {
    expect(load(kind, fixture(page))).toStrictEqual(expected);
  });

  it('returns an empty load for every kind when the page has none of its names', () => {
    for (const kind of ENGINE_KINDS) {
      const metrics = ENGINE_KIND_SPECS[kind].metrics;
      if (metrics)
        expect(
          metrics.load(parsePrometheusText(fixture('llamacpp.txt').replaceAll('llamacpp:', 'other:'))),
        ).toStrictEqual({});
    }
  });
});

describe('the vLLM reading', () => {
  const gauges = (running: string) => `vllm:num_requests_running{engine="0"} ${running}\n`;

  it('returns one generation of prefix counters when a page carries both, never their sum', () => {
    const both =
      'vllm:gpu_prefix_cache_hits_total 10.0\nvllm:gpu_prefix_cache_queries_total 40.0\n' +
      'vllm:prefix_cache_hits_total 10.0\nvllm:prefix_cache_queries_total 40.0\n';
    expect(load('vllm', both)).toStrictEqual({ prefixCacheHits: 10, prefixCacheQueries: 40 });
    const differing = both.replace('vllm:prefix_cache_hits_total 10.0', 'vllm:prefix_cache_hits_total 12.0');
    expect(load('vllm', differing)).toStrictEqual({ prefixCacheHits: 12, prefixCacheQueries: 40 });
  });

  it('returns the deprecated gpu_prefix_cache counters when the new ones are absent', () => {
    const old =
      'vllm:gpu_prefix_cache_hits_total{engine="0"} 3.0\nvllm:gpu_prefix_cache_hits_total{engine="1"} 4.0\n' +
      'vllm:gpu_prefix_cache_queries_total{engine="0"} 9.0\nvllm:gpu_prefix_cache_queries_total{engine="1"} 9.0\n';
    expect(load('vllm', old)).toStrictEqual({ prefixCacheHits: 7, prefixCacheQueries: 18 });
  });

  it('returns prefix counters written without the _total suffix', () => {
    expect(load('vllm', 'vllm:prefix_cache_hits 5\nvllm:prefix_cache_queries 8\n')).toStrictEqual({
      prefixCacheHits: 5,
      prefixCacheQueries: 8,
    });
  });

  it('returns kv_cache_usage_perc over the older gpu_cache_usage_perc when both are present', () => {
    expect(load('vllm', 'vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.25\n')).toStrictEqual({
      kvCacheUsage: 0.25,
    });
  });

  it('returns KV usage held to 0..1 when the engine reports a hair outside it', () => {
    expect(load('vllm', 'vllm:kv_cache_usage_perc 1.0000001\n')).toStrictEqual({ kvCacheUsage: 1 });
    expect(load('vllm', 'vllm:kv_cache_usage_perc -0.0001\n')).toStrictEqual({ kvCacheUsage: 0 });
  });

  it('returns no field for a NaN reading rather than a NaN load', () => {
    expect(load('vllm', `${gauges('NaN')}vllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc NaN\n`)).toStrictEqual({
      waiting: 2,
    });
  });

  it('returns zero as zero, not as absent', () => {
    expect(load('vllm', `${gauges('0.0')}vllm:num_requests_waiting 0\n`)).toStrictEqual({ running: 0, waiting: 0 });
  });
});

describe('the SGLang reading', () => {
  it('returns requests summed and token usage averaged over data-parallel ranks', () => {
    const page = ['0', '1']
      .map(
        (dp) =>
          `sglang:num_running_reqs{dp_rank="${dp}"} ${dp === '0' ? 5 : 7}\nsglang:num_queue_reqs{dp_rank="${dp}"} 1\nsglang:token_usage{dp_rank="${dp}"} ${dp === '0' ? 0.5 : 0.75}\n`,
      )
      .join('');
    expect(load('sglang', page)).toStrictEqual({ running: 12, waiting: 2, kvCacheUsage: 0.625 });
  });
});

describe('ENGINE_KIND_SPECS', () => {
  it('returns the health, models and metrics paths of each kind', () => {
    const table = ENGINE_KINDS.map((k) => {
      const s = ENGINE_KIND_SPECS[k];
      return [s.name, s.healthPath, s.modelsPath, s.metrics?.path];
    });
    expect(table).toEqual([
      ['vllm', '/health', '/v1/models', '/metrics'],
      ['sglang', '/health', '/v1/models', '/metrics'],
      ['llamacpp', '/health', '/v1/models', '/metrics'],
      ['tgi', '/health', '/v1/models', '/metrics'],
      ['ollama', '/api/version', '/v1/models', undefined],
      ['openai', '/v1/models', '/v1/models', undefined],
      ['sim', '/health', '/v1/models', '/metrics'],
    ]);
  });

  it("returns frozen specs, so one runner cannot change another kind's paths", () => {
    expect(Object.isFrozen(ENGINE_KIND_SPECS)).toBe(true);
    expect(Object.isFrozen(ENGINE_KIND_SPECS.vllm)).toBe(true);
    expect(Object.isFrozen(ENGINE_KIND_SPECS.vllm.metrics)).toBe(true);
  });
});

describe('engineKind', () => {
  it('returns the spec for each valid name', () => {
    for (const kind of ENGINE_KINDS) expect(engineKind(kind)).toBe(ENGINE_KIND_SPECS[kind]);
  });

  it.each(['vLLM', 'vlm', '', 'toString', '__proto__', 'constructor'])(
    'throws RUNNER_UNKNOWN_ENGINE_KIND listing the valid kinds for %j',
    (name) => {
      expectThrows(() => engineKind(name), UnknownEngineKindError, {
        code: 'RUNNER_UNKNOWN_ENGINE_KIND',
        message: `engine kind must be one of vllm, sglang, llamacpp, tgi, ollama, openai, sim, got ${JSON.stringify(name)}`,
      });
    },
  );
});
