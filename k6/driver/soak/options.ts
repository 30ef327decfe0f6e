/**
 * Options of the soak scenario: its own duration bound (a soak is long by design, so the other
 * scenarios' 120 s cap does not apply), the fleet's size, which faults to inject and how long a
 * stopped runner stays stopped. Everything is checked once, up front, by the bench's rules with a
 * message naming the option and the bad value; what depends on the duration is derived from it
 * unless given.
 */
import { resolveOptions } from '../../../placer/index.ts';
import type { Rule } from '../../../placer/index.ts';
import { LIMITS, benchFail, between, checkInteger, resolveBenchOptions, show } from '../options.ts';
import type { BenchOptions } from '../options.ts';
import { FAULT_KINDS, isFaultKind } from './schedule.ts';
import type { FaultKind } from './schedule.ts';

/** What `sluice bench soak` can be told, beyond the shared bench options it reads. */
export interface SoakOptions extends BenchOptions {
  /** Engine and runner pairs behind the gateway; a numeric string too (from the CLI). @default 4 */
  nodes?: number | string;
  /** Faults to inject, each once, at its own point of the run. @default every one of {@link FAULT_KINDS} */
  faults?: readonly string[];
  /** How long the stopped runner stays stopped (SIGSTOP to SIGCONT), ms. @default a tenth of the duration, at most 20 s */
  stopFor?: number;
  /** Quiet time after the load and the detached calls' polling, while the gateway's memory is sampled, ms. @default a tenth of the duration, 5 s to 30 s */
  idle?: number;
}

/** Bounds of the soak's options. */
export const SOAK_LIMITS = Object.freeze({
  /** Shortest soak: every fault needs room for its injection, its recovery and a grace. */
  minDuration: 20_000,
  /** Longest soak: two hours. */
  maxDuration: 7_200_000,
  minNodes: 2,
  maxNodes: 8,
  /** The longest capacity probe, ms (the bench's warm-up bound). */
  maxProbe: LIMITS.maxWarmup,
  maxStopFor: 120_000,
  minIdle: 2_000,
  maxIdle: 300_000,
});

/** The defaults that do not depend on the duration. */
export const SOAK_DEFAULTS = Object.freeze({
  duration: 600_000,
  nodes: 4,
  /** The closed-loop capacity probe. */
  probe: 5_000,
  /** Longest stop, and longest idle, when derived from the duration. */
  stopFor: 20_000,
  // Long enough for V8 to give memory back after the load (tens of seconds, measured).
  idle: 60_000,
});

/** {@link SoakOptions} validated, with defaults filled in; frozen. */
export interface ResolvedSoakOptions {
  readonly duration: number;
  readonly nodes: number;
  readonly faults: readonly FaultKind[];
  readonly stopFor: number;
  readonly idle: number;
  /** Length of the closed-loop capacity probe (the bench's `warmup`), ms. */
  readonly probe: number;
  /** Calls/s taken as 100 % instead of probing; undefined to probe. */
  readonly capacity: number | undefined;
  readonly out: string;
  readonly logLevel: string;
}

// The CLI hands over integers as numbers and some settings as strings; a string must be all digits.
function numeric(check: Rule): Rule {
  return (option, value, fail) =>
    check(option, typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value, fail);
}

const faults: Rule = (option, value, fail) => {
  if (!Array.isArray(value) || value.length === 0)
    throw fail(`${option} must be a non-empty list of ${FAULT_KINDS.join(', ')}, got ${show(value)}`, option);
  const seen = new Set<FaultKind>();
  for (const kind of value) {
    if (!isFaultKind(kind))
      throw fail(`${option} must each be one of ${FAULT_KINDS.join(', ')}, got ${show(kind)}`, option);
    if (seen.has(kind)) throw fail(`${option} lists ${kind} twice; each fault runs once per soak`, option);
    seen.add(kind);
  }
  // Kept in the schedule's order whatever order they were given in.
  return Object.freeze(FAULT_KINDS.filter((k) => seen.has(k)));
};

/** How the options that do not depend on the duration are checked, in order. */
const soakRules = {
  duration: between(SOAK_LIMITS.minDuration, SOAK_LIMITS.maxDuration, 'ms'),
  nodes: numeric(between(SOAK_LIMITS.minNodes, SOAK_LIMITS.maxNodes)),
};

/**
 * Validates `raw` and fills in defaults.
 * @throws {BenchOptionError} naming the first bad option and its value.
 */
export function resolveSoakOptions(raw: SoakOptions = {}): ResolvedSoakOptions {
  // The shared options this scenario reads, checked by the shared rules; the duration is the
  // soak's own, so it is left out of that check.
  const shared = resolveBenchOptions({ ...raw, duration: undefined, warmup: undefined });
  const { duration, nodes } = resolveOptions(
    { duration: SOAK_DEFAULTS.duration, nodes: SOAK_DEFAULTS.nodes },
    soakRules,
    raw,
    benchFail,
  );
  // The probe is the bench's warm-up, so it is named warmup, with the soak's own bounds.
  const probe = checkInteger('warmup', raw.warmup ?? SOAK_DEFAULTS.probe, 1_000, SOAK_LIMITS.maxProbe, 'ms');
  // A stop longer than the gap between two faults would overlap the next one.
  const maxStop = Math.min(SOAK_LIMITS.maxStopFor, Math.floor(duration / 5));
  const stopFor = checkInteger(
    'stopFor',
    raw.stopFor ?? Math.min(SOAK_DEFAULTS.stopFor, Math.round(duration / 10)),
    1_000,
    maxStop,
    'ms',
  );
  const idleDefault = Math.min(SOAK_DEFAULTS.idle, Math.max(5_000, Math.round(duration / 10)));
  const idle = checkInteger('idle', raw.idle ?? idleDefault, SOAK_LIMITS.minIdle, SOAK_LIMITS.maxIdle, 'ms');
  return Object.freeze({
    duration,
    nodes,
    faults: faults('faults', raw.faults ?? FAULT_KINDS, benchFail) as readonly FaultKind[],
    stopFor,
    idle,
    probe,
    capacity: raw.rate === undefined ? undefined : shared.rate,
    out: shared.out,
    logLevel: shared.logLevel,
  });
}
