/**
 * `sluice sim-engine`: the simulated engine's settings. Timings have no default of their own:
 * an unset one comes from --profile, so `--profile h100-8b` alone gives the H100 figures; the
 * other defaults --help shows are read from simEngineDefaults.
 */
import type { SimEngineOptions } from '../../runner/engines/sim/options.ts';
import { simEngineDefaults } from '../../runner/engines/sim/options.ts';
import type { Command } from './command.ts';
import { givenValues, host, logFormat, logLevel, port, settingsOf } from './command.ts';
import { reportListening } from '../../placer/kernel/index.ts';
import { SettingsError } from './settings.ts';
import type { Setting, SettingType } from './settings.ts';

/** Settings whose defaults are simEngineDefaults'. */
const s = settingsOf(simEngineDefaults);
const d = simEngineDefaults;

/** Settings whose defaults come from the timing profile (--profile). */
const fromProfile = (key: string, type: SettingType, description: string): Setting => ({
  key,
  type,
  description,
  defaultText: 'from --profile',
});

/** The share of calls that fail with `status`, a setting of its own per status. */
const failureRate = (status: 429 | 503 | 500, what: string): Setting => ({
  key: `failureRate${status}`,
  type: 'number',
  libraryDefault: d.failureRate[status],
  description: `share of calls ${what}`,
});

/** Simulated-engine settings, shared by `sim-engine` and `up` (which hands them to its engines). */
export const simSettings: readonly Setting[] = [
  { key: 'model', type: 'list', libraryDefault: d.models, description: 'model names the engine serves' },
  // A timing profile, where the runner's SLUICE_PROFILE is an engine to launch: its own variable.
  {
    ...s('profile', 'string', 'timing profile: small (fast, for tests) or h100-8b (an 8B model on an H100)'),
    env: 'SLUICE_SIM_PROFILE',
  },
  fromProfile('ttftMs', 'number', 'prefill overhead in ms: time to first token before per-token prefill'),
  fromProfile('prefillPerTokenMs', 'number', 'prefill time per uncached prompt token, ms'),
  fromProfile('prefillJitterStdMs', 'number', 'standard deviation of prefill time, ms, capped at 30% of the mean'),
  fromProfile('itlMs', 'number', 'time between output tokens, ms'),
  fromProfile('itlJitterStdMs', 'number', 'standard deviation of the inter-token time, ms'),
  fromProfile(
    'loadFactor',
    'number',
    'slowdown with a full batch: times scale by 1 + (f - 1)(running - 1)/(max-num-seqs - 1)',
  ),
  s('outputTokens', 'integer', 'output length when a request sets no max_tokens'),
  fromProfile('maxNumSeqs', 'integer', 'sequences running at once'),
  fromProfile('maxQueue', 'integer', 'waiting requests before 429'),
  fromProfile('cacheBlocks', 'integer', 'prefix-cache capacity in blocks'),
  fromProfile('kvBlocks', 'integer', 'KV-cache size in blocks, for vllm:kv_cache_usage_perc'),
  s('blockSize', 'integer', "tokens per KV-cache block, as vLLM's --block-size"),
  s(
    'enablePromptTokensDetails',
    'boolean',
    "answers carry usage.prompt_tokens_details.cached_tokens, as vLLM's --enable-prompt-tokens-details",
  ),
  failureRate(429, 'refused with 429 before any output'),
  failureRate(503, 'refused with 503 before any output'),
  failureRate(500, 'failed with 500'),
  s('startupDelayMs', 'duration', 'time the engine reports loading (503) after start'),
  {
    key: 'crashOnCall',
    type: 'integer',
    description: 'exit with code 70 on this call (counting from 1), to exercise supervision',
  },
  {
    key: 'callLog',
    type: 'string',
    description:
      'file to append each call\'s sluice-call-id to ("<id> start", "<id> refused" after a 429 or 503, "<id> trace <traceparent>" when traced), to count calls run twice across restarts',
    defaultText: 'none',
  },
];

/** The sim-engine options `values` gave, failure rates folded into one object. */
function simOptions(values: Record<string, unknown>): SimEngineOptions {
  const keys = simSettings.map((setting) => setting.key).filter((k) => k !== 'model' && !k.startsWith('failureRate'));
  const failureRate: Record<number, number> = {};
  for (const status of [429, 503, 500]) {
    const rate = values[`failureRate${status}`];
    if (typeof rate === 'number' && rate > 0) failureRate[status] = rate;
  }
  return {
    ...givenValues(values, keys),
    ...(values.model === undefined ? {} : { models: values.model as string[] }),
    ...(Object.keys(failureRate).length === 0 ? {} : { failureRate }),
  } as SimEngineOptions;
}

/** `sluice sim-engine`. */
export const simEngine: Command = {
  summary: 'Runs a simulated OpenAI-compatible inference engine that behaves like vLLM over HTTP.',
  settings: [
    port(8000),
    host,
    ...simSettings,
    {
      key: 'engineId',
      type: 'string',
      description: 'name sent in the sluice-engine-id header',
      defaultText: 'sim- and 6 random hex digits',
    },
    {
      key: 'kvEventsConfig',
      type: 'json',
      description:
        'KV-cache events as vLLM\'s --kv-events-config takes them: {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "", "replay_endpoint": ...}; the block hashes are seeded by PYTHONHASHSEED (unset: a random seed, as vLLM)',
      defaultText: 'none',
    },
    {
      key: 'kvEventsStyle',
      type: 'string',
      description:
        "whose KV events to publish: vllm, or sglang (one per page of --page-size tokens, named by SGLang's own hashes, which gateways cannot compute: a runner names them anew with --kv-block-keys tokens)",
      defaultText: 'vllm',
    },
    {
      key: 'pageSize',
      type: 'integer',
      description:
        "tokens per page with --kv-events-style sglang, as SGLang's --page-size; it must divide --block-size",
      defaultText: '1',
    },
    {
      key: 'prefixCachingHashAlgo',
      type: 'string',
      description: "block hash algorithm, as vLLM's --prefix-caching-hash-algo; only sha256_cbor",
      defaultText: 'sha256_cbor',
    },
    logLevel,
    logFormat,
  ],
  async run({ values, logger, env }) {
    if (values.prefixCachingHashAlgo !== undefined && values.prefixCachingHashAlgo !== 'sha256_cbor')
      throw new SettingsError(
        `--prefix-caching-hash-algo must be sha256_cbor, the only one the simulated engine computes; got ${JSON.stringify(values.prefixCachingHashAlgo)}`,
      );
    const { runSimEngineCommand } = await import('../../runner/engines/sim/main.ts');
    const engine = await runSimEngineCommand(
      {
        ...simOptions(values),
        ...(values.engineId === undefined ? {} : { engineId: values.engineId as string }),
        ...(values.kvEventsConfig === undefined
          ? {}
          : { kvEventsConfig: values.kvEventsConfig as Record<string, unknown> }),
        ...(givenValues(values, ['kvEventsStyle', 'pageSize']) as SimEngineOptions),
        // vLLM's seed for its block hashes is this variable; unset, the engine draws a random one.
        ...(env.PYTHONHASHSEED === undefined ? {} : { hashSeed: env.PYTHONHASHSEED }),
        port: values.port as number,
        host: values.host as string,
        // A crash knob is for testing supervision: the process dies as an engine would.
        onCrash: () => process.exit(70),
      },
      // The line's own msg is the message: a field of that name would say it twice.
      (line) => {
        const { msg: _msg, ...fields } = JSON.parse(line) as Record<string, unknown>;
        logger.info('sim engine listening', fields);
      },
    );
    const url = `http://${values.host as string}:${(engine.server.address() as { port: number }).port}`;
    reportListening(url);
    return () => engine.close();
  },
};
