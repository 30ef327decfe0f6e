/**
 * What a client key's check and its limits cost the gateway per call, in process: the key
 * looked up by its token's digest, then a call's whole round through the limits (requests and
 * a concurrent call before the body, tokens after it, the x-ratelimit headers, and the settle and
 * release at the end), against a limiter of the caller's choice. The figure is CPU time per call,
 * which neighbours on a shared machine disturb far less than wall time.
 */
import { KeyCalls, KeyRing, hashToken, newKeyToken, parseKeysFile } from '../../gateway/index.ts';
import type { Limiter } from '../../gateway/index.ts';

/** CPU per call of the key lookup alone and of the lookup with every limit, in µs. */
export interface KeyCost {
  lookupUs: number;
  limitsUs: number;
}

/** Limits every call is checked and counted against, never reached. */
const LIMITS = Object.freeze({ requestsPerMinute: 1e12, tokensPerMinute: 1e12, concurrentCalls: 1e6 });

/**
 * Measures {@link KeyCost} over `calls` calls (after a tenth as many to warm up), `concurrency`
 * at a time, the way a gateway meets them.
 */
export async function measureKeyCost(limiter: Limiter, calls: number, concurrency = 32): Promise<KeyCost> {
  const token = newKeyToken();
  const ring = new KeyRing();
  ring.setFileKeys(
    parseKeysFile(JSON.stringify([{ name: 'bench', hash: `sha256:${hashToken(token)}`, limits: LIMITS }]), 'bench'),
  );
  const keyCalls = new KeyCalls({ limiter });
  const lookupUs = await cpuPerCall(calls, 1, async () => void ring.lookup(token));
  const limitsUs = await cpuPerCall(calls, concurrency, async () => {
    const call = await keyCalls.open(ring.lookup(token)!);
    if (call instanceof Error) throw call;
    const refused = await call.tokens(100);
    if (refused) throw refused;
    void call.headers;
    call.close();
  });
  return { lookupUs, limitsUs };
}

async function cpuPerCall(calls: number, concurrency: number, run: () => Promise<void>): Promise<number> {
  const loop = async (n: number): Promise<void> => {
    for (let i = 0; i < n; i++) await run();
  };
  const each = Math.max(1, Math.floor(calls / concurrency));
  await Promise.all(Array.from({ length: concurrency }, () => loop(Math.max(1, Math.floor(each / 10)))));
  const before = process.cpuUsage();
  await Promise.all(Array.from({ length: concurrency }, () => loop(each)));
  // The settles and releases the last calls left running.
  await new Promise((resolve) => setImmediate(resolve));
  const used = process.cpuUsage(before);
  return (used.user + used.system) / (each * concurrency);
}
