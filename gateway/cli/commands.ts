/**
 * The commands: each a settings table and a run function that starts the piece and returns
 * how to stop it. Each run imports what it needs when it starts, so `sluice sim-engine`
 * does not pay for loading the gateway and the OpenTelemetry SDK.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import type { Redact } from '../../placer/kernel/index.ts';
import { systemClock } from '../../placer/kernel/index.ts';
import type { GatewayOptions } from '../options.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import type { ServiceIdentity } from '../telemetry.ts';
import type { SimEngineOptions } from '../../runner/engines/sim/options.ts';
import { SLUICE_BIN, reportListening, startService } from './processes.ts';
import type { ChildService } from './processes.ts';
import type { Setting } from './settings.ts';
import { SettingsError, flagOf } from './settings.ts';

/** What a command's run function gets. */
export interface CommandContext {
  values: Record<string, unknown>;
  positionals: string[];
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** Hides the secret settings' values in text a command prints itself, as the logger does. */
  redact: Redact;
  /** Set for one-shot commands: aborted on SIGINT/SIGTERM so the command can stop what it started. */
  signal?: AbortSignal;
}

/** A sluice command. */
/**
 * How a started command is stopped: called on SIGTERM/SIGINT. `done`, when given, settles when
 * the piece stopped by itself (a runner drained at a gateway's request), and the process exits.
 */
export type Stop = (() => Promise<void>) & { done?: Promise<void> };

export interface Command {
  summary: string;
  /** Positional arguments shown in the usage line. */
  args?: string;
  settings: readonly Setting[];
  /**
   * A command that finishes on its own (bench): run resolves when the work is done, main calls
   * the returned function once and exits instead of waiting for a signal.
   */
  oneShot?: boolean;
  /** Starts the piece; resolves with its graceful stop once it is serving. */
  run(ctx: CommandContext): Promise<Stop>;
}

const logLevel: Setting = { key: 'logLevel', type: 'string', default: 'info', description: 'debug, info, warn, error or silent' };
const host: Setting = { key: 'host', type: 'string', default: '127.0.0.1', description: 'interface to listen on' };
const port = (def: number): Setting => ({ key: 'port', type: 'integer', default: def, description: 'port to listen on (0 picks a free one)', envAliases: ['PORT'] });

/** Gateway settings shared by `gateway` and `up`. */
const gatewaySettings: readonly Setting[] = [
  { key: 'placer', type: 'string', default: 'round-robin', description: 'round-robin, consistent-hash, least-loaded, load-weighted, prefix-affinity, or a path to a module exporting a Placer' },
  { key: 'placerOptions', type: 'json', description: 'options for the placer, e.g. {"loadFactor":1.5} for consistent-hash (docs/placers.md lists each placer\'s)', defaultText: "the placer's defaults" },
  { key: 'placerTimeout', type: 'duration', default: '360s', description: 'how long a sync call may wait for a runner' },
  { key: 'detachedPlacerTimeout', type: 'duration', default: '30s', description: 'how long a detached call may wait for a runner' },
  { key: 'retryAllDelay', type: 'duration', default: '10ms', description: 'pause after every runner was tried once' },
  { key: 'callTimeout', type: 'duration', default: '600s', description: 'execution limit of a call once a runner took it' },
  { key: 'maxBodyBytes', type: 'integer', default: 16 * 1024 * 1024, description: 'largest request body accepted, in bytes' },
  { key: 'bodyReadTimeout', type: 'duration', default: '30s', description: 'longest time a request body may take to arrive' },
  { key: 'bodyIdleTimeout', type: 'duration', default: '10s', description: 'longest silence before or between chunks of a request body (408 after)' },
  { key: 'drainTimeout', type: 'duration', default: '30s', description: 'how long shutdown waits for in-flight calls' },
  { key: 'runnerConnectTimeout', type: 'duration', default: '2s', description: 'how long connecting to a runner may take' },
  { key: 'runnerResponseTimeout', type: 'duration', default: '5s', description: 'how long a runner may take to acknowledge a call before it is deemed hung and the call goes elsewhere; after that, the longest silence before its answer\'s status line' },
  { key: 'streamIdleTimeout', type: 'duration', default: '60s', description: 'longest silence between body chunks of a call a runner took; past it the call ends with GW_RUNNER_STALLED' },
  { key: 'statusInterval', type: 'duration', default: '2s', description: 'how often each runner\'s /status is fetched' },
  { key: 'retryAfter', type: 'integer', default: 1, description: 'seconds sent in Retry-After when no runner took a call' },
  { key: 'maxInFlight', type: 'integer', default: 10_000, description: 'calls at once in the gateway once their body is in; more are refused with 503 GW_OVERLOADED' },
  { key: 'maxUploads', type: 'integer', default: 1000, description: 'request bodies being received at once, apart from --max-in-flight; more are refused with 503 GW_UPLOADS_FULL' },
  { key: 'maxUploadsPerClient', type: 'integer', default: 256, description: 'request bodies being received at once from one client address (IPv6: one /64); more get 429' },
  { key: 'maxConnectionsPerClient', type: 'integer', default: 4096, description: 'open connections per client address (IPv6: one /64); a request on one more gets 429 and the connection closes' },
  { key: 'gatewayId', type: 'string', description: 'this gateway\'s id, owner of the detached calls it runs', defaultText: 'gw- and 6 random hex digits' },
  { key: 'resultTtl', type: 'duration', default: '1h', description: 'how long detached results and Idempotency-Keys are kept' },
  { key: 'maxResultBytes', type: 'integer', default: 10 * 1024 * 1024, description: 'largest detached result kept, in bytes; a larger one fails its call' },
  { key: 'maxStoredBytes', type: 'integer', default: 256 * 1024 * 1024, description: 'bytes of detached results the store keeps until their TTL (shared on one Redis); new detached calls get 503 GW_STORE_FULL when one more would not fit' },
  { key: 'executionHeadroom', type: 'duration', default: '360s', description: 'added to detached-placer-timeout + call-timeout for a detached call\'s lifetime' },
];

/** Runners that register themselves with the gateway. */
const registrationSettings: readonly Setting[] = [
  { key: 'runnerToken', type: 'string', secret: true, description: 'shared secret runners present to register (16+ characters); prefer the environment variable (never shown)', defaultText: 'none: registration off' },
  { key: 'heartbeatInterval', type: 'duration', default: '1s', description: 'how often registered runners heartbeat' },
  { key: 'unreachableAfterMissed', type: 'integer', default: 3, description: 'missed heartbeats after which a runner is not placed on' },
  { key: 'lostAfter', type: 'duration', default: '30s', description: 'silence after which a registered runner is forgotten' },
];

/** Where detached calls are kept and where their callbacks may go; not placer or timing settings. */
const detachedSettings: readonly Setting[] = [
  { key: 'store', type: 'string', default: 'memory', secret: 'url', description: 'detached-call store: memory, or redis://[user:password@]host:port[/db] to share calls between gateways (password never shown; prefer the environment variable)' },
  { key: 'callbackSecret', type: 'string', secret: true, description: 'whsec_ secret that signs callbacks (Standard Webhooks); prefer the environment variable (never shown)', defaultText: 'none: callbacks off' },
  { key: 'callbackAllow', type: 'list', description: 'where callbacks may go: origins (https://hooks.example.com) or host patterns (*.example.com)', defaultText: 'none' },
  { key: 'callbackAllowPrivate', type: 'boolean', default: false, description: 'let callbacks reach loopback and private addresses (off: SSRF guard)' },
];

/**
 * Simulated-engine settings. Timings have no CLI default: an unset one comes from --profile,
 * so `--profile h100-8b` alone gives the H100 figures.
 */
const simSettings: readonly Setting[] = [
  { key: 'model', type: 'list', default: ['sim-small'], description: 'model names the engine serves' },
  { key: 'profile', type: 'string', default: 'small', description: 'timing profile: small (fast, for tests) or h100-8b (an 8B model on an H100)' },
  { key: 'ttftMs', type: 'number', description: 'prefill overhead in ms: time to first token before per-token prefill', defaultText: 'from --profile' },
  { key: 'prefillPerTokenMs', type: 'number', description: 'prefill time per uncached prompt token, ms', defaultText: 'from --profile' },
  { key: 'prefillJitterStdMs', type: 'number', description: 'standard deviation of prefill time, ms, capped at 30% of the mean', defaultText: 'from --profile' },
  { key: 'itlMs', type: 'number', description: 'time between output tokens, ms', defaultText: 'from --profile' },
  { key: 'itlJitterStdMs', type: 'number', description: 'standard deviation of the inter-token time, ms', defaultText: 'from --profile' },
  { key: 'loadFactor', type: 'number', description: 'slowdown with a full batch: times scale by 1 + (f - 1)(running - 1)/(max-num-seqs - 1)', defaultText: 'from --profile' },
  { key: 'outputTokens', type: 'integer', default: 16, description: 'output length when a request sets no max_tokens' },
  { key: 'maxNumSeqs', type: 'integer', description: 'sequences running at once', defaultText: 'from --profile' },
  { key: 'maxQueue', type: 'integer', description: 'waiting requests before 429', defaultText: 'from --profile' },
  { key: 'cacheBlocks', type: 'integer', description: 'prefix-cache capacity in 16-token blocks', defaultText: 'from --profile' },
  { key: 'kvBlocks', type: 'integer', description: 'KV-cache size in 16-token blocks, for vllm:kv_cache_usage_perc', defaultText: 'from --profile' },
  { key: 'failureRate429', type: 'number', default: 0, description: 'share of calls refused with 429 before any output' },
  { key: 'failureRate503', type: 'number', default: 0, description: 'share of calls refused with 503 before any output' },
  { key: 'failureRate500', type: 'number', default: 0, description: 'share of calls failed with 500' },
  { key: 'startupDelayMs', type: 'duration', default: 0, description: 'time the engine reports loading (503) after start' },
  { key: 'crashOnCall', type: 'integer', description: 'exit with code 70 on this call (counting from 1), to exercise supervision' },
  { key: 'callLog', type: 'string', description: 'file to append each call\'s sluice-call-id to ("<id> start", and "<id> refused" after a 429 or 503), to count calls run twice across restarts', defaultText: 'none' },
];

/** The sim-engine options `values` set, failure rates folded into one object. */
function simOptions(values: Record<string, unknown>): Record<string, unknown> {
  const keys = simSettings.map((s) => s.key).filter((k) => k !== 'model' && !k.startsWith('failureRate'));
  const failureRate: Record<number, number> = {};
  for (const status of [429, 503, 500]) {
    const rate = values[`failureRate${status}`];
    if (typeof rate === 'number' && rate > 0) failureRate[status] = rate;
  }
  return { ...pick(values, keys), models: values.model, failureRate };
}


/**
 * Starts the OpenTelemetry SDK with a Prometheus reader the gateway serves at /metrics. The
 * resource is given, never detected ({@link serviceResource} says why).
 */
async function startTelemetry(env: NodeJS.ProcessEnv, identity: ServiceIdentity): Promise<{ render: () => Promise<string>; shutdown: () => Promise<void> }> {
  // The SDK would otherwise export traces and logs over OTLP to a collector that may not exist;
  // operators who run one set these variables themselves.
  env.OTEL_TRACES_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  const [{ NodeSDK }, { createPrometheusReader, serviceResource }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('../telemetry.ts'),
  ]);
  const { reader, render } = createPrometheusReader();
  const sdk = new NodeSDK({ resource: serviceResource(identity), autoDetectResources: false, metricReaders: [reader] });
  sdk.start();
  return { render, shutdown: () => sdk.shutdown() };
}

/**
 * The gateway's id: --gateway-id, else a fresh one, chosen here rather than by the gateway so
 * that telemetry, started first, names the same instance.
 */
async function gatewayIdOf(values: Record<string, unknown>): Promise<string> {
  const { newGatewayId } = await import('../options.ts');
  return (values.gatewayId as string | undefined) ?? newGatewayId();
}

async function gatewayOptions(values: Record<string, unknown>, logger: Logger): Promise<GatewayOptions> {
  const [{ loadPlacer }, { createStore }, { createCallbackPolicy, createCallbackSender }] = await Promise.all([
    import('../../placer/registry.ts'),
    import('../store/index.ts'),
    import('../callbacks/index.ts'),
  ]);
  const keys = [...gatewaySettings, ...registrationSettings].map((s) => s.key).filter((key) => key !== 'placer' && key !== 'placerOptions');
  const secret = values.callbackSecret as string | undefined;
  const callbacks = secret
    ? createCallbackSender({
        secret,
        policy: createCallbackPolicy({ allow: (values.callbackAllow as string[] | undefined) ?? [], allowPrivate: values.callbackAllowPrivate as boolean }),
        logger,
      })
    : undefined;
  // One clock for the gateway and its store's TTLs (a store left to itself reads Date.now).
  const clock = systemClock;
  return {
    ...pick(values, keys),
    // TODO(issue 11): hand the placer `clock` once loadPlacer's create context takes one (placer descriptors).
    placer: await loadPlacer(String(values.placer), { cwd: process.cwd(), options: values.placerOptions as Record<string, unknown> | undefined }),
    store: createStore(values.store as string, { resultTtl: values.resultTtl as number, maxStoredBytes: values.maxStoredBytes as number, logger, now: () => clock.now() }),
    clock,
    ...(callbacks ? { callbacks } : {}),
    logger,
  };
}

const gateway: Command = {
  summary: 'Runs the gateway in front of static runners (--runners), runners that register themselves (--runner-token), or both.',
  settings: [
    port(8080),
    host,
    { key: 'runners', type: 'list', description: 'static runner URLs, comma-separated, e.g. http://127.0.0.1:9001,http://127.0.0.1:9002', defaultText: 'none: give --runners, --runner-token, or both' },
    ...gatewaySettings,
    ...detachedSettings,
    ...registrationSettings,
    logLevel,
  ],
  async run({ values, env, logger }) {
    const gatewayId = await gatewayIdOf(values);
    const telemetry = await startTelemetry(env, { name: 'sluice-gateway', instanceId: gatewayId });
    const { createGateway } = await import('../server.ts');
    const gw = createGateway({ ...(await gatewayOptions(values, logger)), gatewayId, runners: (values.runners as string[] | undefined) ?? [], renderMetrics: telemetry.render });
    const { url } = await gw.listen(values.port as number, values.host as string);
    reportListening(url);
    return async () => {
      await gw.close();
      await telemetry.shutdown();
    };
  },
};

const runner: Command = {
  summary: 'Runs a runner in front of one OpenAI-compatible engine (vLLM, SGLang, llama.cpp, TGI, Ollama, sim): one already running (--engine) or one it launches and supervises (--profile).',
  settings: [
    port(9000),
    host,
    { key: 'engine', type: 'string', description: 'base URL of an engine already running, e.g. http://127.0.0.1:8000', defaultText: 'none: give --engine or --profile' },
    { key: 'profile', type: 'json', description: 'engine to launch and supervise: inline JSON or a JSON file, e.g. {"kind":"vllm","model":"...","gpus":[0],"port":8000}', defaultText: 'none: give --engine or --profile' },
    { key: 'engineKind', type: 'string', description: 'vllm, sglang, llamacpp, tgi, ollama, openai or sim: how to check health and read load', defaultText: "the profile's kind, else openai" },
    { key: 'slots', type: 'integer', default: 4, description: 'calls run at once; more are answered busy' },
    { key: 'id', type: 'string', description: 'runner id, sent in sluice-runner-id', defaultText: 'runner- and 6 random hex digits' },
    { key: 'engineConnectTimeout', type: 'duration', default: '2s', description: 'how long connecting to the engine may take' },
    { key: 'acceptWindow', type: 'duration', default: '500ms', description: 'how long a detached call waits for its engine\'s status line before the runner answers 202; a refusal inside it sends the call elsewhere' },
    { key: 'maxBodyBytes', type: 'integer', default: 64 * 1024 * 1024, description: 'largest request body the runner reads, in bytes; larger is refused with 413' },
    { key: 'engineProbeInterval', type: 'duration', default: '5s', description: 'how often engine health and models are checked' },
    { key: 'loadInterval', type: 'duration', default: '1s', description: 'how often the engine\'s metrics are read for its load' },
    { key: 'engineStopGrace', type: 'duration', default: '10s', description: 'how long a launched engine gets after SIGTERM before SIGKILL' },
    { key: 'engineRestartBackoff', type: 'duration', default: '1s', description: 'first delay before relaunching a crashed engine (doubles per crash, max 60s, jittered)' },
    { key: 'drainTimeout', type: 'duration', default: '30s', description: 'how long shutdown, or a drain a gateway asks for, waits for running calls' },
    { key: 'gateway', type: 'list', description: 'gateway URLs to register with and heartbeat, comma-separated, e.g. http://gw1:8080,http://gw2:8080', defaultText: 'none: only gateways that list this runner call it' },
    { key: 'runnerToken', type: 'string', secret: true, description: 'shared token the gateways expect; prefer the environment variable (never shown)', defaultText: 'none; required with --gateway' },
    { key: 'advertiseUrl', type: 'string', description: 'URL the gateways should call this runner on; required with --gateway when --host is 0.0.0.0 or ::', defaultText: 'the URL it listens on' },
    { key: 'heartbeatInterval', type: 'duration', default: '1s', description: 'how often to heartbeat each gateway, unless the gateway asks for another interval' },
    logLevel,
  ],
  async run({ values, logger }) {
    const { createRunner } = await import('../../runner/server.ts');
    const r = createRunner({
      ...(pick(values, ['engine', 'profile', 'engineKind', 'slots', 'id', 'engineConnectTimeout', 'acceptWindow', 'maxBodyBytes', 'engineProbeInterval', 'loadInterval', 'engineStopGrace', 'engineRestartBackoff', 'drainTimeout', 'runnerToken', 'advertiseUrl', 'heartbeatInterval']) as RunnerOptions),
      ...(values.gateway === undefined ? {} : { gateways: values.gateway as string[] }),
      // A sim profile launches this same sluice entry point as `sluice sim-engine`.
      simCommand: [process.execPath, SLUICE_BIN],
      logger,
    });
    // The one place a launched engine is killed when the process dies without a graceful stop.
    process.once('exit', () => r.killEngine());
    try {
      const { url } = await r.listen(values.port as number, values.host as string);
      reportListening(url);
    } catch (error) {
      await r.close({ drainTimeout: 0 });
      throw error;
    }
    // A drain a gateway asked for ends the runner by itself: `done` tells main to exit then.
    return Object.assign(() => r.close(), { done: r.closed });
  },
};

/** The settings of `keys` that have a value, as options (setting keys are option names). */
function pick(values: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) if (values[key] !== undefined) out[key] = values[key];
  return out;
}

const simEngine: Command = {
  summary: 'Runs a simulated OpenAI-compatible inference engine that behaves like vLLM over HTTP.',
  settings: [port(8000), host, ...simSettings, { key: 'engineId', type: 'string', description: 'name sent in the sluice-engine-id header', defaultText: 'sim- and 6 random hex digits' }, logLevel],
  async run({ values, logger }) {
    const { runSimEngineCommand } = await import('../../runner/engines/sim/main.ts');
    const engine = await runSimEngineCommand(
      {
        ...(simOptions(values) as SimEngineOptions),
        ...(values.engineId === undefined ? {} : { engineId: values.engineId as string }),
        port: values.port as number,
        host: values.host as string,
        // A crash knob is for testing supervision: the process dies as an engine would.
        onCrash: () => process.exit(70),
      },
      (line) => logger.info('sim engine listening', JSON.parse(line) as Record<string, unknown>),
    );
    const url = `http://${values.host as string}:${(engine.server.address() as { port: number }).port}`;
    reportListening(url);
    return () => engine.close();
  },
};

const up: Command = {
  summary: 'The embedded default: a gateway on --port with --runners runners, each in front of its own simulated engine process.',
  settings: [
    port(8080),
    host,
    { key: 'runners', type: 'integer', default: 2, description: 'how many runner + simulated engine pairs to start' },
    { key: 'slots', type: 'integer', default: 4, description: 'slots per runner' },
    ...simSettings,
    ...gatewaySettings,
    ...detachedSettings,
    logLevel,
  ],
  async run({ values, env, logger, redact }) {
    const count = values.runners as number;
    if (!Number.isSafeInteger(count) || count < 1 || count > 64) {
      throw new SettingsError(`invalid --runners ${JSON.stringify(count)}: expected 1 to 64`);
    }
    const children: ChildService[] = [];
    const stopChildren = () => Promise.all(children.reverse().map((c) => c.stop('SIGTERM')));
    const level = String(values.logLevel);
    try {
      const simArgs = simSettings.flatMap((setting) => {
        const value = values[setting.key];
        if (value === undefined) return [];
        return [flagOf(setting.key), Array.isArray(value) ? value.join(',') : String(value)];
      });
      const engines = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          startService(['sim-engine', '--port', '0', '--engine-id', `sim-${i + 1}`, '--log-level', level, ...simArgs], { stdio: 'inherit', env: childEnv(env) }),
        ),
      );
      children.push(...engines);
      const runners = await Promise.all(
        engines.map((e, i) =>
          startService(['runner', '--port', '0', '--engine', e.url, '--engine-kind', 'sim', '--id', `runner-${i + 1}`, '--slots', String(values.slots), '--log-level', level], { stdio: 'inherit', env: childEnv(env) }),
        ),
      );
      children.push(...runners);
      const gatewayId = await gatewayIdOf(values);
      const telemetry = await startTelemetry(env, { name: 'sluice-gateway', instanceId: gatewayId });
      const { createGateway } = await import('../server.ts');
      const gw = createGateway({ ...(await gatewayOptions(values, logger)), gatewayId, runners: runners.map((r) => r.url), renderMetrics: telemetry.render });
      const { url } = await gw.listen(values.port as number, values.host as string);
      reportListening(url);
      const banner =
        `\nsluice is up at ${url} with ${count} runners (placer ${gw.config.placer.name}). Try:\n` +
        `  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${(values.model as string[])[0]}","messages":[{"role":"user","content":"hi"}]}'\n` +
        'Ctrl-C stops everything.\n\n';
      process.stdout.write(redact(banner));
      return async () => {
        await gw.close();
        await stopChildren();
        await telemetry.shutdown();
      };
    } catch (error) {
      await stopChildren();
      throw error;
    }
  },
};

const bench: Command = {
  summary: 'Runs a benchmark scenario against processes it starts on 127.0.0.1, prints the figures and writes them as JSON and SVG. Scenarios: overhead, streaming, placement, scale, memory, simulate, soak.',
  args: ' <scenario>',
  oneShot: true,
  settings: [
    { key: 'duration', type: 'duration', description: 'length of each measured run, 1s to 120s; soak: length of the load, 20s to 2h', defaultText: '10s; placement 20s; soak 10m' },
    { key: 'warmup', type: 'duration', description: 'warm-up per target before measuring, up to 30s; soak: the closed-loop capacity probe, 1s to 30s', defaultText: '2s; placement 9s, one session; soak 5s' },
    { key: 'connections', type: 'integer', default: 32, description: 'connections per target (closed loop), connection cap (open loop), up to 1024' },
    { key: 'rate', type: 'integer', description: 'open-loop arrival rate in requests per second, up to 20000; placement and soak: the rate taken as 100% instead of measuring it', defaultText: '500; placement and soak measure it' },
    { key: 'rounds', type: 'integer', default: 1, description: 'times every run is repeated, alternating the target order, up to 10' },
    { key: 'nginx', type: 'boolean', default: true, description: 'also measure nginx in front of the runner when nginx is on PATH' },
    { key: 'streams', type: 'list', description: 'memory scenario: streams held at once, one level per count, 1 to 4 counts of up to 10000', defaultText: '1000,10000' },
    // A string, read by the simulate scenario: SLUICE_RUNNERS may hold a gateway's runner URLs,
    // and an integer setting would refuse them for every scenario.
    { key: 'runners', type: 'string', description: 'simulate: runners in the simulated fleet, 1 to 10000', defaultText: '1000' },
    { key: 'calls', type: 'integer', description: "simulate: calls in each run's trace, 1000 to 5000000", defaultText: '143000' },
    { key: 'levels', type: 'list', description: 'simulate: shares of capacity to run at, each above 0 and at most 2', defaultText: '0.8' },
    { key: 'contenders', type: 'list', description: 'simulate: any of round-robin, consistent-hash, least-loaded, load-weighted, prefix-affinity, nginx round-robin, nginx least_conn', defaultText: 'all seven' },
    { key: 'capacity', type: 'number', description: "simulate: the simulated fleet's capacity in calls/s, taken as 100% instead of searching for it", defaultText: 'found by simulation' },
    { key: 'check', type: 'string', description: 'simulate: a placement report (JSON) to compare the simulator with, run by run, instead of planning', defaultText: 'none' },
    { key: 'sluiceHopMs', type: 'number', description: "simulate: ms the gateway and runner add to a call's time to first token", defaultText: '10' },
    { key: 'nginxHopMs', type: 'number', description: "simulate: ms nginx adds to a call's time to first token", defaultText: '1' },
    { key: 'nodes', type: 'integer', description: 'soak: engine and runner pairs behind the gateway, 2 to 8', defaultText: '4' },
    { key: 'faults', type: 'list', description: 'soak: faults to inject, any of runner-kill, runner-stop, engine-crash, redis-restart', defaultText: 'all four' },
    { key: 'stopFor', type: 'duration', description: 'soak: how long the stopped runner stays stopped, 1s to a fifth of --duration (at most 120s)', defaultText: 'a tenth of --duration, at most 20s' },
    { key: 'idle', type: 'duration', description: "soak: quiet time after the load while the gateway's memory is sampled, 2s to 300s", defaultText: 'a tenth of --duration, 5s to 30s' },
    { key: 'out', type: 'string', default: 'bench-results', description: 'folder for the JSON results and the SVG chart' },
    { ...logLevel, default: 'warn', description: 'log level of the processes under test' },
  ],
  async run({ values, positionals, env, logger, signal }) {
    // Loaded on demand: the load generator has no business in a gateway or runner process.
    const { runBench } = await import('../../k6/driver/index.ts');
    await runBench(
      positionals,
      {
        // Left undefined when not given, so that each scenario applies its own defaults.
        duration: values.duration as number | undefined,
        warmup: values.warmup as number | undefined,
        connections: values.connections as number,
        rate: values.rate as number | undefined,
        rounds: values.rounds as number,
        nginx: values.nginx as boolean,
        out: values.out as string,
        logLevel: values.logLevel as string,
        // Only the memory scenario reads it; the others ignore it.
        ...(values.streams === undefined ? {} : { streams: values.streams as string[] }),
        // Likewise the simulate and soak scenarios', validated there.
        ...givenValues(values, SIMULATE_KEYS),
        ...givenValues(values, SOAK_KEYS),
      },
      { env, logger, ...(signal ? { signal } : {}) },
    );
    return async () => {};
  },
};

/** The settings only the simulate bench scenario reads. */
const SIMULATE_KEYS = ['runners', 'calls', 'levels', 'contenders', 'capacity', 'check', 'sluiceHopMs', 'nginxHopMs'] as const;

/** The settings only the soak bench scenario reads. */
const SOAK_KEYS = ['nodes', 'faults', 'stopFor', 'idle'] as const;

/** The `keys` of `values` that were given, so that a scenario applies its own defaults to the rest. */
function givenValues(values: Record<string, unknown>, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(keys.filter((key) => values[key] !== undefined).map((key) => [key, values[key]]));
}

/**
 * Children of `up` get every setting as a flag; the parent's SLUICE_* variables (meant for the
 * gateway, where SLUICE_RUNNERS is a count) and PORT must not reach them.
 */
function childEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const name of Object.keys(copy)) if (name.startsWith('SLUICE_') || name === 'PORT') delete copy[name];
  return copy;
}

/** Every command, by name. */
export const commands: Readonly<Record<string, Command>> = {
  up,
  gateway,
  runner,
  'sim-engine': simEngine,
  bench,
};
