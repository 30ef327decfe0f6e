/**
 * The engine behind a runner: the HTTP adapter for its kind, and, when the runner launched it,
 * the supervisor that runs it. A runner with an engine of its own has one for its whole life; an
 * on-demand runner (runner/hosting.ts) launches and unloads one engine per order, each with an
 * adapter of its own, since each listens on its own port. Admission asks one question of it,
 * {@link RunnerEngine.busyReason}; /status asks for {@link RunnerEngine.status}.
 */
import type { Logger } from '../placer/kernel/index.ts';
import { CacheMirror } from './cache-mirror.ts';
import { CacheRekeyer } from './cache-rekey.ts';
import { CACHE_EVENT_KINDS, engineCommand } from './engines/argv.ts';
import type { EngineCacheFlags } from './engines/argv.ts';
import { engineKind } from './engines/kinds.ts';
import type { EngineKindSpec } from './engines/kinds.ts';
import { OpenAIHttpEngine } from './engines/openai-http.ts';
import type { EngineRequest } from './engines/openai-http.ts';
import { defaultProfileFacts, validateProfile } from './engines/profile.ts';
import type { ProfileFacts, ValidProfile } from './engines/profile.ts';
import { EngineSupervisor } from './engines/supervisor.ts';
import type { EngineStateChange } from './engines/supervisor.ts';
import { EngineFailedError } from './errors.ts';
import { KvEventSubscriber } from './kv-events.ts';
import type { GpuInventory } from './protocol/index.ts';
import type { KvBlockKeys, RunnerConfig } from './options.ts';
import { SIM_TOKENIZER } from './protocol/index.ts';
import type { CacheAnnouncement, EngineStatus } from './protocol/index.ts';

/**
 * Why the runner cannot admit a call right now, or undefined when it can. `no-engine`: an
 * on-demand runner hosts none (none ordered, or the last one stopped); `draining`: the engine
 * finishes its calls before it stops.
 */
export type EngineBusyReason =
  | 'no-engine'
  | 'starting'
  | 'draining'
  | 'engine-unreachable'
  | 'engine-failed'
  | undefined;

const OUTPUT_LINES_IN_STATUS = 20;

/** How {@link RunnerEngine.launch} runs an engine. */
export interface LaunchOptions {
  /**
   * Relaunch the engine when it dies (the runner's own engine), or give up at the first exit, a
   * start timeout or a spawn failure (an ordered engine: the reconciler places it again, maybe
   * on another node, which a local restart loop would only delay).
   */
  restart: boolean;
  /** Called on every state change of the engine, after the adapter has heard of it. */
  onState?: (change: EngineStateChange) => void;
}

/** The adapter plus, for launched engines, the supervisor. */
export class RunnerEngine {
  readonly #config: RunnerConfig;
  readonly #log: Logger;
  #adapter: OpenAIHttpEngine | undefined;
  #supervisor: EngineSupervisor | undefined;
  #profile: ValidProfile | undefined;
  /** True once a launched engine gave up, until the next launch: calls then read `engine-failed`. */
  #failed = false;
  #unloading: Promise<void> | undefined;
  /** Reads the launched engine's KV events into {@link RunnerEngine.cacheMirror}; for kinds that publish them. */
  #events: KvEventSubscriber | undefined;
  #announcement: CacheAnnouncement | undefined;
  /** The announcement for an engine behind a URL whose events are followed; undefined otherwise. */
  #external: (() => CacheAnnouncement | undefined) | undefined;
  /** The blocks the engine holds, as its events tell; the runner's for its whole life, across engines. */
  readonly cacheMirror = new CacheMirror();

  constructor(config: RunnerConfig, log: Logger) {
    this.#config = config;
    this.#log = log;
    if (config.engineUrl) this.#adapter = this.#adapterFor(config.engineUrl, engineKind(config.engineKind));
  }

  /**
   * Reads the events of an engine the runner did not launch, which binds its own endpoint. What
   * it held before the runner heard it is unknown, so the mirror is live from its first message.
   */
  #followEngineEvents(endpoint: string): void {
    const mirror = this.cacheMirror;
    const kind = this.#config.engineKind;
    const tokens = blockKeysFor(this.#config, kind, []) === 'tokens';
    const seed = this.#config.hashSeed;
    const blockSize = tokens ? this.#config.kvBlockSize : this.#config.engineBlockSize;
    mirror.keyWith(tokens ? this.#rekeyer(seed, blockSize) : undefined);
    this.#events = new KvEventSubscriber({ onBatch: (batch) => mirror.receive(batch), logger: this.#log });
    this.#events.connect(endpoint);
    const adapter = this.#adapter;
    const scheme = Object.freeze({ algorithm: 'sha256_cbor' as const, seed, blockSize });
    this.#external = () => {
      // An engine's tokenizer is its model's unless told otherwise: the first model it serves names it.
      const tokenizer = kind === 'sim' ? SIM_TOKENIZER : adapter?.models[0];
      return tokenizer === undefined ? undefined : { tokenizer, scheme, events: true };
    };
  }

  /** The adapter of the engine now behind the runner; undefined while an on-demand runner hosts none. */
  get adapter(): OpenAIHttpEngine | undefined {
    return this.#adapter;
  }

  /** Where the engine answers, for messages; `none` while there is no engine. */
  get origin(): string {
    return this.#adapter?.url.origin ?? 'none';
  }

  /** The GPUs the launched engine holds, until it is unloaded; empty for an engine behind a URL. */
  get gpus(): readonly number[] {
    return this.#profile?.gpus ?? [];
  }

  /**
   * Validates the runner's own profile, when it has one (before anything is launched: a bad
   * profile costs nothing), launches and supervises the engine, and starts probing it. Resolves
   * without waiting for readiness: the runner answers busy `starting` until then. An on-demand
   * runner has nothing to start here.
   */
  async start(inventory: GpuInventory, facts?: ProfileFacts): Promise<void> {
    const profile = this.#config.profile;
    if (profile) {
      await this.launch(await validateProfile(profile, facts ?? defaultProfileFacts(inventory)), { restart: true });
      return;
    }
    if (this.#config.engineKvEvents !== undefined) this.#followEngineEvents(this.#config.engineKvEvents);
    await this.#adapter?.start();
  }

  /**
   * Launches `profile` under a supervisor and starts probing it, with a new adapter when the
   * runner had none (an ordered engine); an engine launched before is unloaded first. Resolves
   * after the first probe, ready or not.
   * @throws {RunnerConfigError} when the command or the supervisor's options are refused (nothing launched).
   */
  async launch(profile: ValidProfile, options: LaunchOptions): Promise<void> {
    if (this.#supervisor) await this.unload();
    const cache = await this.#openCacheEvents(profile);
    const command = engineCommand(profile, { simCommand: this.#config.simCommand, ...(cache ? { cache } : {}) });
    const adapter =
      this.#adapter ??
      this.#adapterFor(
        new URL(`http://${profile.host.includes(':') ? `[${profile.host}]` : profile.host}:${profile.port}`),
        engineKind(profile.kind),
      );
    const supervisor = new EngineSupervisor({
      profile,
      command,
      checkReady: (signal) => adapter.healthy(signal),
      logger: this.#log,
      backoffBase: this.#config.engineRestartBackoff,
      killGrace: this.#config.engineStopGrace,
      // No restart: the first failure is final.
      ...(options.restart ? {} : { maxRestarts: 0 }),
    });
    supervisor.onState((change) => {
      // A crash makes the adapter unready at once, before any probe notices.
      if (change.to === 'ready') void adapter.probe();
      else adapter.markStarting();
      this.#followCache(change);
      if (change.to === 'failed') this.#failed = true;
      options.onState?.(change);
    });
    this.#adapter = adapter;
    this.#supervisor = supervisor;
    this.#profile = profile;
    this.#failed = false;
    supervisor.start();
    await adapter.start();
  }

  /** What gateways need to name calls' blocks as the launched engine does; undefined when they cannot follow its cache. */
  cacheAnnouncement(): CacheAnnouncement | undefined {
    return this.#announcement ?? this.#external?.();
  }

  /**
   * For a kind that publishes KV events, binds the socket the engine will publish to and says
   * what the engine's blocks are named by; undefined for the other kinds.
   */
  async #openCacheEvents(profile: ValidProfile): Promise<EngineCacheFlags | undefined> {
    if (!CACHE_EVENT_KINDS.includes(profile.kind)) return undefined;
    // The operator's own profile may set these (an order may not): the runner then stays out of it.
    const own = OPERATOR_CACHE_FLAGS.find((flag) => argValue(profile.args, flag) !== undefined);
    if (own !== undefined) {
      this.#log.info('engine profile sets its own cache flags; its cache is not fed to gateways', { flag: own });
      return undefined;
    }
    const mirror = this.cacheMirror;
    this.#events ??= new KvEventSubscriber({ onBatch: (batch) => mirror.receive(batch), logger: this.#log });
    const eventsEndpoint = await this.#events.open();
    const hashSeed = this.#config.hashSeed;
    const tokens = blockKeysFor(this.#config, profile.kind, profile.args) === 'tokens';
    const blockSize = tokens ? this.#config.kvBlockSize : Number(argValue(profile.args, '--block-size') ?? 16);
    this.cacheMirror.keyWith(tokens ? this.#rekeyer(hashSeed, blockSize) : undefined);
    // A block size the engine will refuse anyway: nothing to announce.
    if (!Number.isSafeInteger(blockSize) || blockSize < 1) return { eventsEndpoint, hashSeed };
    this.#announcement = Object.freeze({
      tokenizer: tokenizerOf(profile),
      scheme: Object.freeze({ algorithm: 'sha256_cbor' as const, seed: hashSeed, blockSize }),
      events: true,
    });
    return { eventsEndpoint, hashSeed };
  }

  /** Names the engine's blocks anew from their tokens (cache-rekey.ts), saying when its bound stops it. */
  #rekeyer(seed: string, blockSize: number): CacheRekeyer {
    const onFull = () => this.#log.warn('kv block re-keying at its bound; new blocks not fed until some are evicted');
    return new CacheRekeyer({ seed, blockSize, onFull });
  }

  /**
   * An engine that comes up fresh holds nothing, and its events number from 0; one that goes
   * down (crash, restart, stop) takes its cache with it. Draining keeps the cache.
   */
  #followCache(change: EngineStateChange): void {
    if (this.#events === undefined) return;
    if (change.to === 'ready' && change.from === 'starting') this.cacheMirror.engineStarted();
    else if (change.to !== 'ready' && change.to !== 'draining' && this.cacheMirror.live) this.cacheMirror.engineLost();
  }

  /** Why a call cannot be admitted now; undefined when it can. */
  busyReason(): EngineBusyReason {
    if (!this.#adapter) return this.#failed ? 'engine-failed' : 'no-engine';
    const supervised = this.#supervisor?.state;
    if (supervised === 'failed') return 'engine-failed';
    if (supervised === 'draining') return 'draining';
    if (supervised !== undefined && supervised !== 'ready') return 'starting';
    const state = this.#adapter.state;
    if (state === 'ready') return undefined;
    return state === 'starting' ? 'starting' : 'engine-unreachable';
  }

  /**
   * Forwards one call to the engine.
   * Rejects with {@link EngineFailedError} when there is no engine (it was unloaded after its drain ran out).
   */
  request(req: EngineRequest) {
    if (!this.#adapter) return Promise.reject(new EngineFailedError('no engine behind this runner: it was stopped'));
    return this.#adapter.request(req);
  }

  /** Records that the engine went away (a refused connect), so admission stops until a probe succeeds. */
  markUnreachable(error: Error): void {
    this.#adapter?.markUnreachable(error);
  }

  /** The engine as /status shows it; undefined while there is none. */
  status(now: number = Date.now()): EngineStatus | undefined {
    const adapter = this.#adapter;
    if (!adapter) return undefined;
    const reason = this.busyReason();
    const report = adapter.load;
    const s = this.#supervisor;
    const p = this.#profile;
    return {
      kind: adapter.kind.name,
      url: adapter.url.origin,
      state:
        reason === undefined
          ? 'ready'
          : reason === 'engine-unreachable'
            ? 'unreachable'
            : reason === 'engine-failed'
              ? 'failed'
              : reason === 'draining'
                ? 'draining'
                : 'starting',
      models: adapter.models,
      ...(report ? { load: report.load, loadAgeMs: now - report.at } : {}),
      ...(s && p
        ? {
            supervised: {
              state: s.state,
              model: p.model,
              gpus: p.gpus,
              pid: s.pid,
              restarts: s.restarts,
              lastExit: s.lastExit,
              ...(s.state === 'ready' ? {} : { output: s.outputTail().slice(-OUTPUT_LINES_IN_STATUS) }),
            },
          }
        : {}),
    };
  }

  /** Stops admission to a launched engine (drain). */
  drain(): void {
    this.#supervisor?.drain();
  }

  /**
   * Stops the engine it launched (SIGTERM, then SIGKILL after the grace), stops probing, closes
   * connections (aborting any call still running) and forgets the engine, so another can be
   * launched. The GPUs stay held until the process is gone. Idempotent.
   */
  unload(): Promise<void> {
    this.#unloading ??= (async () => {
      await this.#supervisor?.stop(this.#config.engineStopGrace);
      await this.#adapter?.close();
      await this.#events?.close();
      if (this.#events) this.cacheMirror.engineLost();
      this.#events = undefined;
      this.#announcement = undefined;
      this.#supervisor = undefined;
      this.#adapter = undefined;
      this.#profile = undefined;
    })().finally(() => {
      this.#unloading = undefined;
    });
    return this.#unloading;
  }

  /** Stops and forgets the engine, as {@link RunnerEngine.unload}; the runner's last step. */
  close(): Promise<void> {
    return this.unload();
  }

  /** Kills a launched engine at once; for the process 'exit' hook, where nothing async runs. */
  killSync(): void {
    this.#supervisor?.killSync();
  }

  #adapterFor(url: URL, kind: EngineKindSpec): OpenAIHttpEngine {
    return new OpenAIHttpEngine({
      url,
      kind,
      connectTimeout: this.#config.engineConnectTimeout,
      probeInterval: this.#config.engineProbeInterval,
      loadInterval: this.#config.loadInterval,
      ...(this.#config.engineApiKey === undefined ? {} : { apiKey: this.#config.engineApiKey }),
      ...(this.#config.engineModels === undefined ? {} : { models: this.#config.engineModels }),
      logger: this.#log,
    });
  }
}

/**
 * How the blocks of an engine of `kind` launched with `args` are named to gateways: as the
 * runner is told, else anew from their tokens for SGLang (and the simulator publishing as SGLang
 * does), whose hashes gateways cannot compute, else by the engine's own hashes.
 */
function blockKeysFor(config: RunnerConfig, kind: string, args: readonly string[]): KvBlockKeys {
  if (config.kvBlockKeys !== undefined) return config.kvBlockKeys;
  if (kind === 'sglang') return 'tokens';
  return kind === 'sim' && argValue(args, '--kv-events-style') === 'sglang' ? 'tokens' : 'native';
}

/** The tokenizer a launched engine reads: its own flag's, else its model's; the simulator's is built in. */
function tokenizerOf(profile: ValidProfile): string {
  if (profile.kind === 'sim') return SIM_TOKENIZER;
  const flag = profile.kind === 'sglang' ? '--tokenizer-path' : '--tokenizer';
  return argValue(profile.args, flag) ?? profile.model;
}

/** Flags with which an engine's events or hashes would not be the ones the runner reads and announces. */
const OPERATOR_CACHE_FLAGS = ['--kv-events-config', '--prefix-caching-hash-algo'];

/** The value an argparse-style option is given in `args` (`--flag value` or `--flag=value`), the last one winning. */
function argValue(args: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  args.forEach((arg, i) => {
    if (arg === flag) value = args[i + 1];
    else if (arg.startsWith(`${flag}=`)) value = arg.slice(flag.length + 1);
  });
  return value;
}
