/**
 * What the runner knows about each kind of OpenAI-compatible engine it can front: where to ask
 * whether it is ready, where it lists its models, and how to read its load from its Prometheus
 * page. Launching engines is argv.ts's business; this file is only about talking to one.
 */
import { show } from '../../placer/kernel/index.ts';
import type { EngineLoad } from '../protocol/index.ts';
import { UnknownEngineKindError } from './errors.ts';
import { findSamples, sumSamples } from './prometheus.ts';
import type { MetricFamily } from './prometheus.ts';

/** The engine kinds an adapter can talk to; `openai` is any other OpenAI-compatible URL. */
export const ENGINE_KINDS = ['vllm', 'sglang', 'llamacpp', 'tgi', 'ollama', 'openai', 'sim'] as const;

/** One of {@link ENGINE_KINDS}. */
export type EngineKindName = (typeof ENGINE_KINDS)[number];

/** Where a kind's Prometheus page is and how to read load from it. */
export interface EngineMetrics {
  readonly path: string;
  readonly load: (families: readonly MetricFamily[]) => EngineLoad;
}

/** How to talk to one kind of engine. */
export interface EngineKindSpec {
  readonly name: EngineKindName;
  /** GET answers 200 when the engine can take calls. */
  readonly healthPath: string;
  /** GET answers the OpenAI model list. */
  readonly modelsPath: string;
  /** Undefined for kinds with no Prometheus page (Ollama, a plain OpenAI URL). */
  readonly metrics: EngineMetrics | undefined;
}

/** The first name in `names` present on the page, summed over label sets; NaN counts as absent. */
function total(families: readonly MetricFamily[], ...names: string[]): number | undefined {
  for (const name of names) {
    const sum = sumSamples(families, name);
    if (sum !== undefined) return Number.isFinite(sum) ? sum : undefined;
  }
  return undefined;
}

/** The first name present, averaged over label sets and held to 0..1. */
function share(families: readonly MetricFamily[], ...names: string[]): number | undefined {
  for (const name of names) {
    const found = findSamples(families, name);
    if (found.length === 0) continue;
    const mean = found.reduce((s, x) => s + x.value, 0) / found.length;
    // Float rounding in the engine can report 1.0000001; weights downstream assume 0..1.
    return Number.isFinite(mean) ? Math.min(1, Math.max(0, mean)) : undefined;
  }
  return undefined;
}

/** Drops the absent fields, so a load compares and prints as exactly what the page said. */
function present(load: EngineLoad): EngineLoad {
  const out: EngineLoad = {};
  for (const key of Object.keys(load) as (keyof EngineLoad)[]) if (load[key] !== undefined) out[key] = load[key];
  return out;
}

function vllmLoad(f: readonly MetricFamily[]): EngineLoad {
  // vLLM 0.9 renamed vllm:gpu_prefix_cache_* to vllm:prefix_cache_* and served both for a while
  // with equal values: take one generation, hits and queries together, never their sum.
  const modern =
    findSamples(f, 'vllm:prefix_cache_queries_total').length > 0 ||
    findSamples(f, 'vllm:prefix_cache_queries').length > 0;
  const prefix = modern ? 'vllm:prefix_cache_' : 'vllm:gpu_prefix_cache_';
  return present({
    running: total(f, 'vllm:num_requests_running'),
    waiting: total(f, 'vllm:num_requests_waiting'),
    kvCacheUsage: share(f, 'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc'),
    // prometheus_client writes counters with `_total`; other writers may not.
    prefixCacheHits: total(f, `${prefix}hits_total`, `${prefix}hits`),
    prefixCacheQueries: total(f, `${prefix}queries_total`, `${prefix}queries`),
  });
}

function sglangLoad(f: readonly MetricFamily[]): EngineLoad {
  return present({
    running: total(f, 'sglang:num_running_reqs'),
    waiting: total(f, 'sglang:num_queue_reqs'),
    kvCacheUsage: share(f, 'sglang:token_usage'),
  });
}

function llamacppLoad(f: readonly MetricFamily[]): EngineLoad {
  return present({
    running: total(f, 'llamacpp:requests_processing'),
    waiting: total(f, 'llamacpp:requests_deferred'),
    // Older builds report it; later ones dropped it (from which release is unchecked), so absent.
    kvCacheUsage: share(f, 'llamacpp:kv_cache_usage_ratio'),
  });
}

function tgiLoad(f: readonly MetricFamily[]): EngineLoad {
  return present({ running: total(f, 'tgi_batch_current_size'), waiting: total(f, 'tgi_queue_size') });
}

const kinds: Record<EngineKindName, EngineKindSpec> = {
  vllm: {
    name: 'vllm',
    healthPath: '/health',
    modelsPath: '/v1/models',
    metrics: { path: '/metrics', load: vllmLoad },
  },
  // SGLang serves /metrics only when started with --enable-metrics; without it the page is a 404.
  sglang: {
    name: 'sglang',
    healthPath: '/health',
    modelsPath: '/v1/models',
    metrics: { path: '/metrics', load: sglangLoad },
  },
  // llama-server answers /health 503 while the model loads, and /metrics only with --metrics.
  llamacpp: {
    name: 'llamacpp',
    healthPath: '/health',
    modelsPath: '/v1/models',
    metrics: { path: '/metrics', load: llamacppLoad },
  },
  // TGI has served /v1/models since its 2.x Messages API; older routers only had /info. Not
  // checked against every release.
  tgi: { name: 'tgi', healthPath: '/health', modelsPath: '/v1/models', metrics: { path: '/metrics', load: tgiLoad } },
  // Ollama has no health route: /api/version answers once the server listens (so does `/`, with
  // plain text). Models load lazily on the first call, so ready here does not mean warm.
  ollama: { name: 'ollama', healthPath: '/api/version', modelsPath: '/v1/models', metrics: undefined },
  // A plain OpenAI-compatible URL promises nothing but the API itself, so the model list is the
  // health check too.
  openai: { name: 'openai', healthPath: '/v1/models', modelsPath: '/v1/models', metrics: undefined },
  // The simulated engine publishes vLLM's names so the same code reads both.
  sim: { name: 'sim', healthPath: '/health', modelsPath: '/v1/models', metrics: { path: '/metrics', load: vllmLoad } },
};

for (const spec of Object.values(kinds)) {
  if (spec.metrics) Object.freeze(spec.metrics);
  Object.freeze(spec);
}

/** Every kind's spec by name, frozen. */
export const ENGINE_KIND_SPECS: Readonly<Record<EngineKindName, EngineKindSpec>> = Object.freeze(kinds);

/**
 * The spec for an engine kind named in a profile or option.
 * @throws {UnknownEngineKindError} naming the bad value and the valid kinds.
 */
export function engineKind(name: string): EngineKindSpec {
  if (typeof name === 'string' && Object.hasOwn(ENGINE_KIND_SPECS, name))
    return ENGINE_KIND_SPECS[name as EngineKindName];
  throw new UnknownEngineKindError(`engine kind must be one of ${ENGINE_KINDS.join(', ')}, got ${show(name)}`);
}
