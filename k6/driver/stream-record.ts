/**
 * What one streamed response looked like on arrival: when its headers came, when each body chunk
 * was read, and how many SSE events each chunk held. A proxy that coalesces shows up twice here:
 * gaps longer than the engine's inter-token time, and more than one event per chunk.
 */

/** The arrival record of one streamed call, times in ms from when it was sent. */
export interface StreamTrace {
  /** Time to the response headers. */
  headersMs: number;
  /** Arrival time of every body chunk, ascending. */
  chunkMs: number[];
  /** SSE events (`data:` lines) in each chunk, index for index with `chunkMs`. */
  eventsPerChunk: number[];
}

/** The differences between consecutive arrival times: n arrivals give n - 1 gaps. */
export function gapsOf(arrivals: readonly number[]): number[] {
  const gaps: number[] = [];
  for (let i = 1; i < arrivals.length; i++) gaps.push(arrivals[i]! - arrivals[i - 1]!);
  return gaps;
}

/**
 * SSE events whose `data:` line starts in `text`. Counts line starts only, so an event split
 * across two chunks is counted once, in the chunk where it began.
 */
export function countEvents(text: string): number {
  let n = 0;
  for (let at = text.indexOf('data:'); at !== -1; at = text.indexOf('data:', at + 5)) {
    if (at === 0 || text[at - 1] === '\n') n++;
  }
  return n;
}
