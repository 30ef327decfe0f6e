/**
 * Options of a bench scenario: defaults, bounds and validation, checked once up front through the
 * kernel's resolveOptions with a message naming the option and the bad value. Every knob that scales the load is bounded, so
 * a typo (`--duration 10m`, `--rate 500000`) is refused instead of pinning the machine.
 */
import { resolveOptions, show } from '../../placer/index.ts';
import type { Fail, Rule } from '../../placer/index.ts';
import { BenchOptionError } from './errors.ts';

export { show };

/** Hard bounds shared by the scenario options and the load generator. */
export const LIMITS = Object.freeze({
  /** Longest measured run, ms. */
  maxDuration: 120_000,
  /** Shortest measured run, ms: below this the percentiles are mostly warm-up noise. */
  minDuration: 1_000,
  /** Longest warm-up, ms. */
  maxWarmup: 30_000,
  /** Highest open-loop arrival rate, requests per second. */
  maxRate: 20_000,
  /** Most connections per target. */
  maxConnections: 1_024,
  /** Most requests in one run, whatever the duration says. */
  maxRequests: 5_000_000,
  /** Most repetitions of the whole set of runs. */
  maxRounds: 10,
});

/** What a scenario can be told. Durations are ms (the CLI turns `10s` into 10000). */
export interface BenchOptions {
  /** Length of each measured run, ms; at most 120 s. @default see benchDefaults */
  duration?: number;
  /** Closed-loop warm-up per target before the first measured run, ms; 0 skips it. @default see benchDefaults */
  warmup?: number;
  /** Connections per target in closed loop; the connection cap in open loop. @default see benchDefaults */
  connections?: number;
  /** Open-loop arrival rate, requests per second. @default see benchDefaults */
  rate?: number;
  /** Times the whole set of runs is repeated, alternating the target order. @default see benchDefaults */
  rounds?: number;
  /** Also measure nginx in front of the runner when `nginx` is on PATH. @default see benchDefaults */
  nginx?: boolean;
  /**
   * overhead: also measure a second gateway with a client key and in-memory limits on every call,
   * to print what keys and limits add per call. @default see benchDefaults
   */
  withKeys?: boolean;
  /**
   * overhead: also measure a gateway and runner with tracing on, exporting to a small OTLP sink in
   * the bench, to print what tracing costs per call. @default see benchDefaults
   */
  tracing?: boolean;
  /** Folder for the JSON results and the SVG chart, relative to the working directory. @default see benchDefaults */
  out?: string;
  /** Log level of the child processes the scenario starts. @default see benchDefaults */
  logLevel?: string;
}

/** The validated, frozen form of {@link BenchOptions}. */
export type ResolvedBenchOptions = Readonly<Required<BenchOptions>>;

/** The defaults, frozen. */
export const benchDefaults: ResolvedBenchOptions = Object.freeze({
  duration: 10_000,
  warmup: 2_000,
  connections: 32,
  rate: 500,
  rounds: 1,
  nginx: true,
  withKeys: false,
  tracing: false,
  out: 'bench-results',
  logLevel: 'warn',
});

/** Makes the bench's option error, which carries the option's name. */
export const benchFail: Fail = (message, option) => new BenchOptionError(option ?? '', message);

// Durations come from flags like `--duration 150s`; echo them back in the same unit.
function formatMs(ms: number): string {
  return ms !== 0 && ms % 1000 === 0 ? `${ms / 1000}s` : `${ms} ms`;
}

/**
 * The bench's range rule: an integer in [min, max]; `unit` only shapes the message, and ms are
 * shown as the flags write them (`between 1s and 120s, got 150s`). The kernel's integer rule
 * knows only 0 and 1 as lower bounds, and the bench's bounds start anywhere.
 */
export function between(min: number, max: number, unit = ''): Rule {
  return (option, value, fail) => {
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
      throw fail(`${option} must be an integer${unit ? ` of ${unit}` : ''}, got ${show(value)}`, option);
    }
    if (value < min || value > max) {
      const f = (v: number): string => (unit === 'ms' ? formatMs(v) : unit ? `${v} ${unit}` : String(v));
      throw fail(`${option} must be between ${f(min)} and ${f(max)}, got ${f(value)}`, option);
    }
    return value;
  };
}

/**
 * {@link between} for one value outside an options table.
 * @throws {BenchOptionError} naming `name` and the value.
 */
export function checkInteger(name: string, value: unknown, min: number, max: number, unit = ''): number {
  return between(min, max, unit)(name, value, benchFail) as number;
}

const boolean: Rule = (option, value, fail) => {
  if (typeof value !== 'boolean') throw fail(`${option} must be true or false, got ${show(value)}`, option);
  return value;
};

const nonEmptyString: Rule = (option, value, fail) => {
  if (typeof value !== 'string' || value === '')
    throw fail(`${option} must be a non-empty string, got ${show(value)}`, option);
  return value;
};

/** How each option is checked, in the order the first bad one is reported. */
const benchRules = {
  duration: between(LIMITS.minDuration, LIMITS.maxDuration, 'ms'),
  warmup: between(0, LIMITS.maxWarmup, 'ms'),
  connections: between(1, LIMITS.maxConnections),
  rate: between(1, LIMITS.maxRate),
  rounds: between(1, LIMITS.maxRounds),
  nginx: boolean,
  withKeys: boolean,
  tracing: boolean,
  out: nonEmptyString,
  logLevel: nonEmptyString,
};

/** Validates `options` and fills in defaults. @throws {BenchOptionError} for the first bad option. */
export function resolveBenchOptions(options: BenchOptions = {}): ResolvedBenchOptions {
  return resolveOptions(benchDefaults, benchRules, options, benchFail);
}
