/**
 * The adapter for engines that speak OpenAI-compatible HTTP (vLLM, SGLang, llama.cpp server,
 * TGI, Ollama, a plain URL, or the simulated engine), configured by engine kind. It owns the
 * connection pool to the engine, forwards calls, probes health and the model list so the
 * runner knows when to admit calls, and scrapes the engine's Prometheus page for its load.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { Logger } from '../../placer/kernel/index.ts';
import type { EngineLoad } from '../protocol/index.ts';
import type { EngineKindSpec } from './kinds.ts';
import { parsePrometheusText } from './prometheus.ts';

/** Where the engine stands, as the runner last saw it. */
export type EngineState = 'starting' | 'ready' | 'unreachable' | 'stopped';

/** Adapter settings. */
export interface OpenAIHttpEngineOptions {
  url: URL;
  kind: EngineKindSpec;
  connectTimeout: number;
  /** How often health and models are checked once ready, in ms (ten times as often before). */
  probeInterval: number;
  /** How often the engine's metrics are scraped for load while ready, in ms. */
  loadInterval: number;
  /** The engine's own key, sent as `authorization: Bearer` on every request to it. @default none */
  apiKey?: string;
  /**
   * The models the engine serves, as the operator declared them: they win over its model list,
   * which is then never read (for an engine whose list is broken or absent). Readiness is the
   * kind's health route, or, where that route is the model list itself, any answer below 500.
   * @default none: the models are read from the kind's model list
   */
  models?: readonly string[];
  logger: Logger;
  /** Time source for load ages; tests pass a fake. @default Date.now */
  now?: () => number;
}

/** A request forwarded to the engine. The body streams; it is not buffered here. */
export interface EngineRequest {
  method: Dispatcher.HttpMethod;
  path: string;
  headers: Record<string, string | string[]>;
  body: Dispatcher.DispatchOptions['body'];
  signal: AbortSignal;
  /** Longest wait for the response headers and between body chunks, in ms. */
  timeout: number;
}

/** The engine's load from its last scrape, and when that was. */
export interface EngineLoadReport {
  load: EngineLoad;
  /** When the scrape finished, ms since the epoch. */
  at: number;
}

/** One OpenAI-compatible engine behind the runner. */
export class OpenAIHttpEngine {
  /** `authorization` for every request to the engine, when it has a key of its own. */
  readonly #auth: Readonly<Record<string, string>> | undefined;
  readonly url: URL;
  readonly kind: EngineKindSpec;
  readonly #pool: Pool;
  readonly #options: OpenAIHttpEngineOptions;
  readonly #now: () => number;
  #state: EngineState = 'starting';
  #models: readonly string[] = [];
  #load: EngineLoadReport | undefined;
  #probeTimer: NodeJS.Timeout | undefined;
  #loadTimer: NodeJS.Timeout | undefined;
  #probing: Promise<void> | undefined;

  constructor(options: OpenAIHttpEngineOptions) {
    this.#options = options;
    this.url = options.url;
    this.kind = options.kind;
    this.#now = options.now ?? Date.now;
    if (options.models !== undefined) this.#models = options.models;
    this.#auth =
      options.apiKey === undefined ? undefined : Object.freeze({ authorization: `Bearer ${options.apiKey}` });
    this.#pool = new Pool(options.url.origin, {
      connectTimeout: options.connectTimeout,
      // Keep sockets past the engine's idle close (uvicorn closes after 5 s).
      keepAliveTimeout: 4_000,
    });
  }

  /** The engine's state as last probed (or as the last forwarded call showed). */
  get state(): EngineState {
    return this.#state;
  }

  /** The models the engine listed at the last successful probe. */
  get models(): readonly string[] {
    return this.#models;
  }

  /** The last load scraped from the engine's metrics; undefined for kinds without metrics. */
  get load(): EngineLoadReport | undefined {
    return this.#load;
  }

  /** Starts probing; resolves after the first probe, ready or not. */
  async start(): Promise<void> {
    await this.probe();
    this.#scheduleProbe();
    this.#scheduleLoad();
  }

  /** Checks health and lists models once; never throws. */
  probe(): Promise<void> {
    this.#probing ??= this.#probe().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }

  /** True when the kind's health endpoint answers 200; for a supervisor's readiness wait. */
  async healthy(signal?: AbortSignal): Promise<boolean> {
    try {
      const res = await this.#get(this.kind.healthPath, signal);
      await res.body.dump();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }

  /** Records that the engine went away (a refused connect, a crash), so admission stops until a probe succeeds. */
  markUnreachable(error: Error): void {
    if (this.#state === 'stopped' || this.#state === 'starting') return;
    this.#setState('unreachable', error);
  }

  /** Records that the engine process is being (re)started: not ready until a probe says so. */
  markStarting(): void {
    if (this.#state !== 'stopped') this.#setState('starting');
  }

  /** Forwards one call. Resolves at the response headers; the body streams. */
  request(req: EngineRequest): Promise<Dispatcher.ResponseData> {
    return this.#pool.request({
      method: req.method,
      path: req.path,
      // The engine's key replaces any authorization the call carried: only the runner's goes in.
      headers: this.#auth === undefined ? req.headers : { ...req.headers, ...this.#auth },
      body: req.body,
      signal: req.signal,
      headersTimeout: req.timeout,
      bodyTimeout: req.timeout,
    });
  }

  /** Stops probing and closes connections, aborting any call still running. */
  async close(): Promise<void> {
    clearTimeout(this.#probeTimer);
    clearTimeout(this.#loadTimer);
    this.#state = 'stopped';
    await this.#pool.destroy();
  }

  #get(path: string, signal?: AbortSignal): Promise<Dispatcher.ResponseData> {
    const timeout = this.#options.connectTimeout;
    return this.#pool.request({
      method: 'GET',
      path,
      headers: this.#auth,
      headersTimeout: timeout,
      bodyTimeout: timeout,
      signal,
    });
  }

  async #probe(): Promise<void> {
    if (this.#state === 'stopped') return;
    try {
      if (this.#options.models !== undefined) await this.#checkDeclared();
      else await this.#listModels();
      this.#setState('ready');
    } catch (error) {
      const state = this.#state as EngineState;
      if (state === 'stopped') return;
      this.#setState(state === 'starting' ? 'starting' : 'unreachable', error as Error);
    }
  }

  /** Checks health, then reads the served models from the kind's model list; throws when either fails. */
  async #listModels(): Promise<void> {
    if (!(await this.healthy())) throw new Error(`${this.kind.healthPath} did not answer 200`);
    const list = await this.#get(this.kind.modelsPath);
    if (list.statusCode !== 200) {
      await list.body.dump();
      throw new Error(`${this.kind.modelsPath} answered ${list.statusCode}`);
    }
    const payload = (await list.body.json()) as { data?: Array<{ id?: unknown }> };
    this.#models = (payload.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
  }

  /**
   * With declared models, only that the engine is up: its health route answers 200, or, for a
   * kind whose health route is the model list (which may be the broken part), answers at all
   * below 500.
   */
  async #checkDeclared(): Promise<void> {
    const { healthPath, modelsPath } = this.kind;
    if (healthPath !== modelsPath) {
      if (!(await this.healthy())) throw new Error(`${healthPath} did not answer 200`);
      return;
    }
    const res = await this.#get(healthPath);
    await res.body.dump();
    if (res.statusCode >= 500) throw new Error(`${healthPath} answered ${res.statusCode}`);
  }

  async #scrape(): Promise<void> {
    const metrics = this.kind.metrics;
    if (!metrics || this.#state !== 'ready') return;
    try {
      const res = await this.#get(metrics.path);
      if (res.statusCode !== 200) {
        await res.body.dump();
        throw new Error(`${metrics.path} answered ${res.statusCode}`);
      }
      let skipped = 0;
      const families = parsePrometheusText(await res.body.text(), { onSkip: () => skipped++ });
      this.#load = { load: metrics.load(families), at: this.#now() };
      // Once per page, not per line: a newer engine's exotic line should not flood the log.
      if (skipped > 0) this.#options.logger.debug('engine metrics lines skipped', { engine: this.url.origin, skipped });
    } catch (error) {
      // Stale load is worse than none: consumers judge freshness by `at`, so keep the old one.
      this.#options.logger.debug('engine metrics scrape failed', { engine: this.url.origin, error: error as Error });
    }
  }

  #scheduleProbe(): void {
    if (this.#state === 'stopped') return;
    const interval =
      this.#state === 'ready'
        ? this.#options.probeInterval
        : Math.max(50, Math.floor(this.#options.probeInterval / 10));
    this.#probeTimer = setTimeout(() => void this.probe().then(() => this.#scheduleProbe()), interval);
    this.#probeTimer.unref();
  }

  #scheduleLoad(): void {
    if (this.#state === 'stopped' || !this.kind.metrics) return;
    this.#loadTimer = setTimeout(
      () => void this.#scrape().then(() => this.#scheduleLoad()),
      this.#options.loadInterval,
    );
    this.#loadTimer.unref();
  }

  #setState(state: EngineState, error?: Error): void {
    if (state === this.#state) return;
    const previous = this.#state;
    this.#state = state;
    if (state === 'ready') void this.#scrape();
    const fields = { engine: this.url.origin, kind: this.kind.name, from: previous, to: state, models: this.#models };
    if (error) this.#options.logger.warn('engine state changed', { ...fields, error });
    else this.#options.logger.info('engine state changed', fields);
  }
}
