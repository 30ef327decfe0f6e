/**
 * The "start somewhere, then walk on and wrap" order both built-in placers use, kept in one
 * place so custom placers can reuse it too.
 */

/**
 * Yields every item of `items` once, starting at `start` (taken modulo the length) and wrapping
 * around. Lazy, so a pass that commits on the first runner never builds a rotated copy.
 */
export function* rotate<R>(items: readonly R[], start: number): Generator<R, void, undefined> {
  const n = items.length;
  if (n === 0) return;
  // Normalise negative or oversized starts so callers may pass a raw counter.
  const first = ((Math.trunc(start) % n) + n) % n;
  for (let i = 0; i < n; i++) {
    yield items[(first + i) % n]!;
  }
}
