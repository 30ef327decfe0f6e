/**
 * `sluice bench`: its settings and run function. The command lives with the other commands; the
 * bench itself sits beside the product (k6/driver/), and this module is the one place the product
 * loads it, lazily (commands.ts loads this module only when asked for the bench, or for its
 * scenario list in `sluice --help`). The defaults --help shows are read from the bench's own
 * defaults objects; a setting not given is left out, so each scenario applies its own.
 */
import {
  DEFAULT_HOPS,
  FAULT_KINDS,
  SIMULATE_DEFAULTS,
  BATCH_BENCH,
  SOAK_DEFAULTS,
  benchDefaults,
  runBench,
  scenarios,
} from '../../k6/driver/index.ts';
import type { BenchOptions } from '../../k6/driver/index.ts';
import type { Command } from './command.ts';
import { startService } from './entry.ts';
import { givenValues, logFormat } from './command.ts';
import type { Setting } from './settings.ts';
import { formatDefault } from './settings.ts';

/** Every scenario `sluice bench <scenario>` runs, by name, in the order --help lists them. */
export const benchScenarioNames: readonly string[] = Object.freeze(Object.keys(scenarios));

const b = benchDefaults;
const duration = (ms: number): string => formatDefault({ key: 'duration', type: 'duration', description: '' }, ms);

/** The settings the base options take, passed on only when given. */
const BASE_KEYS = [
  'duration',
  'warmup',
  'connections',
  'rate',
  'rounds',
  'nginx',
  'withKeys',
  'tracing',
  'out',
  'logLevel',
  'streams',
] as const;

/** The settings only the simulate scenario reads. */
const SIMULATE_KEYS = [
  'runners',
  'calls',
  'levels',
  'contenders',
  'capacity',
  'check',
  'sluiceHopMs',
  'nginxHopMs',
  'workload',
  'gateways',
  'ttftTarget',
  'feedDelayMs',
  'cacheDemand',
  'kvAware',
] as const;

/** The settings only the soak scenario reads. */
const SOAK_KEYS = ['nodes', 'faults', 'stopFor', 'idle'] as const;
const BATCH_KEYS = ['lines'] as const;

const settings: readonly Setting[] = [
  {
    key: 'duration',
    type: 'duration',
    description: 'length of each measured run, 1s to 120s; soak: length of the load, 20s to 2h',
    defaultText: `${duration(b.duration)}; placement 20s; soak ${duration(SOAK_DEFAULTS.duration)}`,
  },
  {
    key: 'warmup',
    type: 'duration',
    description: 'warm-up per target before measuring, up to 30s; soak: the closed-loop capacity probe, 1s to 30s',
    defaultText: `${duration(b.warmup)}; placement 9s, one session; soak ${duration(SOAK_DEFAULTS.probe)}`,
  },
  {
    key: 'connections',
    type: 'integer',
    libraryDefault: b.connections,
    description: 'connections per target (closed loop), connection cap (open loop), up to 1024',
  },
  {
    key: 'rate',
    type: 'integer',
    description:
      'open-loop arrival rate in requests per second, up to 20000; placement and soak: the rate taken as 100% instead of measuring it',
    defaultText: `${b.rate}; placement and soak measure it`,
  },
  {
    key: 'rounds',
    type: 'integer',
    libraryDefault: b.rounds,
    description: 'times every run is repeated, alternating the target order, up to 10',
  },
  {
    key: 'nginx',
    type: 'boolean',
    libraryDefault: b.nginx,
    description: 'also measure nginx in front of the runner when nginx is on PATH',
  },
  {
    key: 'withKeys',
    type: 'boolean',
    libraryDefault: b.withKeys,
    description:
      'overhead: also measure a gateway with a client key and in-memory limits, and print what they add per call',
  },
  {
    key: 'tracing',
    type: 'boolean',
    libraryDefault: b.tracing,
    description:
      'overhead: also measure a gateway and runner with tracing on (OTLP to a sink in the bench), and print what tracing adds per call',
  },
  {
    key: 'streams',
    type: 'list',
    description: 'memory scenario: streams held at once, one level per count, 1 to 4 counts of up to 10000',
    defaultText: '1000,10000',
  },
  // A string, checked by the simulate scenario, which alone reads it.
  {
    key: 'runners',
    type: 'string',
    description: 'simulate: runners in the simulated fleet, 1 to 10000',
    defaultText: String(SIMULATE_DEFAULTS.runners),
  },
  {
    key: 'calls',
    type: 'integer',
    description: "simulate: calls in each run's trace, 1000 to 5000000",
    defaultText: String(SIMULATE_DEFAULTS.calls),
  },
  {
    key: 'levels',
    type: 'list',
    description: 'simulate: shares of capacity to run at, each above 0 and at most 2',
    defaultText: SIMULATE_DEFAULTS.levels.join(','),
  },
  {
    key: 'contenders',
    type: 'list',
    description: `simulate: any of ${SIMULATE_DEFAULTS.contenders.join(', ')}`,
    defaultText: `all ${SIMULATE_DEFAULTS.contenders.length}`,
  },
  {
    key: 'capacity',
    type: 'number',
    description: "simulate: the simulated fleet's capacity in calls/s, taken as 100% instead of searching for it",
    defaultText: 'found by simulation',
  },
  {
    key: 'check',
    type: 'string',
    description: 'simulate: a placement report (JSON) to compare the simulator with, run by run, instead of planning',
    defaultText: 'none',
  },
  {
    key: 'sluiceHopMs',
    type: 'number',
    description: "simulate: ms the gateway and runner add to a call's time to first token",
    defaultText: String(DEFAULT_HOPS.sluiceHopMs),
  },
  {
    key: 'nginxHopMs',
    type: 'number',
    description: "simulate: ms nginx adds to a call's time to first token",
    defaultText: String(DEFAULT_HOPS.nginxHopMs),
  },
  {
    key: 'workload',
    type: 'string',
    description:
      'simulate and placement: placement (chat sessions) or cache-pressure (many tenants with long contexts)',
    defaultText: SIMULATE_DEFAULTS.workload,
  },
  {
    key: 'gateways',
    type: 'list',
    description:
      'simulate: gateway counts to run each sluice contender with, 1 to 16; placement --workload cache-pressure: gateway counts to run kv-aware with, 1 to 4',
    defaultText: SIMULATE_DEFAULTS.gateways.join(','),
  },
  {
    key: 'ttftTarget',
    type: 'duration',
    description:
      'simulate and placement --workload cache-pressure: goodput counts calls whose first token came within this',
    defaultText: `${SIMULATE_DEFAULTS.ttftTargetMs}ms`,
  },
  {
    key: 'feedDelayMs',
    type: 'number',
    description:
      "simulate: ms an engine's cache events and its runner's load take to reach the gateways (kv-aware, oracle)",
    defaultText: String(SIMULATE_DEFAULTS.feedDelayMs),
  },
  {
    key: 'cacheDemand',
    type: 'number',
    description: "simulate cache-pressure: the tenants' contexts over the fleet's prefix cache, 0.05 to 2",
    defaultText: String(SIMULATE_DEFAULTS.cacheDemand),
  },
  {
    key: 'kvAware',
    type: 'json',
    description: 'simulate: options for kv-aware and the oracle, e.g. {"loadWeight":2}',
    defaultText: "the placer's defaults",
  },
  {
    key: 'nodes',
    type: 'integer',
    description: 'soak: engine and runner pairs behind the gateway, 2 to 8',
    defaultText: String(SOAK_DEFAULTS.nodes),
  },
  {
    key: 'faults',
    type: 'list',
    description: `soak: faults to inject, any of ${FAULT_KINDS.join(', ')}`,
    defaultText: `all ${FAULT_KINDS.length}`,
  },
  {
    key: 'stopFor',
    type: 'duration',
    description: 'soak: how long the stopped runner stays stopped, 1s to a fifth of --duration (at most 120s)',
    defaultText: `a tenth of --duration, at most ${duration(SOAK_DEFAULTS.stopFor)}`,
  },
  {
    key: 'idle',
    type: 'duration',
    description: "soak: quiet time after the load while the gateway's memory is sampled, 2s to 300s",
    defaultText: 'a tenth of --duration, 5s to 30s',
  },
  {
    key: 'lines',
    type: 'integer',
    description: 'batch: lines in the batch, 100 to 50000',
    defaultText: String(BATCH_BENCH.lines),
  },
  { key: 'out', type: 'string', libraryDefault: b.out, description: 'folder for the JSON results and the SVG chart' },
  // Also the level of this command's own log, so it is applied here (from benchDefaults) rather than left out.
  { key: 'logLevel', type: 'string', default: b.logLevel, description: 'log level of the processes under test' },
  logFormat,
];

/** `sluice bench`. */
export const bench: Command = {
  summary: `Runs a benchmark scenario against processes it starts on 127.0.0.1, prints the figures and writes them as JSON and SVG. Scenarios: ${benchScenarioNames.join(', ')}.`,
  args: ' <scenario>',
  oneShot: true,
  // Its keys mean other things than the gateway's (runners is a count): SLUICE_BENCH_RUNNERS.
  envPrefix: 'BENCH',
  settings,
  async run({ values, positionals, env, logger, signal }) {
    // Each scenario validates what it reads and applies its own defaults to what was not given.
    const options = {
      ...givenValues(values, BASE_KEYS),
      ...givenValues(values, SIMULATE_KEYS),
      ...givenValues(values, SOAK_KEYS),
      ...givenValues(values, BATCH_KEYS),
    };
    await runBench(positionals, options as BenchOptions, { env, logger, startService, ...(signal ? { signal } : {}) });
    return async () => {};
  },
};
