/**
 * Runner options, their defaults, and the validation that turns a bad value into one line
 * naming the option.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../placer/log.ts';
import { silentLogger } from '../placer/log.ts';
import { checkInteger, checkMs, show } from '../placer/validate.ts';
import type { EngineKindName } from './engines/kinds.ts';
import { engineKind } from './engines/kinds.ts';
import type { EngineProfile } from './engines/profile.ts';
import { RunnerConfigError } from './errors.ts';

/** How a runner is set up: give `engine` (an engine already running) or `profile` (launch one). */
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
   * @default 4
   */
  slots?: number;
  /**
   * How long connecting to the engine may take, in ms. A refused or timed-out connect means
   * nothing ran, so the runner answers busy and the gateway tries elsewhere.
   * @default 2000
   */
  engineConnectTimeout?: number;
  /**
   * Execution limit for a call whose request carries no deadline header, in ms.
   * @default 600000
   */
  defaultCallTimeout?: number;
  /**
   * How often the engine's health and model list are checked once it is ready, in ms.
   * While the engine is starting it is checked ten times as often.
   * @default 5000
   */
  engineProbeInterval?: number;
  /**
   * How often the engine's Prometheus metrics are read for its load, in ms.
   * @default 1000
   */
  loadInterval?: number;
  /**
   * How long a launched engine gets to exit after SIGTERM before SIGKILL, in ms.
   * @default 10000
   */
  engineStopGrace?: number;
  /**
   * First delay before relaunching a crashed engine, in ms; doubled per crash in a row (capped
   * at 60 s), with full jitter.
   * @default 1000
   */
  engineRestartBackoff?: number;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/** Options after defaults and validation; frozen. */
export interface RunnerConfig {
  readonly engineUrl: URL;
  readonly profile: EngineProfile | undefined;
  readonly engineKind: EngineKindName;
  readonly simCommand: readonly string[] | undefined;
  readonly id: string;
  readonly slots: number;
  readonly engineConnectTimeout: number;
  readonly defaultCallTimeout: number;
  readonly engineProbeInterval: number;
  readonly loadInterval: number;
  readonly engineStopGrace: number;
  readonly engineRestartBackoff: number;
  readonly logger: Logger;
}

/** Applies defaults and validates; throws {@link RunnerConfigError} naming the first bad option. */
export function resolveRunnerOptions(options: RunnerOptions): RunnerConfig {
  const {
    engine,
    profile,
    simCommand,
    id = `runner-${randomBytes(3).toString('hex')}`,
    slots = 4,
    engineConnectTimeout = 2000,
    defaultCallTimeout = 600_000,
    engineProbeInterval = 5000,
    loadInterval = 1000,
    engineStopGrace = 10_000,
    engineRestartBackoff = 1000,
    logger = silentLogger,
  } = options;
  if ((engine === undefined) === (profile === undefined)) {
    throw new RunnerConfigError('give exactly one of engine (the URL of a running engine) or profile (an engine to launch)');
  }
  let engineUrl: URL;
  let kindName: string;
  if (profile !== undefined) {
    if (profile === null || typeof profile !== 'object' || Array.isArray(profile)) {
      throw new RunnerConfigError(`profile must be an object, got ${show(profile)}`);
    }
    // The rest of the profile's checks (binary, GPUs, free port, args) run before launch, in
    // RunnerEngine.start; the port is needed now to know where the engine will answer.
    const port = checkInteger('profile.port', profile.port, { min: 1, max: 65_535 }, (m) => new RunnerConfigError(m));
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
  if (typeof id !== 'string' || !/^[A-Za-z0-9._:-]{1,128}$/.test(id)) {
    throw new RunnerConfigError(`id must be 1-128 letters, digits or ._:- characters, got ${show(id)}`);
  }
  const fail = (message: string) => new RunnerConfigError(message);
  checkInteger('slots', slots, { min: 1 }, fail);
  checkMs('engineConnectTimeout', engineConnectTimeout, 1, fail);
  checkMs('defaultCallTimeout', defaultCallTimeout, 1, fail);
  checkMs('engineProbeInterval', engineProbeInterval, 1, fail);
  checkMs('loadInterval', loadInterval, 1, fail);
  checkMs('engineStopGrace', engineStopGrace, 0, fail);
  checkMs('engineRestartBackoff', engineRestartBackoff, 0, fail);
  return Object.freeze({
    engineUrl,
    profile,
    engineKind: kindName as EngineKindName,
    simCommand,
    id,
    slots,
    engineConnectTimeout,
    defaultCallTimeout,
    engineProbeInterval,
    loadInterval,
    engineStopGrace,
    engineRestartBackoff,
    logger,
  });
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
