/**
 * A call's cache view for placement, and the check of it: `call.cache` (placer/types.ts) is a
 * getter that names the prompt in the engines' blocks and looks it up in the truth index the first
 * time a placer reads it, so a placer that never reads it costs nothing. Once a runner took the
 * call, its blocks count as pending there and the cached tokens predicted there are kept; once the
 * engine reported its cached tokens, the two are recorded side by side and the placer is told.
 */
import type { CachedReport, Placer, PromptCache } from '../../placer/types.ts';
import type { CacheTruth, CallCache, GatewayPool } from '../fleet/index.ts';
import type { CallRoute, GatewayCall, PromptParts } from '../http/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';

/** What the checks need: the pool (its runners and its cache truth), the placer to tell, a logger. */
export interface CacheChecksOptions {
  readonly pool: GatewayPool;
  readonly placer: Placer;
  readonly logger: Logger;
}

/** The cache views of calls in flight and their predictions; one per agent. */
export class CacheChecks {
  readonly #pool: GatewayPool;
  readonly #truth: CacheTruth | undefined;
  readonly #placer: Placer;
  readonly #logger: Logger;
  /** Each call's view, once a placer read it. */
  readonly #views = new WeakMap<GatewayCall, CallCache>();
  /** The cached tokens predicted on the runner that took the call. */
  readonly #predicted = new WeakMap<GatewayCall, number>();

  constructor(options: CacheChecksOptions) {
    this.#pool = options.pool;
    this.#truth = options.pool.cacheTruth;
    this.#placer = options.placer;
    this.#logger = options.logger;
  }

  /**
   * Whether a call on `route` gets a cache view and its check: a chat or completion while some
   * runner feeds this gateway. Such a call that streams without asking for usage is sent asking
   * for it, so that its engine's cached tokens are checked like any other call's.
   */
  checks(route: CallRoute): boolean {
    return (route === 'chat' || route === 'completions') && (this.#truth?.index.feeds ?? 0) > 0;
  }

  /**
   * Gives a chat or completion call its lazy `cache`: computed at the first read, from the pool's
   * runners for the call's model then, and the same for every later read.
   */
  attach(call: GatewayCall, parts: PromptParts | undefined): void {
    const truth = this.#truth;
    if (!truth || !parts || (call.route !== 'chat' && call.route !== 'completions')) return;
    // No runner feeds this gateway: there is nothing to look up, and the call keeps its shape.
    if (truth.index.feeds === 0) return;
    const route = call.route;
    let read = false;
    let cache: PromptCache | undefined;
    const view = (): PromptCache | undefined => {
      if (read) return cache;
      read = true;
      try {
        const runners = this.#pool.runners(call);
        // The fleet's pool answers at once; a pool that must be awaited gets no view.
        const found = Array.isArray(runners) ? truth.view({ route, ...parts }, runners) : undefined;
        if (found) {
          this.#views.set(call, found);
          cache = found.cache;
        }
      } catch (error) {
        this.#logger.warn('cache view failed', { call: call.id, error: error as Error });
      }
      return cache;
    };
    Object.defineProperty(call, 'cache', { get: view, enumerable: true, configurable: true });
  }

  /** A runner took the call: its blocks are pending there, and the prediction for it is kept. */
  placed(call: GatewayCall, runnerId: string): void {
    const view = this.#views.get(call);
    if (!view || !this.#truth) return;
    const { holders, floor = 0, known } = view.cache;
    this.#predicted.set(call, holders.get(runnerId) ?? (known(runnerId) ? floor : 0));
    this.#truth.placed(view, runnerId);
  }

  /** The engine behind `runnerId` reported, in its usage block, the call's cached tokens. */
  reported(call: GatewayCall, runnerId: string, report: CachedReport): void {
    const predicted = this.#predicted.get(call);
    if (predicted !== undefined) this.#truth?.checked(call.fn, runnerId, predicted, report.cachedTokens);
    try {
      this.#placer.cached?.(call, runnerId, report);
    } catch (error) {
      this.#logger.warn('placer cached hook failed', { call: call.id, error: error as Error });
    }
  }
}
