/**
 * The placement contracts. Everything here is transport-free: a Runner may be an HTTP
 * runner, an in-process fake or a simulated one; the walk only sees tagged results.
 */

/** Whether the client waits for the result (sync) or is answered once a runner commits (detached). */
export type CallType = 'sync' | 'detached';

/** What a placer and a runner know about a call. The body is already buffered. */
export interface RunnerCall {
  /** Time-ordered unique id (UUIDv7). */
  readonly id: string;
  /** The function: the body's `model` on /v1 routes, `:fn` on /invoke. */
  readonly fn: string;
  /** Affinity key for hashing placers: `sluice-session` header, else body `user`, else `fn`. */
  readonly key: string;
  readonly type: CallType;
  /** Absolute time (ms since epoch, the walk's clock) after which no runner is waited for. */
  readonly placerDeadline: number;
  /** Aborted when the client goes away; a runner must stop the call when it fires. */
  readonly signal: AbortSignal;
  /**
   * The rendered prompt text, the whole chat and not only its first message, for placers that
   * keep prefix-cache affinity. Absent when the gateway has no prompt to show (e.g. /invoke).
   */
  readonly prompt?: string;
  /**
   * What the engines' KV caches hold of this call's prompt, as the gateway knows it from the
   * engines' own reports (docs/placers.md, "Cache truth"). Absent when the gateway cannot map the
   * call to the engines' blocks: no cache feed for its model, no tokenizer, or a prompt too short
   * to gain from a cache. Read lazily by the gateway: a placer that never reads it costs nothing.
   */
  readonly cache?: PromptCache;
}

/**
 * The engines' cache truth for one call's prompt. Only the start of a prompt can be reused (a
 * block's name chains through every block before it), so "cached" means the leading tokens.
 */
export interface PromptCache {
  /** The prompt's length in the engines' tokens. */
  readonly promptTokens: number;
  /**
   * The runners whose engines hold more of the prompt's start than {@link floor}, with the
   * leading tokens each holds (a multiple of the block size). A runner not listed holds the
   * floor if its cache is known (see {@link known}); nothing is known of it otherwise.
   */
  readonly holders: ReadonlyMap<string, number>;
  /**
   * Leading tokens of the prompt every runner listed for the call holds (a preamble cached across
   * the fleet), given once here rather than for each runner; every listed runner's cache is then
   * known. @default 0
   */
  readonly floor?: number;
  /**
   * False when the runner's cache is unknown: it sends no cache feed, or its feed is stale, lagging
   * or restarting. A placer should then weigh that runner by load alone, as if it held nothing.
   */
  known(runnerId: string): boolean;
}

/** What an engine reported of a call's prompt and its cache, for {@link Placer.cached}. */
export interface CachedReport {
  /** Leading prompt tokens the engine found in its cache (`usage.prompt_tokens_details.cached_tokens`). */
  readonly cachedTokens: number;
  /** The prompt's length in the engine's tokens (`usage.prompt_tokens`), when reported. */
  readonly promptTokens?: number;
}

/** A runner took the call: it is committed and must never be sent anywhere else. */
export interface Placed<T> {
  readonly kind: 'placed';
  readonly value: T;
}

/** A runner had no free slot and said so before reading the call: nothing ran. */
export interface Busy {
  readonly kind: 'busy';
}

/** The call never reached the runner (connect refused, timed out, runner unknown): nothing ran. */
export interface FailedBeforeCommit {
  readonly kind: 'failed';
  readonly error: Error;
}

/**
 * The outcome of offering a call to a runner. A runner whose call may have reached it and then
 * failed does not resolve: it rejects, and the walk passes the rejection on without retrying,
 * because running an inference call twice costs GPU time and can double side effects.
 */
export type TryExecResult<T> = Placed<T> | Busy | FailedBeforeCommit;

/**
 * What a runner last said about its own load, with when the gateway heard it. Every field but
 * `at` is optional because engines publish different metrics; an absent one is unknown, not 0.
 */
export interface LoadReport {
  /** Requests the runner's engines are running (e.g. `vllm:num_requests_running`). */
  readonly running?: number;
  /** Requests queued for a batch slot (e.g. `vllm:num_requests_waiting`). */
  readonly waiting?: number;
  /** Share of the KV cache in use, 0..1 (e.g. `vllm:kv_cache_usage_perc`). */
  readonly kvCacheUsage?: number;
  /** When the gateway received the report, in ms since the epoch; older reports go stale. */
  readonly at: number;
}

/**
 * A runner's load as a load-aware placer reads it; {@link loadOf} in `placer/load.ts` turns it
 * into one utilisation number. Two sources because each is wrong on its own: the gateway's own
 * count is immediate but blind to other gateways and to the engine's queue; the runner's report
 * sees everything but lags by up to a heartbeat.
 */
export interface RunnerLoad {
  /** Calls this gateway sent the runner that have not finished yet; counted here, so never stale. */
  readonly inFlight: number;
  /** Calls the runner can run at once; absent when unknown. */
  readonly slots?: number;
  /** The runner's latest report, if any. */
  readonly reported?: LoadReport;
}

/** One runner as the walk sees it. */
export interface Runner<T = unknown> {
  /** Stable id, unique within a pool. */
  readonly id: string;
  /** Offers the call; see {@link TryExecResult} for what each outcome promises. */
  tryExec(call: RunnerCall): Promise<TryExecResult<T>>;
  /**
   * The runner's load now, for load-aware placers; a runner without it (or returning undefined)
   * reads as idle. Called synchronously on every pass, so it must be a cheap read, not a request.
   */
  load?(): RunnerLoad | undefined;
}

/** The source of candidate runners, asked again on every pass of the walk. */
export interface RunnerPool<T = unknown> {
  /**
   * The runners that may serve this call, in no particular order. A rejection ends the walk
   * (it is not retried): a pool that cannot answer will not answer better in 10 ms.
   */
  runners(call: RunnerCall): readonly Runner<T>[] | Promise<readonly Runner<T>[]>;
}

/**
 * A placement strategy. It only orders runners; the shared walk does the trying, waiting and
 * giving up, so every placer keeps the same commit semantics.
 */
export interface Placer {
  /** Short name for logs and metrics, e.g. `round-robin`. */
  readonly name: string;
  /**
   * The order in which to offer the call to `runners` on one pass. It may skip runners but
   * must not invent them. Called once per pass, so a placer may start somewhere new each time.
   */
  order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R>;
  /**
   * The id of the runner this placer would offer `call` first for the call's own sake (its
   * session's home, the runner caching its prompt), or undefined when it has no such preference
   * (placers that only spread load). It must not change the placer's state. While every runner is
   * busy, the gateway's wait queue offers a slot freed on that runner to this call before the
   * head of the line, within bounds (docs/placers.md, "The wait queue").
   */
  preferred?(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined;
  /**
   * Told by the walk once `runner` committed to `call`, so a placer can learn from where calls
   * went (the prefix index of `prefix-affinity`). Whatever it throws or rejects with is ignored:
   * the call is already placed, and a learning placer must never unplace it.
   */
  placed?(call: RunnerCall, runner: Runner<unknown>): void;
  /**
   * Told by the gateway once the engine behind `runnerId` reported how many of the call's prompt
   * tokens it found in its cache (`usage.prompt_tokens_details.cached_tokens`), so a placer that
   * guesses where prompts are cached can correct its guess from the truth (prefix-affinity drops
   * what it remembered beyond it). Called after the answer, for calls whose engine reported it.
   * Whatever it throws is ignored: it only teaches.
   */
  cached?(call: RunnerCall, runnerId: string, report: CachedReport): void;
  /**
   * Told by the pool when runners left it for good, so a placer can drop what it keeps about them
   * instead of holding it until it ages out. Runners it never saw are ignored.
   */
  forget?(runnerIds: readonly string[]): void;
}

/** Placement deadlines and pauses, as Fn's LB agent had them. */
export interface PlacerConfig {
  /** How long a sync call may wait for a runner, in ms. Bounds waiting, never execution. */
  readonly placerTimeout: number;
  /** How long a detached call may wait for a runner, in ms. */
  readonly detachedPlacerTimeout: number;
  /** Pause after every runner was tried once, in ms. */
  readonly retryAllDelay: number;
}
