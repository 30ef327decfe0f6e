/**
 * The engine behind a runner: the HTTP adapter for its kind, and, when the runner launched it
 * from a profile, the supervisor that keeps it running. Admission asks one question of it,
 * {@link RunnerEngine.busyReason}; /status asks for {@link RunnerEngine.status}.
 */
import type { Logger } from '../placer/kernel/index.ts';
import { engineCommand } from './engines/argv.ts';
import { engineKind } from './engines/kinds.ts';
import { OpenAIHttpEngine } from './engines/openai-http.ts';
import type { EngineRequest } from './engines/openai-http.ts';
import { defaultProfileFacts, validateProfile } from './engines/profile.ts';
import type { ProfileFacts, ValidProfile } from './engines/profile.ts';
import { EngineSupervisor } from './engines/supervisor.ts';
import type { GpuInventory } from './inventory.ts';
import type { RunnerConfig } from './options.ts';
import type { EngineStatus } from './protocol.ts';

/** Why the runner cannot admit a call right now, or undefined when it can. */
export type EngineBusyReason = 'starting' | 'engine-unreachable' | 'engine-failed' | undefined;

const OUTPUT_LINES_IN_STATUS = 20;

/** The adapter plus, for launched engines, the supervisor. */
export class RunnerEngine {
  readonly adapter: OpenAIHttpEngine;
  readonly #config: RunnerConfig;
  readonly #log: Logger;
  #supervisor: EngineSupervisor | undefined;
  #profile: ValidProfile | undefined;

  constructor(config: RunnerConfig, log: Logger) {
    this.#config = config;
    this.#log = log;
    this.adapter = new OpenAIHttpEngine({
      url: config.engineUrl,
      kind: engineKind(config.engineKind),
      connectTimeout: config.engineConnectTimeout,
      probeInterval: config.engineProbeInterval,
      loadInterval: config.loadInterval,
      ...(config.engineApiKey === undefined ? {} : { apiKey: config.engineApiKey }),
      logger: log,
    });
  }

  /**
   * Validates the profile (before anything is launched: a bad profile costs nothing), launches
   * and supervises the engine, and starts probing it. Resolves without waiting for readiness:
   * the runner answers busy `starting` until then.
   */
  async start(inventory: GpuInventory, facts?: ProfileFacts): Promise<void> {
    const profile = this.#config.profile;
    if (profile) {
      this.#profile = await validateProfile(profile, facts ?? defaultProfileFacts(inventory));
      const supervisor = new EngineSupervisor({
        profile: this.#profile,
        command: engineCommand(this.#profile, { simCommand: this.#config.simCommand }),
        checkReady: (signal) => this.adapter.healthy(signal),
        logger: this.#log,
        backoffBase: this.#config.engineRestartBackoff,
        killGrace: this.#config.engineStopGrace,
      });
      supervisor.onState((change) => {
        // A crash makes the adapter unready at once, before any probe notices.
        if (change.to === 'ready') void this.adapter.probe();
        else this.adapter.markStarting();
      });
      this.#supervisor = supervisor;
      supervisor.start();
    }
    await this.adapter.start();
  }

  /** Why a call cannot be admitted now; undefined when it can. */
  busyReason(): EngineBusyReason {
    const supervised = this.#supervisor?.state;
    if (supervised === 'failed') return 'engine-failed';
    if (supervised !== undefined && supervised !== 'ready') return 'starting';
    const state = this.adapter.state;
    if (state === 'ready') return undefined;
    return state === 'starting' ? 'starting' : 'engine-unreachable';
  }

  /** Forwards one call to the engine. */
  request(req: EngineRequest) {
    return this.adapter.request(req);
  }

  status(now: number = Date.now()): EngineStatus {
    const reason = this.busyReason();
    const report = this.adapter.load;
    const s = this.#supervisor;
    const p = this.#profile;
    return {
      kind: this.adapter.kind.name,
      url: this.adapter.url.origin,
      state: reason === undefined ? 'ready' : reason === 'engine-unreachable' ? 'unreachable' : reason === 'engine-failed' ? 'failed' : 'starting',
      models: this.adapter.models,
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

  /** Stops the engine it launched (SIGTERM, then SIGKILL after the grace) and closes connections. */
  async close(): Promise<void> {
    await this.#supervisor?.stop(this.#config.engineStopGrace);
    await this.adapter.close();
  }

  /** Kills a launched engine at once; for the process 'exit' hook, where nothing async runs. */
  killSync(): void {
    this.#supervisor?.killSync();
  }
}
