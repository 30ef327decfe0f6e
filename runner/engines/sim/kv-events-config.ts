/**
 * The simulated engine's `--kv-events-config`, read as vLLM reads its own (`KVEventsConfig` in
 * vLLM v0.12's `vllm/config/kv_events.py`): a JSON object with `enable_kv_cache_events`,
 * `publisher` ("zmq", or "null" for none), `endpoint` (default `tcp://*:5557`), `topic` (default
 * empty), `replay_endpoint` (optional) and `buffer_steps` (batches kept for replay, default
 * 10000). vLLM's `hwm` and `max_queue_size` are taken and ignored: a simulator never backs up.
 * In SGLang's style the config is read as SGLang reads its own (`KVEventsConfig` in
 * `python/sglang/srt/disaggregation/kv_events.py`): the same fields, publishing on without
 * `enable_kv_cache_events`.
 */
import { show } from '../../../placer/kernel/index.ts';

/**
 * Whose events the engine publishes: vLLM's (its blocks, named by the wire's scheme), or SGLang's
 * (one per page of `pageSize` tokens, named by SGLang's own hashes: kv-events-sglang.ts).
 */
export type SimKvEventsStyle = { readonly kind: 'vllm' } | { readonly kind: 'sglang'; readonly pageSize: number };

/** The style of a config that names none. */
export const VLLM_STYLE: SimKvEventsStyle = Object.freeze({ kind: 'vllm' });

/** What the simulated engine's event publisher is told, resolved. */
export interface SimKvEventsConfig {
  /** Whose events: vLLM's unless the engine is told `--kv-events-style sglang`. */
  readonly style: SimKvEventsStyle;
  /** Where the PUB socket binds (an endpoint with `*`, `::`, ipc:// or inproc://) or connects (any other). */
  readonly endpoint: string;
  /** The first frame of every message. */
  readonly topic: string;
  /** Where a ROUTER socket answers replay requests; undefined for none. */
  readonly replayEndpoint: string | undefined;
  /** Batches kept for replay. */
  readonly bufferSteps: number;
}

const KNOWN = new Set([
  'enable_kv_cache_events',
  'publisher',
  'endpoint',
  'topic',
  'replay_endpoint',
  'buffer_steps',
  'hwm',
  'max_queue_size',
]);

/**
 * The events config from its JSON text (or the parsed object), or undefined when it turns
 * events off (`enable_kv_cache_events` false, or publisher "null").
 * @param fail makes the error for a bad config, from its message.
 */
export function parseKvEventsConfig(
  value: unknown,
  fail: (message: string) => Error,
  style: SimKvEventsStyle = VLLM_STYLE,
): SimKvEventsConfig | undefined {
  let config: unknown = value;
  if (typeof value === 'string') {
    try {
      config = JSON.parse(value);
    } catch {
      throw fail(`kvEventsConfig must be a JSON object, got ${show(value)}`);
    }
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw fail(`kvEventsConfig must be a JSON object, got ${show(value)}`);
  const fields = config as Record<string, unknown>;
  const unknown = Object.keys(fields).find((key) => !KNOWN.has(key));
  if (unknown !== undefined)
    throw fail(`kvEventsConfig has no field ${show(unknown)}; known: ${[...KNOWN].join(', ')}`);
  // SGLang has no such field: its flag given turns publishing on.
  const enabled = fields.enable_kv_cache_events ?? style.kind === 'sglang';
  if (typeof enabled !== 'boolean')
    throw fail(`kvEventsConfig.enable_kv_cache_events must be true or false, got ${show(enabled)}`);
  const publisher = fields.publisher ?? 'null';
  if (publisher !== 'zmq' && publisher !== 'null')
    throw fail(`kvEventsConfig.publisher must be "zmq" or "null", got ${show(publisher)}`);
  const endpoint = text(fields, 'endpoint', 'tcp://*:5557', fail);
  if (!/^(tcp|ipc|inproc):\/\/\S+$/.test(endpoint))
    throw fail(`kvEventsConfig.endpoint must be a tcp://, ipc:// or inproc:// address, got ${show(endpoint)}`);
  const replay = fields.replay_endpoint ?? undefined;
  if (replay !== undefined && (typeof replay !== 'string' || !/^(tcp|ipc|inproc):\/\/\S+$/.test(replay)))
    throw fail(`kvEventsConfig.replay_endpoint must be a tcp://, ipc:// or inproc:// address, got ${show(replay)}`);
  const bufferSteps = fields.buffer_steps ?? 10_000;
  if (!Number.isSafeInteger(bufferSteps) || (bufferSteps as number) < 1)
    throw fail(`kvEventsConfig.buffer_steps must be a positive integer, got ${show(bufferSteps)}`);
  if (!enabled || publisher === 'null') return undefined;
  return Object.freeze({
    style,
    endpoint,
    topic: text(fields, 'topic', '', fail),
    replayEndpoint: replay as string | undefined,
    bufferSteps: bufferSteps as number,
  });
}

function text(fields: Record<string, unknown>, key: string, fallback: string, fail: (message: string) => Error) {
  const value = fields[key] ?? fallback;
  if (typeof value !== 'string') throw fail(`kvEventsConfig.${key} must be a string, got ${show(value)}`);
  return value;
}
