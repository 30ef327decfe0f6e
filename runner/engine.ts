/**
 * The engine behind a runner: the HTTP adapter for its kind, and, when the runner launched it,
 * the supervisor that runs it. A runner with an engine of its own has one for its whole life; an
 * on-demand runner (runner/hosting.ts) launches and unloads one engine per order, each with an
 * adapter of its own, since each listens on its own port. Admission asks one question of it,
 * {@link RunnerEngine.busyReason}; /status asks for {@link RunnerEngine.status}.
 */
import type { Logger } from '../placer/kernel/index.ts';
import { engineCommand } from './engines/argv.ts';
import { engineKind } from './engines/kinds.ts';
import type { EngineKindSpec } from './engines/kinds.ts';
import { OpenAIHttpEngine } from './engines/openai-http.ts';
import type { EngineRequest } from './engines/openai-http.ts';
import { defaultProfileFacts, validateProfile } from './engines/profile.ts';
import type { ProfileFacts, ValidProfile } from './engines/profile.ts';
import { EngineSupervisor } from './engines/supervisor.ts';
import type { EngineStateChange } from './engines/supervisor.ts';
import { EngineFailedError } from './errors.ts';
import type { GpuInventory } from './protocol/index.ts';
import type { RunnerConfig } from './options.ts';
import type { EngineStatus } from './protocol/index.ts';

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

  constructor(config: RunnerConfig, log: Logger) {
    this.#config = config;
    this.#log = log;
    if (config.engineUrl) this.#adapter = this.#adapterFor(config.engineUrl, engineKind(config.engineKind));
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
    const command = engineCommand(profile, { simCommand: this.#config.simCommand });
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
      logger: this.#log,
    });
  }
}
