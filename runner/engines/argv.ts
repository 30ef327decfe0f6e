/**
 * Engine command lines: what the runner runs for each kind, and which options and variables
 * it sets itself (so a profile that sets them too is refused before launch, not after minutes
 * of loading). Profile arguments always come last, after the ones the runner sets.
 */
import { RunnerConfigError } from '../errors.ts';
import { LAUNCH_RULES, PROFILE_KINDS } from '../protocol/index.ts';
import type { ProfileKind } from '../protocol/index.ts';

// The kinds and their launch rules (reserved options and variables, allowed binaries and
// variables) are the wire's (runner/protocol/launch-rules.ts), so the gateway checks the same.
export { PROFILE_KINDS };
export type { ProfileKind };

/** The profile fields a command line is built from; a `ValidProfile` is one. */
export interface EngineLaunch {
  readonly kind: ProfileKind;
  readonly model: string;
  readonly gpus: readonly number[];
  readonly port: number;
  readonly host: string;
  /** Executable to run; undefined for sim means `simCommand`, for other kinds the kind's default name. */
  readonly binary: string | undefined;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}

/** A process to spawn. */
export interface EngineCommand {
  command: string;
  args: string[];
  /** The whole environment of the engine, not only what the runner adds. */
  env: Record<string, string>;
}

/** How {@link engineCommand} fills in what the profile does not say. */
export interface EngineCommandOptions {
  /**
   * Command that runs `sluice`, e.g. `[process.execPath, '/path/to/sluice.mjs']`, for kind sim
   * when the profile names no binary. The runner's CLI knows it; runner/ cannot import gateway/.
   */
  simCommand?: readonly string[];
  /**
   * The environment the profile's `env` is laid over.
   * @default `process.env`, as spawn() itself would pass
   */
  baseEnv?: Readonly<Record<string, string | undefined>>;
  /**
   * Turns on what lets gateways follow the engine's cache, for the kinds that have it (vllm,
   * sglang, sim): KV-cache events published to `eventsEndpoint` (the runner's SUB socket, to
   * which the engine connects) and per-call cached tokens in usage; for vllm and sim also
   * sha256_cbor block hashes and PYTHONHASHSEED `hashSeed`, which seeds them (SGLang's hashes take
   * no seed, and the runner names its blocks anew). Other kinds ignore it.
   * @default none: the engine runs as the profile says
   */
  cache?: EngineCacheFlags;
}

/** See {@link EngineCommandOptions.cache}. */
export interface EngineCacheFlags {
  /** Where the engine publishes its KV events, e.g. `tcp://127.0.0.1:41234`. */
  readonly eventsEndpoint: string;
  readonly hashSeed: string;
}

/** The kinds {@link EngineCommandOptions.cache} applies to: they publish KV events in vLLM's format. */
export const CACHE_EVENT_KINDS: readonly ProfileKind[] = Object.freeze(['vllm', 'sglang', 'sim']);

/**
 * The flags that turn cache truth on: vLLM's (and the simulator's, which takes the same), or
 * SGLang's (`--enable-cache-report` for cached tokens in usage, `--kv-events-config` whose JSON
 * has no `enable_kv_cache_events`: the flag given turns publishing on), as its server_args.py
 * names them (v0.5).
 */
function cacheArgs(kind: ProfileKind, cache: EngineCacheFlags): string[] {
  if (kind === 'sglang') {
    const events = { publisher: 'zmq', endpoint: cache.eventsEndpoint, topic: '' };
    return ['--enable-cache-report', '--kv-events-config', JSON.stringify(events)];
  }
  const events = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: cache.eventsEndpoint, topic: '' };
  return [
    '--enable-prompt-tokens-details',
    '--prefix-caching-hash-algo',
    'sha256_cbor',
    '--kv-events-config',
    JSON.stringify(events),
  ];
}

/** What the runner knows about each kind's command line, to refuse bad arguments before launch. */
export interface KindRules {
  /** Binary searched when the profile names none; undefined for sim (the caller supplies it). */
  binary: string | undefined;
  /** Default start timeout in ms: GPU engines load weights for minutes; the simulator starts at once. */
  startTimeout: number;
  /** Options the runner sets itself, mapped to the profile field that sets them (LAUNCH_RULES'). */
  reserved: Readonly<Record<string, string>>;
  /** Environment variables the runner sets itself, mapped to the profile field that sets them (LAUNCH_RULES'). */
  env: Readonly<Record<string, string>>;
  /**
   * Options known to take a value. Not exhaustive: an option outside it passes through and the
   * engine judges it, since copying each engine's whole parser here would rot.
   */
  valued: ReadonlySet<string>;
  /** Why args must be empty, for kinds whose command takes none. */
  noArgs?: string;
}

const words = (list: string): ReadonlySet<string> => new Set(list.split(' '));
const shared = (kind: ProfileKind) => ({
  binary: LAUNCH_RULES[kind].binary,
  reserved: LAUNCH_RULES[kind].reserved,
  env: LAUNCH_RULES[kind].reservedEnv,
});

/** Each kind's rules; profile validation reads them, {@link engineCommand} follows them. */
export const KIND_RULES: Readonly<Record<ProfileKind, KindRules>> = {
  vllm: {
    ...shared('vllm'),
    startTimeout: 600_000,
    valued: words(
      '--max-model-len --gpu-memory-utilization --dtype --max-num-seqs --max-num-batched-tokens --quantization -q ' +
        '--served-model-name --kv-cache-dtype --pipeline-parallel-size -pp --data-parallel-size -dp --download-dir ' +
        '--revision --tokenizer --api-key --chat-template --seed --block-size --swap-space --load-format --max-loras ' +
        '--tool-call-parser --reasoning-parser --uvicorn-log-level --limit-mm-per-prompt',
    ),
  },
  sglang: {
    ...shared('sglang'),
    startTimeout: 600_000,
    valued: words(
      '--mem-fraction-static --context-length --dtype --quantization --max-running-requests --max-total-tokens ' +
        '--chunked-prefill-size --served-model-name --tokenizer-path --revision --dp-size --dp --schedule-policy ' +
        '--chat-template --random-seed --api-key --kv-cache-dtype --log-level --attention-backend --download-dir ' +
        '--page-size',
    ),
  },
  llamacpp: {
    ...shared('llamacpp'),
    startTimeout: 600_000,
    valued: words(
      '-c --ctx-size -ngl --n-gpu-layers --gpu-layers -np --parallel -t --threads -b --batch-size -ub --ubatch-size ' +
        '-a --alias --api-key --chat-template -ts --tensor-split -sm --split-mode -mg --main-gpu -ctk --cache-type-k ' +
        '-ctv --cache-type-v -to --timeout --slot-save-path',
    ),
  },
  tgi: {
    ...shared('tgi'),
    startTimeout: 600_000,
    valued: words(
      '--max-input-tokens --max-input-length --max-total-tokens --max-batch-prefill-tokens --max-batch-total-tokens ' +
        '--max-concurrent-requests --quantize --dtype --revision --max-best-of --max-stop-sequences ' +
        '--max-client-batch-size --cuda-memory-fraction --huggingface-hub-cache --max-waiting-tokens --sharded',
    ),
  },
  ollama: {
    ...shared('ollama'),
    startTimeout: 600_000,
    valued: new Set(),
    noArgs: LAUNCH_RULES.ollama.noArgs!,
  },
  sim: {
    ...shared('sim'),
    startTimeout: 30_000,
    valued: words(
      '--ttft-ms --itl-ms --output-tokens --max-num-seqs --max-queue --engine-id --log-level --profile --block-size ' +
        '--kv-events-style --page-size',
    ),
  },
};

/** llama.cpp options that choose how many layers go to the GPU; the profile's choice wins. */
const GPU_LAYER_FLAGS = ['-ngl', '--n-gpu-layers', '--gpu-layers'];

/**
 * Builds the engine's command line and environment from a validated profile.
 *
 * - GPUs listed: `CUDA_VISIBLE_DEVICES` is set to them and tensor parallelism to their count;
 *   none listed: neither is set, and the engine sees the GPUs the runner sees.
 * - llamacpp with GPUs gets `--n-gpu-layers 999` (offload every layer; llama.cpp caps it at the
 *   model's layer count) unless the profile's args choose a layer count; without GPUs it runs on
 *   the CPU. `--metrics` is always on, since the runner reads load from /metrics.
 * - sglang uses `--tp-size`, the option's real name: the `--tp` spelling in SGLang's docs works
 *   only through argparse prefix matching, which breaks the day another `--tp…` option appears.
 * - ollama: `ollama serve` with `OLLAMA_HOST`; it takes no model on its command line, so the
 *   model must be pulled separately (`ollama pull <model>`) before calls name it.
 * - sim: `<simCommand…> sim-engine …`, or `<binary> sim-engine …` when the profile names one.
 * @throws {RunnerConfigError} for kind sim with neither `binary` nor `simCommand`.
 */
export function engineCommand(profile: EngineLaunch, options: EngineCommandOptions = {}): EngineCommand {
  const { kind, model, gpus, host, args } = profile;
  const port = String(profile.port);
  const listen = ['--host', host, '--port', port];
  const shards = gpus.length > 0 ? String(gpus.length) : undefined;
  const added: Record<string, string> = {};
  if (gpus.length > 0) added.CUDA_VISIBLE_DEVICES = gpus.join(',');
  let prefix = [profile.binary ?? KIND_RULES[kind].binary ?? ''];
  let own: string[];
  switch (kind) {
    case 'vllm':
      own = ['serve', model, ...listen, ...(shards ? ['--tensor-parallel-size', shards] : [])];
      break;
    case 'sglang':
      own = ['-m', 'sglang.launch_server', '--model-path', model, ...listen, ...(shards ? ['--tp-size', shards] : [])];
      break;
    case 'llamacpp': {
      const chosen = args.some((arg) => GPU_LAYER_FLAGS.includes(arg.split('=')[0] ?? arg));
      own = ['-m', model, ...listen, '--metrics', ...(shards && !chosen ? ['--n-gpu-layers', '999'] : [])];
      break;
    }
    case 'tgi':
      own = ['--model-id', model, '--hostname', host, '--port', port, ...(shards ? ['--num-shard', shards] : [])];
      break;
    case 'ollama':
      own = ['serve'];
      // An IPv6 literal needs brackets, or ollama reads its last group as the port.
      added.OLLAMA_HOST = `${host.includes(':') ? `[${host}]` : host}:${port}`;
      break;
    case 'sim': {
      const sluice = profile.binary === undefined ? options.simCommand : [profile.binary];
      if (sluice === undefined || sluice.length === 0 || sluice[0] === '') {
        throw new RunnerConfigError('simCommand is required for a sim profile that names no binary');
      }
      prefix = [...sluice];
      own = ['sim-engine', ...listen, '--model', model];
      break;
    }
  }
  const { cache } = options;
  if (cache !== undefined && CACHE_EVENT_KINDS.includes(kind)) {
    own.push(...cacheArgs(kind, cache));
    if (kind !== 'sglang') added.PYTHONHASHSEED = cache.hashSeed;
  }
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(options.baseEnv ?? process.env)) {
    // The runner's own settings are not the engine's: a sim engine is a sluice process and
    // would read SLUICE_PROFILE or SLUICE_CONFIG meant for the runner as its own.
    if (value !== undefined && !key.startsWith('SLUICE_')) env[key] = value;
  }
  // What the runner sets goes last; validation already refused profiles that set the same names.
  Object.assign(env, profile.env, added);
  const [command = '', ...lead] = prefix;
  return { command, args: [...lead, ...own, ...args], env };
}
