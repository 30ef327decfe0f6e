/**
 * What an engine launch may and may not carry, per engine kind: the one copy of these rules,
 * read by the runner before it launches anything (runner/engines/profile.ts, runner/hosting.ts)
 * and by the gateway before it stores a deployment (gateway/control/deployments.ts), so both
 * refuse the same profiles with the same words.
 *
 * - Reserved flags: options the runner sets itself (where the engine listens, what it loads,
 *   on how many GPUs), and forbidden ones: those that would undo them (a config file) or run code
 *   or touch files the order does not own (`--trust-remote-code`, plugins, log and save paths). An argument is matched the way
 *   the kind's own parser reads it, not by its spelling: argparse (vLLM, SGLang) takes any
 *   prefix of a long option (`--ho` is `--host`), `--opt=value`, a short option with its value
 *   attached (`-tp2`) and clustered one-letter options; clap (TGI) takes `--opt=value`, `-p8000`,
 *   `-p=8000` and clusters; llama.cpp and sluice's own sim engine take exact names and
 *   `--opt=value` (llama.cpp reads `_` as `-`).
 * - Environment names: deny by default. Each kind has a short allow-list of names its engine
 *   reads for tuning and credentials; a runner's operator may add names, never one of
 *   {@link NEVER_ENV} (names a loader, shell or interpreter reads to run code: `LD_PRELOAD`,
 *   `BASH_ENV`, `NODE_OPTIONS`, `PYTHONSTARTUP`…, or that re-point what the runner set).
 */

/**
 * Engine kinds a profile can name: those the runner launches itself. The adapter kinds of
 * runner/engines/kinds.ts add `openai`, a plain URL with no process to launch.
 */
export const PROFILE_KINDS = ['vllm', 'sglang', 'llamacpp', 'tgi', 'ollama', 'sim'] as const;

/** One of {@link PROFILE_KINDS}. */
export type ProfileKind = (typeof PROFILE_KINDS)[number];

/** True when `kind` is one of {@link PROFILE_KINDS}. */
export function isProfileKind(kind: unknown): kind is ProfileKind {
  return typeof kind === 'string' && (PROFILE_KINDS as readonly string[]).includes(kind);
}

/** How a kind's command line is parsed, which decides what spellings reach an option. */
export type ArgParser = 'argparse' | 'clap' | 'exact' | 'none';

/** The launch rules of one engine kind. */
export interface KindLaunchRules {
  /** The kind's usual entry point, searched on the runner's PATH; undefined for sim (the runner's own `sluice`). */
  readonly binary: string | undefined;
  readonly parser: ArgParser;
  /** Options the runner sets itself, mapped to the profile field that sets them. */
  readonly reserved: Readonly<Record<string, string>>;
  /** Options refused outright, mapped to why. */
  readonly forbidden: Readonly<Record<string, string>>;
  /** Environment variables the runner sets itself, mapped to the profile field that sets them. */
  readonly reservedEnv: Readonly<Record<string, string>>;
  /** Environment variable names a profile may set without the operator allowing more. */
  readonly envAllow: readonly string[];
  /** Why args must be empty, for kinds whose command takes none. */
  readonly noArgs?: string;
}

const LISTEN = { '--host': 'host', '--port': 'port' };
const GPU_ENV = { CUDA_VISIBLE_DEVICES: 'gpus' };
const CONFIG_FILE = 'a config file can set what the runner sets (host, port, model)';
const REMOTE_CODE = "it runs Python code shipped with the model; run such a model from the runner's own --profile";
const PLUGIN = 'it loads Python code from a path';
/** What the runner sets so that gateways can follow the engine's cache (runner/engines/argv.ts). */
const CACHE_TRUTH = {
  '--kv-events-config': "the runner sets it, to read the engine's KV-cache events on an address of its own",
  '--prefix-caching-hash-algo': 'the runner sets sha256_cbor, the block hash gateways compute',
};
/** Names the Hugging Face and PyTorch stacks read for downloads, tokenizers and collectives. */
const HF_TORCH = [
  'HF_TOKEN',
  'HUGGING_FACE_HUB_TOKEN',
  'HF_HUB_OFFLINE',
  'HF_HUB_ENABLE_HF_TRANSFER',
  'TRANSFORMERS_OFFLINE',
  'TOKENIZERS_PARALLELISM',
  'NCCL_DEBUG',
  'NCCL_P2P_DISABLE',
  'NCCL_IB_DISABLE',
  'NCCL_SOCKET_IFNAME',
  'OMP_NUM_THREADS',
  'PYTORCH_CUDA_ALLOC_CONF',
  'CUDA_DEVICE_ORDER',
  'CUDA_LAUNCH_BLOCKING',
];

/** Each kind's launch rules. */
export const LAUNCH_RULES: Readonly<Record<ProfileKind, KindLaunchRules>> = Object.freeze({
  vllm: {
    binary: 'vllm',
    parser: 'argparse',
    reserved: { ...LISTEN, '--uds': 'host', '--model': 'model', '--tensor-parallel-size': 'gpus', '-tp': 'gpus' },
    forbidden: {
      '--config': CONFIG_FILE,
      ...CACHE_TRUTH,
      '--trust-remote-code': REMOTE_CODE,
      '--tool-parser-plugin': PLUGIN,
      '--worker-cls': PLUGIN,
      '--worker-extension-cls': PLUGIN,
    },
    reservedEnv: GPU_ENV,
    envAllow: [
      ...HF_TORCH,
      'VLLM_API_KEY',
      'VLLM_ATTENTION_BACKEND',
      'VLLM_USE_V1',
      'VLLM_LOGGING_LEVEL',
      'VLLM_WORKER_MULTIPROC_METHOD',
      'VLLM_ALLOW_LONG_MAX_MODEL_LEN',
    ],
  },
  sglang: {
    binary: 'python3',
    parser: 'argparse',
    reserved: {
      ...LISTEN,
      '--model-path': 'model',
      '--model': 'model',
      '--tp': 'gpus',
      '--tp-size': 'gpus',
      '--tensor-parallel-size': 'gpus',
    },
    forbidden: {
      '--config': CONFIG_FILE,
      '--kv-events-config': CACHE_TRUTH['--kv-events-config'],
      '--trust-remote-code': REMOTE_CODE,
    },
    reservedEnv: GPU_ENV,
    envAllow: [...HF_TORCH],
  },
  llamacpp: {
    binary: 'llama-server',
    parser: 'exact',
    reserved: {
      ...LISTEN,
      '-m': 'model',
      '--model': 'model',
      '-mu': 'model',
      '--model-url': 'model',
      '-hf': 'model',
      '-hfr': 'model',
      '--hf-repo': 'model',
    },
    forbidden: {
      '--path': 'it serves the files of a directory of the runner',
      '--log-file': 'it writes to a file of the runner',
      '--slot-save-path': 'it writes files to a directory of the runner',
    },
    reservedEnv: GPU_ENV,
    envAllow: [
      'HF_TOKEN',
      'OMP_NUM_THREADS',
      'CUDA_DEVICE_ORDER',
      'CUDA_LAUNCH_BLOCKING',
      'GGML_CUDA_ENABLE_UNIFIED_MEMORY',
    ],
  },
  tgi: {
    binary: 'text-generation-launcher',
    parser: 'clap',
    reserved: { '--hostname': 'host', '--port': 'port', '-p': 'port', '--model-id': 'model', '--num-shard': 'gpus' },
    forbidden: { '--trust-remote-code': REMOTE_CODE },
    reservedEnv: GPU_ENV,
    envAllow: [...HF_TORCH],
  },
  ollama: {
    binary: 'ollama',
    parser: 'none',
    noArgs: 'ollama serve takes no arguments; configure it through profile.env, e.g. OLLAMA_NUM_PARALLEL',
    reserved: {},
    forbidden: {},
    reservedEnv: { ...GPU_ENV, OLLAMA_HOST: 'host and profile.port' },
    envAllow: [
      'OLLAMA_NUM_PARALLEL',
      'OLLAMA_MAX_LOADED_MODELS',
      'OLLAMA_KEEP_ALIVE',
      'OLLAMA_FLASH_ATTENTION',
      'OLLAMA_KV_CACHE_TYPE',
      'OLLAMA_CONTEXT_LENGTH',
      'OLLAMA_MAX_QUEUE',
      'OLLAMA_DEBUG',
      'CUDA_DEVICE_ORDER',
    ],
  },
  sim: {
    binary: undefined,
    parser: 'exact',
    reserved: { ...LISTEN, '--model': 'model' },
    forbidden: { '--config': CONFIG_FILE, ...CACHE_TRUTH },
    reservedEnv: {},
    envAllow: [],
  },
} satisfies Record<ProfileKind, KindLaunchRules>);

/**
 * Environment names no profile may set and no operator may allow: what dynamic loaders, shells
 * and interpreters read to run code or find it (a `*` ends a prefix), the runner's own settings,
 * and the variables engines read as their listen address or model (llama.cpp's `LLAMA_ARG_*`,
 * TGI's clap `HOSTNAME`, `PORT`, `MODEL_ID`).
 */
export const NEVER_ENV: readonly string[] = Object.freeze([
  'PATH',
  'LD_*',
  'DYLD_*',
  'BASH_ENV',
  'ENV',
  'BASH_FUNC_*',
  'SHELLOPTS',
  'BASHOPTS',
  'PS4',
  'IFS',
  'CDPATH',
  'NODE_*',
  'PYTHON*',
  'PERL5*',
  'PERLLIB',
  'RUBYOPT',
  'RUBYLIB',
  'GCONV_PATH',
  'GLIBC_TUNABLES',
  'MALLOC_*',
  'HOSTALIASES',
  'LOCALDOMAIN',
  'RES_OPTIONS',
  'OPENSSL_CONF',
  'OPENSSL_MODULES',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'TMPDIR',
  'HOME',
  'SHELL',
  'SLUICE_*',
  'LLAMA_ARG_*',
  'HOSTNAME',
  'PORT',
  'MODEL_ID',
  'JAVA_TOOL_OPTIONS',
  'TORCHINDUCTOR_*',
  'TRITON_*',
]);

/** True when `name` is one of {@link NEVER_ENV}. */
export function isNeverEnv(name: string): boolean {
  return NEVER_ENV.some((entry) => (entry.endsWith('*') ? name.startsWith(entry.slice(0, -1)) : name === entry));
}

/** A reserved or forbidden option an argument reaches, as the kind's parser reads it. */
export interface FlagHit {
  /** The option as the rules name it (`--host`). */
  readonly flag: string;
  /** The profile field that sets it, for a reserved option. */
  readonly field?: string;
  /** Why it is refused, for a forbidden option. */
  readonly why?: string;
}

/**
 * The reserved or forbidden option `arg` reaches for a kind's parser, or undefined. Values
 * (`0.0.0.0`), negative numbers (`-1`) and `--` alone reach none.
 */
export function reservedFlagOf(kind: ProfileKind, arg: string): FlagHit | undefined {
  const rules = LAUNCH_RULES[kind];
  if (rules.parser === 'none' || !arg.startsWith('-') || arg === '-' || arg === '--' || /^-[\d.]/.test(arg))
    return undefined;
  const eq = arg.indexOf('=');
  const name = eq === -1 ? arg : arg.slice(0, eq);
  const hit = (flag: string): FlagHit =>
    rules.reserved[flag] !== undefined ? { flag, field: rules.reserved[flag] } : { flag, why: rules.forbidden[flag]! };
  const flags = [...Object.keys(rules.reserved), ...Object.keys(rules.forbidden)];
  const longs = flags.filter((f) => f.startsWith('--'));
  const shorts = flags.filter((f) => !f.startsWith('--'));
  if (name.startsWith('--')) {
    // vLLM and llama.cpp read `--max_model_len` as `--max-model-len`; the others never see it as an option.
    const long = name.replace(/_/g, '-');
    if (rules.parser === 'argparse') {
      if (long.length <= 2) return undefined;
      const found = longs.find((f) => f.startsWith(long));
      return found === undefined ? undefined : hit(found);
    }
    const found = longs.find((f) => f === long);
    return found === undefined ? undefined : hit(found);
  }
  if (rules.parser === 'exact') {
    const found = shorts.find((f) => f === name);
    return found === undefined ? undefined : hit(found);
  }
  // argparse and clap: `-tp2` and `-p8000` carry their value attached; argparse also takes a
  // prefix of a single-dash option (`-t` for `-tp`).
  const attached = shorts.find((f) => name.startsWith(f) || (rules.parser === 'argparse' && f.startsWith(name)));
  if (attached !== undefined) return hit(attached);
  // One-letter options cluster (`-xp8000` is `-x -p 8000`): a reserved letter anywhere in the cluster.
  const letters = name.slice(1);
  const clustered = shorts.find((f) => f.length === 2 && letters.includes(f[1]!));
  return clustered === undefined ? undefined : hit(clustered);
}
