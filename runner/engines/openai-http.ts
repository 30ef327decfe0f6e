/**
 * The adapter for engines that speak OpenAI-compatible HTTP (vLLM, SGLang, llama.cpp server,
 * TGI, Ollama, or the simulated engine). It owns the connection pool to the engine, forwards
 * calls, and probes health and the model list so the runner knows when to admit calls.
 */
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { Logger } from '../../placer/log.ts';

/** Where the engine stands, as the runner last saw it. */
export type EngineState = 'starting' | 'ready' | 'unreachable' | 'stopped';

/** Adapter settings. */
export interface OpenAIHttpEngineOptions {
  url: URL;
  connectTimeout: number;
  probeInterval: number;
  logger: Logger;
  /** Path answering 200 when the engine can take calls. @default `/health` (vLLM) */
  healthPath?: string;
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

/** One OpenAI-compatible engine behind the runner. */
export class OpenAIHttpEngine {
  readonly url: URL;
  readonly #pool: Pool;
  readonly #options: OpenAIHttpEngineOptions;
  #state: EngineState = 'starting';
  #models: readonly string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #probing: Promise<void> | undefined;

  constructor(options: OpenAIHttpEngineOptions) {
    this.#options = options;
    this.url = options.url;
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

  /** Starts probing; resolves after the first probe, ready or not. */
  async start(): Promise<void> {
    await this.probe();
    this.#schedule();
  }

  /** Checks health and lists models once; never throws. */
  probe(): Promise<void> {
    this.#probing ??= this.#probe().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }

  /** Records that a forwarded call could not connect, so admission stops until a probe succeeds. */
  markUnreachable(error: Error): void {
    if (this.#state === 'stopped') return;
    this.#setState('unreachable', error);
  }

  /** Forwards one call. Resolves at the response headers; the body streams. */
  request(req: EngineRequest): Promise<Dispatcher.ResponseData> {
    return this.#pool.request({
      method: req.method,
      path: req.path,
      headers: req.headers,
      body: req.body,
      signal: req.signal,
      headersTimeout: req.timeout,
      bodyTimeout: req.timeout,
    });
  }

  /** Stops probing and closes connections, aborting any call still running. */
  async close(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#state = 'stopped';
    await this.#pool.destroy();
  }

  async #probe(): Promise<void> {
    if (this.#state === 'stopped') return;
    try {
      const health = await this.#pool.request({
        method: 'GET',
        path: this.#options.healthPath ?? '/health',
        headersTimeout: this.#options.connectTimeout,
        bodyTimeout: this.#options.connectTimeout,
      });
      await health.body.dump();
      if (health.statusCode !== 200) throw new Error(`health answered ${health.statusCode}`);
      const list = await this.#pool.request({
        method: 'GET',
        path: '/v1/models',
        headersTimeout: this.#options.connectTimeout,
        bodyTimeout: this.#options.connectTimeout,
      });
      if (list.statusCode !== 200) {
        await list.body.dump();
        throw new Error(`/v1/models answered ${list.statusCode}`);
      }
      const payload = (await list.body.json()) as { data?: Array<{ id?: unknown }> };
      this.#models = (payload.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
      this.#setState('ready');
    } catch (error) {
      const state = this.#state as EngineState;
      if (state === 'stopped') return;
      this.#setState(state === 'starting' ? 'starting' : 'unreachable', error as Error);
    }
  }

  #schedule(): void {
    if (this.#state === 'stopped') return;
    const interval =
      this.#state === 'ready' ? this.#options.probeInterval : Math.max(50, Math.floor(this.#options.probeInterval / 10));
    this.#timer = setTimeout(() => {
      void this.probe().then(() => this.#schedule());
    }, interval);
    this.#timer.unref();
  }

  #setState(state: EngineState, error?: Error): void {
    if (state === this.#state) return;
    const previous = this.#state;
    this.#state = state;
    const fields = { engine: this.url.origin, from: previous, to: state, models: this.#models };
    if (error) this.#options.logger.warn('engine state changed', { ...fields, error });
    else this.#options.logger.info('engine state changed', fields);
  }
}
