/**
 * A process's resident memory sampled on a fixed period while a scenario moves through its
 * phases (idle, ramp, plateau, ...), each sample tagged with the phase it was taken in, so a
 * phase's figure is a statistic over its own samples rather than one reading that a garbage
 * collection happening at that moment could skew either way.
 */
import { performance } from 'node:perf_hooks';
import type { ProcessMemory } from './process-memory.ts';
import { percentile } from './stats.ts';

/** One reading. */
export interface MemorySample {
  /** ms since the sampler started. */
  ms: number;
  phase: string;
  rssKiB: number;
  hwmKiB: number;
  /** Streams open in the driver when it was taken. */
  open: number;
}

/** A phase's samples, summarised. NaN everywhere when the phase has none. */
export interface PhaseMemory {
  samples: number;
  medianKiB: number;
  maxKiB: number;
  /** The last sample's RSS: where the phase ended. */
  lastKiB: number;
  /** The highest high-water mark seen in the phase. */
  hwmKiB: number;
  /** The fewest streams open at any sample of the phase. */
  fewestOpen: number;
}

/** Samples `read()` every `everyMs` into a timeline, tagged with the current phase. */
export class MemorySampler {
  readonly samples: MemorySample[] = [];
  readonly #read: () => ProcessMemory | undefined;
  readonly #open: () => number;
  readonly #started = performance.now();
  readonly #timer: NodeJS.Timeout;
  #phase = 'start';

  /** Starts sampling at once; `open` tells how many streams the driver holds. */
  constructor(read: () => ProcessMemory | undefined, open: () => number, everyMs: number) {
    this.#read = read;
    this.#open = open;
    this.#timer = setInterval(() => this.take(), everyMs);
    // A sampler must never be what keeps a finished bench alive.
    this.#timer.unref();
  }

  /** Tags the samples from now on with `phase`, and takes one at once (returned) so no phase has none. */
  phase(phase: string): MemorySample | undefined {
    this.#phase = phase;
    return this.take();
  }

  /** Takes one sample now; skipped when /proc could not be read. */
  take(): MemorySample | undefined {
    const memory = this.#read();
    if (!memory) return undefined;
    const sample = {
      ms: Math.round(performance.now() - this.#started),
      phase: this.#phase,
      ...memory,
      open: this.#open(),
    };
    this.samples.push(sample);
    return sample;
  }

  /** Stops sampling. */
  stop(): void {
    clearInterval(this.#timer);
  }
}

/** Summarises the samples tagged `phase`. */
export function phaseMemory(samples: readonly MemorySample[], phase: string): PhaseMemory {
  const mine = samples.filter((s) => s.phase === phase);
  if (mine.length === 0)
    return {
      samples: 0,
      medianKiB: Number.NaN,
      maxKiB: Number.NaN,
      lastKiB: Number.NaN,
      hwmKiB: Number.NaN,
      fewestOpen: Number.NaN,
    };
  const rss = Float64Array.from(mine, (s) => s.rssKiB).sort();
  return {
    samples: mine.length,
    medianKiB: percentile(rss, 50),
    maxKiB: rss[rss.length - 1]!,
    lastKiB: mine[mine.length - 1]!.rssKiB,
    hwmKiB: Math.max(...mine.map((s) => s.hwmKiB)),
    fewestOpen: Math.min(...mine.map((s) => s.open)),
  };
}
