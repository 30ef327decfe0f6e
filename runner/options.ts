/**
 * Runner options, their defaults, and the validation that turns a bad value into one line
 * naming the option.
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import type { Logger } from '../placer/kernel/index.ts';
import { lingerDefaults, silentLogger } from '../placer/kernel/index.ts';
import { checksFor, rule, show } from '../placer/kernel/index.ts';
import type { Resolved, Rule } from '../placer/kernel/index.ts';
import type { EngineKindName } from './engines/kinds.ts';
import { engineKind } from './engines/kinds.ts';
import type { EngineProfile } from './engines/profile.ts';
import { parseLabels } from './capacity.ts';
import { RunnerConfigError } from './errors.ts';
import {
  CALL_SECRET_RULE,
  REGISTRATION_LIMITS,
  WIRE_ID_PATTERN,
  WIRE_ID_RULE,
  isCallSecret,
  resolveLaunchPolicy,
} from './protocol/index.ts';
import type { LaunchPolicy } from './protocol/index.ts';

/**
 * How a runner is set up: give `engine` (an engine already running), `profile` (launch one), or
 * neither: an on-demand runner, which starts with no engine and hosts what a gateway orders
 * (docs/runners.md, "On-demand runners").
 */
export interface RunnerOptions {
  /** Base URL of an OpenAI-compatible engine already running, e.g. `http://127.0.0.1:8000`. */
  engine?: string;
  /**
   * An engine to launch and supervise (vLLM, SGLang, llama.cpp, TGI, Ollama or the simulator).
   * It is validated before anything is launched; see docs/runners.md.
   */
  profile?: EngineProfile;
  /**
   * How to talk to the engine: its health, model and metrics endpoints.
   * @default the profile's kind, else `openai` (a plain OpenAI-compatible URL)
   */
  engineKind?: EngineKindName;
  /** The command that runs `sluice` (e.g. `[process.execPath, '/path/sluice.mjs']`), for `sim` profiles. */
  simCommand?: readonly string[];
  /**
   * Stable runner id, reported to gateways and in every committed response.
   * @default `runner-` followed by 6 random hex digits
   */
  id?: string;
  /**
   * Calls the runner runs at once. A call that finds none free is answered busy at once.
   * @default see runnerDefaults
   */
  slots?: number;
  /**
   * How long connecting to the engine may take, in ms. A refused or timed-out connect means
   * nothing ran, so the runner answers busy and the gateway tries elsewhere.
   * @default see runnerDefaults
   */
  engineConnectTimeout?: number;
  /**
   * Execution limit for a call whose request carries no budget header (`sluice-timeout`), in ms.
   * @default see runnerDefaults
   */
  defaultCallTimeout?: number;
  /**
   * How long a detached call waits for its engine's status line before the runner answers 202,
   * in ms. An engine that refuses (429, 503) does so at once; one that says nothing for this long
   * has the call. Inside the window a refusal is a busy answer, so the gateway places the call
   * elsewhere; after it, the refusal is the call's result.
   * @default see runnerDefaults
   */
  acceptWindow?: number;
  /**
   * Largest request body the runner reads, in bytes; a larger one is refused with 413 before the
   * engine sees it. The runner reads the whole call before acknowledging it.
   * @default see runnerDefaults
   */
  maxBodyBytes?: number;
  /**
   * Longest time a call's body may take to arrive once the call holds a slot, in ms; past it the
   * call is answered 408 RUNNER_BODY_TIMEOUT and its slot freed. A gateway sends a body it has
   * buffered, so this only bounds a slow or stalled connection.
   * @default see runnerDefaults
   */
  bodyReadTimeout?: number;
  /**
   * Longest silence before or between the chunks of a call's body, in ms: a body that trickles
   * is cut here rather than at bodyReadTimeout (408 RUNNER_BODY_TIMEOUT).
   * @default see runnerDefaults
   */
  bodyIdleTimeout?: number;
  /**
   * How often the engine's health and model list are checked once it is ready, in ms.
   * While the engine is starting it is checked ten times as often.
   * @default see runnerDefaults
   */
  engineProbeInterval?: number;
  /**
   * How often the engine's Prometheus metrics are read for its load, in ms.
   * @default see runnerDefaults
   */
  loadInterval?: number;
  /**
   * How long a launched engine gets to exit after SIGTERM before SIGKILL, in ms.
   * @default see runnerDefaults
   */
  engineStopGrace?: number;
  /**
   * First delay before relaunching a crashed engine, in ms; doubled per crash in a row (capped
   * at 60 s), with full jitter.
   * @default see runnerDefaults
   */
  engineRestartBackoff?: number;
  /**
   * Gateways to register with (`http://gw1:8080`): the runner dials out to each, heartbeats
   * its load, and comes back by itself when one restarts. Needs {@link runnerToken}.
   * @default none: the runner only serves gateways that list it
   */
  gateways?: readonly string[];
  /** The shared secret gateways expect in `authorization: Bearer`; required with gateways; never logged. */
  runnerToken?: string;
  /**
   * The engine's own key (vLLM's and SGLang's `--api-key`, llama.cpp's `--api-key`), sent to the
   * engine as `authorization: Bearer` on every call and probe. A client's key never reaches a
   * runner (the gateway keeps it), so this is the only key an engine sees. Never logged.
   * @default none: requests to the engine carry no key
   */
  engineApiKey?: string;
  /**
   * The models the engine serves, declared: they win over the engine's own model list, which is
   * then not read, for an engine whose `/v1/models` is broken or absent. Each a name of 1 to 256
   * visible characters; no duplicates. For a runner with an engine (engine or profile); an
   * ordered engine's model comes with its order.
   * @default none: the models are read from the engine's model list
   */
  engineModels?: readonly string[];
  /**
   * The URL gateways should call this runner on. Required when listening on 0.0.0.0 or ::
   * with gateways, since a wildcard address names no machine.
   * @default the URL the runner listens on
   */
  advertiseUrl?: string;
  /**
   * How often to heartbeat each gateway, in ms, unless the gateway's registration answer asks
   * for another interval.
   * @default see runnerDefaults
   */
  heartbeatInterval?: number;
  /**
   * How long a drain waits for running calls before stopping, in ms; applies to a drain a
   * gateway asks for, and to close() when it is given none.
   * @default see runnerDefaults
   */
  drainTimeout?: number;
  /**
   * The secret gateways sign calls with (HMAC-SHA256, runner/protocol/signature.ts); a call
   * without a valid signature is answered 401 RUNNER_UNAUTHORIZED. Several during a rotation:
   * any of them verifies. Not the runner token: the token lets a node register, the call secret
   * lets its holder spend GPU time. Never logged, never in /status.
   * @default none: see {@link allowUnsignedCalls}
   */
  callSecret?: string | readonly string[];
  /**
   * How far past its deadline a signed call is still taken, in ms: the gateway's and the
   * runner's clocks may disagree by this much. A captured call is refused once it is past.
   * @default see runnerDefaults
   */
  callClockSkew?: number;
  /**
   * After an answer given before its call's body was read whole (busy, 401, 413), the rest of
   * the body is read and discarded for at most this long, in ms, so that the gateway reads the
   * answer rather than a reset (placer/kernel/linger.ts). @default see lingerDefaults
   */
  lingerTime?: number;
  /** The longest silence while lingering, in ms. @default see lingerDefaults */
  lingerIdleTimeout?: number;
  /** The most bytes read and discarded while lingering. @default see lingerDefaults */
  lingerMaxBytes?: number;
  /**
   * Serve calls that carry no credential on an address other than loopback. Without a call
   * secret or mutual TLS, a runner listening on loopback serves unsigned calls (with a warning)
   * and refuses to start on any other address unless this is set.
   * @default false
   */
  allowUnsignedCalls?: boolean;
  /**
   * Mutual TLS: the runner listens on https with `cert`/`key`, requires a client certificate
   * signed by `ca` on every connection (the gateway's), and checks https gateways it registers
   * with against the same `ca`. PEM text.
   * @default none: plain http
   */
  tls?: RunnerTls;
  /**
   * Labels gateways see this runner by, for selecting nodes (`{ zone: 'a' }`, or
   * `['zone=a']` as `--label` gives them). Kubernetes label syntax (the wire's LABEL_RULE), at
   * most 64; a key given twice is refused.
   * @default none
   */
  labels?: Readonly<Record<string, string>> | readonly string[];
  /**
   * Executables engine orders may name besides each kind's usual entry point, as `kind=path`
   * (`vllm=/opt/vllm/bin/vllm`; an absolute path or a bare name searched on PATH). An order
   * naming any other binary is refused before launch (docs/security.md, "Launch policy").
   * @default none: each kind's usual entry point only
   */
  engineBinaries?: readonly string[];
  /**
   * Environment variables engine orders may set besides each kind's allow-list, as `NAME` (every
   * kind) or `kind=NAME`. Names a loader, shell or interpreter runs code from (`LD_*`,
   * `BASH_ENV`, `NODE_OPTIONS`, `PYTHON*`, `PATH`…) are refused here and in every order.
   * @default none: each kind's allow-list only
   */
  engineEnvAllow?: readonly string[];
  /**
   * The PYTHONHASHSEED a launched vLLM or simulated engine gets, which seeds its block hashes
   * (runner/protocol/block-hash.ts), and the seed of the blocks the runner names itself with
   * {@link kvBlockKeys} `tokens`: gateways compute a call's blocks with it, so it is announced to
   * them. Every engine of a fleet given the same seed names the same prefix alike.
   * @default see runnerDefaults
   */
  hashSeed?: string;
  /**
   * How often the blocks an engine stored and removed are sent to each gateway, in ms, when
   * there are any (runner/cache-forwarder.ts); an empty update goes every heartbeat regardless.
   * @default see runnerDefaults
   */
  cacheFeedInterval?: number;
  /**
   * Where the engine behind {@link engine} publishes its KV-cache events, for a `vllm`, `sglang`
   * or `sim` engine the runner did not launch: started with `--kv-events-config` binding this
   * endpoint (e.g. `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:5557"}`)
   * and, for vLLM's own keys, `--prefix-caching-hash-algo sha256_cbor` and PYTHONHASHSEED set to
   * {@link hashSeed}. The runner connects to it and feeds gateways as for an engine it launched
   * (docs/runners.md, "Cache truth").
   * @default none: an engine behind a URL tells gateways nothing of its cache
   */
  engineKvEvents?: string;
  /**
   * How the blocks the engine reports are named to gateways: `native`, by the engine's own block
   * hashes (vLLM's sha256_cbor chain, seeded by {@link hashSeed}); `tokens`, named anew by the
   * runner from each block's token ids into blocks of {@link kvBlockSize} (runner/cache-rekey.ts),
   * for an engine whose hashes gateways cannot compute (SGLang's).
   * @default `tokens` for sglang, and for a sim engine started with `--kv-events-style sglang`; `native` otherwise
   */
  kvBlockKeys?: KvBlockKeys;
  /** Tokens per block the runner names blocks in with {@link kvBlockKeys} `tokens`, announced to gateways. @default see runnerDefaults */
  kvBlockSize?: number;
  /** Tokens per block of the engine behind {@link engine} (its `--block-size`), announced with {@link engineKvEvents}. @default 16 */
  engineBlockSize?: number;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/** A runner's TLS material, PEM text. */
export interface RunnerTls {
  /** The runner's certificate (chain). */
  cert: string | Buffer;
  /** The certificate's private key. */
  key: string | Buffer;
  /** The CA that signs gateways' client certificates (and the gateways' own, for registration). */
  ca: string | Buffer;
}

/**
 * Options after defaults and validation; frozen. Each option with a default in runnerDefaults
 * is held as resolved, of that default's type; the rest are below.
 */
export interface RunnerConfig extends Resolved<typeof runnerDefaults> {
  /** Where the runner's own engine answers; undefined for an on-demand runner. */
  readonly engineUrl: URL | undefined;
  readonly profile: EngineProfile | undefined;
  /** True for an on-demand runner (neither engine nor profile): it takes engine orders from gateways. */
  readonly orders: boolean;
  readonly engineKind: EngineKindName;
  readonly simCommand: readonly string[] | undefined;
  readonly id: string;
  readonly gateways: readonly URL[];
  /** Kept out of every log line and of /status. */
  readonly runnerToken: string | undefined;
  readonly engineApiKey: string | undefined;
  /** Declared models, which win over the engine's model list; undefined when they are read from it. */
  readonly engineModels: readonly string[] | undefined;
  readonly advertiseUrl: string | undefined;
  /** Kept out of every log line and of /status; empty when calls are not signed. */
  readonly callSecrets: readonly string[];
  readonly tls: Readonly<RunnerTls> | undefined;
  /** The runner's labels, checked and frozen; empty when none were given. */
  readonly labels: Readonly<Record<string, string>>;
  /** What engine orders may launch here: {@link RunnerOptions.engineBinaries} and {@link RunnerOptions.engineEnvAllow} over the kinds' defaults. */
  readonly launchPolicy: LaunchPolicy;
  readonly engineKvEvents: string | undefined;
  /** Undefined: by the engine's kind (see {@link RunnerOptions.kvBlockKeys}). */
  readonly kvBlockKeys: KvBlockKeys | undefined;
}

/** How blocks are named to gateways: {@link RunnerOptions.kvBlockKeys}. */
export type KvBlockKeys = 'native' | 'tokens';

/** The one place each runner default lives; `sluice runner --help` prints them from here. */
export const runnerDefaults = Object.freeze({
  slots: 4,
  engineConnectTimeout: 2000,
  defaultCallTimeout: 600_000,
  acceptWindow: 500,
  /** Four times the gateway's default, so a body the gateway took is never refused here. */
  maxBodyBytes: 64 * 1024 * 1024,
  /** The gateway's defaults: a gateway on the same network sends its buffered body far faster. */
  bodyReadTimeout: 30_000,
  bodyIdleTimeout: 10_000,
  engineProbeInterval: 5000,
  loadInterval: 1000,
  engineStopGrace: 10_000,
  engineRestartBackoff: 1000,
  heartbeatInterval: 1000,
  drainTimeout: 30_000,
  callClockSkew: 30_000,
  lingerTime: lingerDefaults.time,
  lingerIdleTimeout: lingerDefaults.idle,
  lingerMaxBytes: lingerDefaults.maxBytes,
  allowUnsignedCalls: false,
  /** A fixed seed, so every engine of a fleet hashes a prefix alike and gateways can match it. */
  hashSeed: '0',
  /** Short against a prefill (a block stored is reported about when a twin call could next arrive), long against a packet. */
  cacheFeedInterval: 50,
  /** vLLM's default `--block-size`. */
  engineBlockSize: 16,
  /** vLLM's default `--block-size`: the granularity a gateway's prefix match is counted in. */
  kvBlockSize: 16,
  logger: silentLogger as Logger,
});

/** How each defaulted option is checked, in the order the first bad one is reported. */
const runnerRules = {
  // A gateway refuses a registration with more (REGISTRATION_LIMITS): refused here, at start.
  slots: rule.integer({ min: 1, max: REGISTRATION_LIMITS.slots }),
  engineConnectTimeout: rule.ms(1),
  defaultCallTimeout: rule.ms(1),
  acceptWindow: rule.ms(0),
  maxBodyBytes: rule.integer({ min: 1 }),
  bodyReadTimeout: rule.ms(1),
  bodyIdleTimeout: rule.ms(1),
  engineProbeInterval: rule.ms(1),
  loadInterval: rule.ms(1),
  engineStopGrace: rule.ms(0),
  engineRestartBackoff: rule.ms(0),
  heartbeatInterval: rule.ms(1),
  drainTimeout: rule.ms(0),
  callClockSkew: rule.ms(0),
  lingerTime: rule.ms(1),
  lingerIdleTimeout: rule.ms(1),
  lingerMaxBytes: rule.integer({ min: 1 }),
  allowUnsignedCalls: ((option, value, fail) => {
    if (typeof value !== 'boolean') throw fail(`${option} must be true or false, got ${show(value)}`, option);
    return value;
  }) as Rule,
  // Passed to the engine as an environment variable: printable ASCII, not empty.
  hashSeed: ((option, value, fail) => {
    if (typeof value !== 'string' || !/^[\x21-\x7e]{1,64}$/.test(value))
      throw fail(`${option} must be 1 to 64 printable ASCII characters without spaces, got ${show(value)}`, option);
    return value;
  }) as Rule,
  cacheFeedInterval: rule.ms(1),
  engineBlockSize: rule.integer({ min: 1, max: 4096 }),
  kvBlockSize: rule.integer({ min: 1, max: 4096 }),
  logger: rule.logger(),
};

const check = checksFor(RunnerConfigError);

/** Applies defaults and validates; throws {@link RunnerConfigError} naming the first bad option. */
export function resolveRunnerOptions(options: RunnerOptions): RunnerConfig {
  const {
    engine,
    profile,
    simCommand,
    id = `runner-${randomBytes(3).toString('hex')}`,
    runnerToken,
    engineApiKey,
  } = options;
  if (engine !== undefined && profile !== undefined) {
    throw new RunnerConfigError(
      'give engine (the URL of a running engine) or profile (an engine to launch), not both; give neither for a runner that hosts engines on order',
    );
  }
  let engineUrl: URL | undefined;
  let kindName: string;
  if (engine === undefined && profile === undefined) {
    // On demand: each ordered engine brings its own kind and URL (runner/hosting.ts).
    engineUrl = undefined;
    kindName = options.engineKind ?? 'openai';
  } else if (profile !== undefined) {
    if (profile === null || typeof profile !== 'object' || Array.isArray(profile)) {
      throw new RunnerConfigError(`profile must be an object, got ${show(profile)}`);
    }
    // The rest of the profile's checks (binary, GPUs, free port, args) run before launch, in
    // RunnerEngine.start; the port is needed now to know where the engine will answer.
    const port = check.integer('profile.port', profile.port, { min: 1, max: 65_535 });
    engineUrl = parseHttpUrl('profile.host', `http://${profile.host ?? '127.0.0.1'}:${port}`);
    kindName = options.engineKind ?? profile.kind;
  } else {
    engineUrl = parseHttpUrl('engine', engine);
    kindName = options.engineKind ?? 'openai';
  }
  try {
    engineKind(kindName);
  } catch (error) {
    throw new RunnerConfigError((error as Error).message);
  }
  if (typeof id !== 'string' || !WIRE_ID_PATTERN.test(id)) {
    throw new RunnerConfigError(`id must be ${WIRE_ID_RULE}, got ${show(id)}`);
  }
  const checked = check.resolve(runnerDefaults, runnerRules, options);
  const gateways = parseGateways(options.gateways);
  // The gateway's rule, so a token every gateway would refuse is refused here, at start.
  if (runnerToken !== undefined) check.runnerToken('runnerToken', runnerToken);
  if (gateways.length > 0 && runnerToken === undefined)
    throw new RunnerConfigError('runnerToken is required with gateways');
  // A header value: printable ASCII without spaces, so it cannot break the request it rides in.
  if (engineApiKey !== undefined && (typeof engineApiKey !== 'string' || !/^[\x21-\x7e]{1,4096}$/.test(engineApiKey))) {
    throw new RunnerConfigError('engineApiKey must be 1 to 4096 printable ASCII characters without spaces (not shown)');
  }
  const launch = resolveLaunchPolicy({ binaries: options.engineBinaries, envAllow: options.engineEnvAllow });
  if (launch.kind === 'invalid') throw new RunnerConfigError(launch.problem);
  let advertiseUrl: string | undefined;
  if (options.advertiseUrl !== undefined) {
    const url = parseHttpUrl('advertiseUrl', options.advertiseUrl);
    if (isWildcardHost(url.hostname)) {
      throw new RunnerConfigError(
        `advertiseUrl must name an address gateways can reach, not ${url.hostname}, got ${show(options.advertiseUrl)}`,
      );
    }
    advertiseUrl = url.href.replace(/\/$/, '');
  }
  return Object.freeze({
    engineUrl,
    profile,
    orders: engineUrl === undefined,
    engineKind: kindName as EngineKindName,
    simCommand,
    id,
    ...checked,
    gateways,
    runnerToken,
    engineApiKey,
    engineModels: engineModelsOf(options.engineModels, engineUrl === undefined),
    advertiseUrl,
    callSecrets: callSecretsOf(options.callSecret),
    tls: tlsOf(options.tls),
    labels: parseLabels(options.labels),
    launchPolicy: launch.policy,
    engineKvEvents: engineKvEventsOf(options.engineKvEvents, engine, kindName),
    kvBlockKeys: kvBlockKeysOf(options.kvBlockKeys),
  });
}

function kvBlockKeysOf(value: unknown): KvBlockKeys | undefined {
  if (value === undefined || value === 'native' || value === 'tokens') return value;
  throw new RunnerConfigError(`kvBlockKeys must be "native" or "tokens", got ${show(value)}`);
}

/** A declared model name: visible characters, no spaces, as a body's `model` names it. */
const MODEL_NAME = /^[\x21-\x7e\u00a0-\uffff]{1,256}$/;

/** The declared models, checked; `onOrders` for a runner whose engines come with orders, which refuses them. */
function engineModelsOf(value: unknown, onOrders: boolean): readonly string[] | undefined {
  if (value === undefined) return undefined;
  if (onOrders)
    throw new RunnerConfigError(
      "engineModels is for a runner with an engine (engine or profile); an ordered engine's model comes with its order",
    );
  if (!Array.isArray(value) || value.length === 0)
    throw new RunnerConfigError(`engineModels must be a non-empty list of model names, got ${show(value)}`);
  const bad = value.find((name) => typeof name !== 'string' || !MODEL_NAME.test(name));
  if (bad !== undefined)
    throw new RunnerConfigError(
      `engineModels must hold model names of 1 to 256 visible characters without spaces, got ${show(bad)}`,
    );
  const twice = value.find((name, i) => value.indexOf(name) !== i);
  if (twice !== undefined) throw new RunnerConfigError(`engineModels names ${show(twice)} twice`);
  return Object.freeze([...value]);
}

/** The events endpoint of an engine behind a URL: a tcp:// or ipc:// address, for a vllm, sglang or sim engine given by URL. */
function engineKvEventsOf(value: unknown, engine: string | undefined, kind: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^(tcp|ipc):\/\/\S+$/.test(value))
    throw new RunnerConfigError(`engineKvEvents must be a tcp:// or ipc:// address, got ${show(value)}`);
  if (engine === undefined)
    throw new RunnerConfigError(
      'engineKvEvents is for an engine behind a URL (engine); a launched engine gets its own',
    );
  if (kind !== 'vllm' && kind !== 'sglang' && kind !== 'sim')
    throw new RunnerConfigError(
      `engineKvEvents needs engineKind vllm, sglang or sim, whose events the runner reads; got ${show(kind)}`,
    );
  return value;
}

/** The call secrets as a list; each checked, the message never showing one. */
function callSecretsOf(value: unknown): readonly string[] {
  if (value === undefined) return Object.freeze([]);
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0) throw new RunnerConfigError('callSecret must be a secret or a non-empty list of secrets');
  list.forEach((secret: unknown, i) => {
    const name = Array.isArray(value) ? `callSecret[${i}]` : 'callSecret';
    if (!isCallSecret(secret)) throw new RunnerConfigError(`${name} must be ${CALL_SECRET_RULE}`);
  });
  return Object.freeze([...(list as string[])]);
}

/** The TLS material, each part present; PEM text is not parsed here (the server refuses a bad one at listen). */
function tlsOf(value: RunnerTls | undefined): Readonly<RunnerTls> | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== 'object')
    throw new RunnerConfigError(`tls must be an object with cert, key and ca, got ${show(value)}`);
  for (const part of ['cert', 'key', 'ca'] as const) {
    const pem = value[part];
    if (!(typeof pem === 'string' || Buffer.isBuffer(pem)) || pem.length === 0) {
      // The key is a secret: the message names the part, never its text.
      throw new RunnerConfigError(`tls.${part} must be PEM text; mutual TLS needs cert, key and ca together`);
    }
  }
  return Object.freeze({ cert: value.cert, key: value.key, ca: value.ca });
}

/**
 * The URL gateways should call a runner on that listens on `host`:`port`: the advertised one,
 * else the listening address, which must then be a concrete one.
 * @throws {RunnerConfigError} when gateways are set and no advertiseUrl is while `host` is a
 *   wildcard, or the URL names a host rather than an IP address.
 */
export function advertisedUrl(config: RunnerConfig, host: string, port: number): string {
  if (config.gateways.length > 0 && config.advertiseUrl === undefined && isWildcardHost(host)) {
    throw new RunnerConfigError(
      `advertiseUrl is required with gateways when listening on ${host || 'every interface'}: gateways cannot call a wildcard address; give the URL they should use, e.g. http://10.0.0.5:${port || 9000}`,
    );
  }
  const url =
    config.advertiseUrl ?? `${config.tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${port}`;
  // Gateways refuse a registered URL that names a host rather than an address (docs/runners.md).
  const name = new URL(url).hostname.replace(/^\[(.*)\]$/, '$1');
  if (config.gateways.length > 0 && isIP(name) === 0) {
    throw new RunnerConfigError(
      `the URL advertised to gateways must name an IP address, not ${show(name)}: gateways refuse host names; give advertiseUrl with this node's address, e.g. http://10.0.0.5:${port || 9000}`,
    );
  }
  return url;
}

/** True for addresses that mean "every interface" and so name no machine a gateway could call. */
function isWildcardHost(host: string): boolean {
  return ['', '0.0.0.0', '::', '[::]', '::0', '0:0:0:0:0:0:0:0'].includes(host);
}

/** Validates the gateway URLs; a duplicate would register the runner twice with one gateway. */
function parseGateways(value: unknown): readonly URL[] {
  if (value === undefined) return Object.freeze([]);
  if (!Array.isArray(value))
    throw new RunnerConfigError(`gateways must be an array of http:// or https:// URLs, got ${show(value)}`);
  const seen = new Set<string>();
  return Object.freeze(
    value.map((item: unknown, i) => {
      const url = parseHttpUrl(`gateways[${i}]`, item);
      if (seen.has(url.href))
        throw new RunnerConfigError(`gateways lists ${url.origin}${url.pathname.replace(/\/$/, '')} twice`);
      seen.add(url.href);
      return url;
    }),
  );
}

/** Parses an absolute http(s) URL or throws naming the option. */
export function parseHttpUrl(option: string, value: unknown): URL {
  const bad = () => new RunnerConfigError(`${option} must be an http:// or https:// URL, got ${show(value)}`);
  if (typeof value !== 'string' || value === '') throw bad();
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw bad();
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw bad();
  return url;
}
