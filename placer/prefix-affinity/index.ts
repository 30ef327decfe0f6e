/**
 * Prefix affinity: send a prompt to the runner that most recently served the longest prefix of
 * it, whose engine likely still holds that prefix's KV cache and so skips most of the prefill.
 * Affinity alone lets one runner take everything (every chat shares its system prompt), so, as in
 * SGLang's cache-aware router, a load guard hands the call to least-loaded when its home runner is
 * far busier than the least loaded one, and a match too short to be worth it goes least-loaded too.
 */
import { loadOf, outOfBalance, readLoad, thenByLoad } from '../load.ts';
import { leastLoadedDefaults, leastLoadedPass } from '../least-loaded/index.ts';
import { leastLoadedChoice } from '../least-loaded/choose.ts';
import { poolViewOf } from '../pool-view.ts';
import type { CachedReport, Placer, Runner, RunnerCall } from '../types.ts';
import { BlockChain, PrefixMemo } from './blocks.ts';
import { loadAwareDescriptor } from '../load-options.ts';
import type { PlacerDescriptor } from '../descriptor.ts';
import { prefixAffinityDefaults, resolvePrefixAffinity, type PrefixAffinityOptions } from './options.ts';
import { PrefixIndex } from './prefix-index.ts';
import type { PrefixMatch } from './prefix-index.ts';

export type { PrefixAffinityConfig, PrefixAffinityOptions } from './options.ts';
export { prefixAffinityDefaults } from './options.ts';

/**
 * Creates a placer named `prefix-affinity`. On each pass:
 *
 * 1. No prompt (e.g. /invoke calls): least-loaded order.
 * 2. Longest prefix served by a listed runner (the home), as a share of the prompt (blocks x
 *    blockSize / prompt length), below `minMatchRatio`: least-loaded order.
 * 3. Home out of balance, SGLang's two gaps on `loadOf` utilisation, taken between the home and the
 *    runner least-loaded would offer first (`least`, the least loaded of the whole pool or, on a
 *    pool larger than least-loaded's `choices`, of a sample): `home - least > balanceAbsThreshold`
 *    and `home > balanceRelThreshold x least`: least-loaded order.
 * 4. Otherwise the home first, then the rest from least to most loaded.
 *
 * SGLang compares the most loaded runner with the least; here it is the home, because a busy
 * runner elsewhere is no reason to give up a cached prefix. The measurements behind this rule and
 * its gap are in docs/placers.md (prefix-affinity) and docs/benchmarks.md.
 *
 * The index learns in `placed()`, whichever branch chose the runner, because the runner that
 * served a prompt is the one whose cache now holds it; `forget()` points the entries of runners
 * that left at no runner.
 * Runners without `load()` read as idle, so with none of them reporting the guard never trips.
 * Nothing is skipped, so a busy affinity runner is followed by everyone else on the same pass.
 * @throws PlacerConfigError naming a bad option.
 */
export function createPrefixAffinityPlacer(options: PrefixAffinityOptions = {}): Placer {
  const config = resolvePrefixAffinity(options);
  const { now, staleAfterMs, blockSize, minMatchRatio } = config;
  const index = new PrefixIndex(config.maxBlocks);
  // The least-loaded choice it falls back on and guards against, with least-loaded's defaults.
  const choice = { ...config, ...leastLoadedDefaults };
  // One chain per call, hashed as far as the lookups read and finished by placed(), never twice;
  // weak so calls are not kept. Placed calls' chains are kept a while, so the next prompt that
  // starts the same way skips hashing what it shares with them.
  const chains = new WeakMap<RunnerCall, BlockChain>();
  const memo = new PrefixMemo(MEMO_CHAINS, MEMO_BYTES);
  // The match each call's order() put first, to set against what its engine reports it cached.
  const matches = new WeakMap<RunnerCall, PrefixMatch>();
  const chainOf = (call: RunnerCall, prompt: string): BlockChain => {
    let chain = chains.get(call);
    if (chain === undefined) {
      chain = new BlockChain(call.fn, prompt, blockSize, memo);
      chains.set(call, chain);
    }
    return chain;
  };

  return {
    name: 'prefix-affinity',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): Iterable<R> {
      // The pool's view (id order, positions) is kept per list; loads are read only for the home
      // and the least-loaded choice, and for the rest only if the walk asks past them.
      const view = poolViewOf(runners);
      const prompt = promptOf(call);
      if (prompt === undefined) return leastLoadedPass(call, view, choice);
      const match = index.longest(chainOf(call, prompt), view.positions);
      // blocks x blockSize is short by one per block stretched over a surrogate pair: close
      // enough for a threshold, and cheaper than keeping every block's end.
      if (match === undefined || (match.blocks * blockSize) / prompt.length < minMatchRatio) {
        return leastLoadedPass(call, view, choice);
      }
      // Ids are unique within a pool, so this is the one runner the index points at; longest()
      // only returns ids in `positions`.
      const home = view.sorted[view.positions.get(match.runnerId)!]!;
      matches.set(call, match);
      const least = leastLoadedChoice(view, call.key, now(), choice)!;
      const first = outOfBalance(loadOf(readLoad(home), now(), staleAfterMs), least.load, config) ? least.runner : home;
      return thenByLoad([first], view, now, staleAfterMs);
    },
    preferred(call: RunnerCall, runners: readonly Runner<unknown>[]): string | undefined {
      // The runner caching the longest prefix, when it passes the match threshold: the home
      // order() would put first, before the balance guard (every runner is busy when this is asked).
      const prompt = promptOf(call);
      if (prompt === undefined) return undefined;
      const match = index.longest(chainOf(call, prompt), poolViewOf(runners).positions);
      if (match === undefined || (match.blocks * blockSize) / prompt.length < minMatchRatio) return undefined;
      return match.runnerId;
    },
    placed(call: RunnerCall, runner: Runner<unknown>): void {
      const prompt = promptOf(call);
      if (prompt !== undefined) index.record(chainOf(call, prompt).all(), runner.id);
    },
    cached(call: RunnerCall, runnerId: string, report: CachedReport): void {
      // The index said the runner held `match.blocks` of the prompt; its engine says how much it
      // did. Where it held less (it evicted under pressure, or restarted), the index stops
      // pointing there past what it held: that runner's copy of a prefix is short-lived.
      const match = matches.get(call);
      const prompt = promptOf(call);
      if (!match || match.runnerId !== runnerId || prompt === undefined || !report.promptTokens) return;
      const chain = chainOf(call, prompt).all();
      const held = Math.floor(
        (chain.length * Math.min(report.cachedTokens, report.promptTokens)) / report.promptTokens,
      );
      if (held < match.blocks) index.forgetBeyond(chain, held, runnerId);
    },
    forget(runnerIds: readonly string[]): void {
      index.forget(runnerIds);
    },
  };
}

/** Recent chains each placer keeps: enough for an application's few system prompts and busy sessions. */
const MEMO_CHAINS = 64;
/** ...and at most about this many bytes between them (each chain's prompt, its bytes and its keys). */
const MEMO_BYTES = 16 << 20;

/** The call's prompt, or undefined when it has none worth hashing. */
function promptOf(call: RunnerCall): string | undefined {
  return typeof call.prompt === 'string' && call.prompt.length > 0 ? call.prompt : undefined;
}

/** The registry's entry: time comes from the gateway's clock, unless the options bring their own `now`. */
export const descriptor: PlacerDescriptor = loadAwareDescriptor(
  'prefix-affinity',
  createPrefixAffinityPlacer,
  prefixAffinityDefaults,
);
