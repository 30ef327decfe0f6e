/**
 * Waiting for the fleet to reach a state, by polling: the soak never sleeps in the hope that a
 * process has come back, it asks until it has or a bound passes.
 */
import { setTimeout as delay } from 'node:timers/promises';

/** How often {@link until} asks. */
const POLL_EVERY_MS = 100;

/**
 * Calls `check` every {@link POLL_EVERY_MS} until it resolves true (then true) or `withinMs`
 * has passed (then false). A check that throws counts as false. An aborted `signal` ends the
 * wait at once with false.
 */
export async function until(
  check: () => Promise<boolean> | boolean,
  withinMs: number,
  signal?: AbortSignal,
): Promise<boolean> {
  const deadline = performance.now() + withinMs;
  for (;;) {
    if (signal?.aborted) return false;
    if (
      await Promise.resolve()
        .then(check)
        .catch(() => false)
    )
      return true;
    if (performance.now() >= deadline) return false;
    await delay(POLL_EVERY_MS);
  }
}
