/**
 * `sluice gateway`: the gateway's settings and their wiring into createGateway. The defaults
 * --help shows are read from gatewayDefaults, placerDefaults and storeDefaults; a setting not
 * given is left out, so the gateway applies the same default itself.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import { placerDefaults } from '../../placer/options.ts';
import { placerDescriptors } from '../../placer/registry.ts';
import { gatewayDefaults } from '../options.ts';
import type { GatewayOptions } from '../options.ts';
import { storeDefaults } from '../store/options.ts';
import { callbackPolicyDefaults } from '../callbacks/index.ts';
import type { Command } from './command.ts';
import { givenAs, givenValues, host, logFormat, logLevel, oneOf, port, secretLines, settingsOf } from './command.ts';
import { lingerSettings, withSecretFile } from './settings.ts';
import { frontSettings, gatewayDataPlaneOptions, gatewayDataPlaneSettings } from './data-plane.ts';
import { reportListening } from '../../placer/kernel/index.ts';
import type { Setting } from './settings.ts';
import { startTelemetry } from './telemetry.ts';
import type { CliTelemetry } from './telemetry.ts';
import type { Gateway } from '../server.ts';
import { clientKeysOptions, keySettings } from './client-keys.ts';
import { deploymentSettings, deploymentsOptions } from './deployments.ts';
import { keepOperatorToken, keepViewerToken } from './operator-token.ts';
import { storeRedisOf, storeRedisSettings } from './store-redis.ts';
import { batchOptionsOf, batchSettings } from './batch-settings.ts';

/** Settings whose defaults are gatewayDefaults' and placerDefaults'. */
const g = settingsOf(gatewayDefaults);
const p = settingsOf(placerDefaults);

/** Gateway settings shared by `gateway` and `up`. */
export const gatewaySettings: readonly Setting[] = [
  g(
    'placer',
    'string',
    `${Object.keys(placerDescriptors).join(', ')}, or a package or a path exporting a Placer (resolved from the working directory)`,
  ),
  {
    key: 'placerOptions',
    type: 'json',
    description:
      'options for the placer, e.g. {"loadFactor":1.5} for consistent-hash (docs/placers.md lists each placer\'s)',
    defaultText: "the placer's defaults",
  },
  p('placerTimeout', 'duration', 'how long a sync call may wait for a runner'),
  p('detachedPlacerTimeout', 'duration', 'how long a detached call may wait for a runner'),
  p('retryAllDelay', 'duration', 'pause after every runner was tried once'),
  g('callTimeout', 'duration', 'execution limit of a call once a runner took it'),
  g('maxBodyBytes', 'integer', 'largest request body accepted, in bytes'),
  g('bodyReadTimeout', 'duration', 'longest time a request body may take to arrive'),
  g('bodyIdleTimeout', 'duration', 'longest silence before or between chunks of a request body (408 after)'),
  ...lingerSettings(
    g,
    'after an answer given before the body was read whole (413, 408, a refusal), how long the rest of the body may still be read and discarded before the connection closes',
  ),
  g('drainTimeout', 'duration', 'how long shutdown waits for in-flight calls'),
  g('runnerConnectTimeout', 'duration', 'how long connecting to a runner may take'),
  g(
    'runnerResponseTimeout',
    'duration',
    "how long a runner may take to acknowledge a call before it is deemed hung and the call goes elsewhere; after that, the longest silence before its answer's status line",
  ),
  g(
    'streamIdleTimeout',
    'duration',
    'longest silence between body chunks of a call a runner took; past it the call ends with GW_RUNNER_STALLED',
  ),
  g('statusInterval', 'duration', "how often each runner's /status is fetched"),
  g('retryAfter', 'integer', 'seconds sent in Retry-After when no runner took a call'),
  g(
    'maxQueued',
    'integer',
    'calls waiting for a runner at once while every runner is busy; more are refused with 503 GW_QUEUE_FULL',
  ),
  {
    key: 'maxQueuedPerModel',
    type: 'integer',
    description:
      'calls of one model waiting at once, so one model cannot fill the queue for the others; more get 503 GW_QUEUE_FULL',
    defaultText: 'half of --max-queued',
  },
  g(
    'maxQueuedPerFlow',
    'integer',
    "calls of one flow (sluice-flow header, else the body's user, else the client address) waiting at once; more get 503 GW_QUEUE_FULL",
  ),
  g('defaultPriority', 'string', 'priority class of a call without a sluice-priority header: interactive or batch'),
  g(
    'maxInFlight',
    'integer',
    'calls at once in the gateway once their body is in; more are refused with 503 GW_OVERLOADED',
  ),
  g(
    'maxUploads',
    'integer',
    'request bodies being received at once, apart from --max-in-flight; more are refused with 503 GW_UPLOADS_FULL',
  ),
  g(
    'maxUploadsPerClient',
    'integer',
    'request bodies being received at once from one client address (IPv6: one /64); more get 429',
  ),
  g(
    'maxConnectionsPerClient',
    'integer',
    'open connections per client address (IPv6: one /64), HTTP/1.1 connections and HTTP/2 sessions alike; a request on one more gets 429 and the connection closes',
  ),
  g(
    'maxStreamsPerConnection',
    'integer',
    'streams (requests) one HTTP/2 connection may have open at once, on the TLS front',
  ),
  {
    key: 'corsOrigins',
    type: 'list',
    description:
      "origins whose browser pages may call the gateway (CORS), comma-separated (https://app.example.com), or '*' for any",
    defaultText: 'none: CORS off',
  },
  {
    key: 'gatewayId',
    type: 'string',
    description: "this gateway's id, owner of the detached calls it runs",
    defaultText: 'gw- and 6 random hex digits',
  },
  g('resultTtl', 'duration', 'how long detached results and Idempotency-Keys are kept'),
  g('maxResultBytes', 'integer', 'largest detached result kept, in bytes; a larger one fails its call'),
  g(
    'maxStoredBytes',
    'integer',
    'bytes of detached results the store keeps until their TTL (shared on one Redis); new detached calls get 503 GW_STORE_FULL when one more would not fit',
  ),
  g('executionHeadroom', 'duration', "added to detached-placer-timeout + call-timeout for a detached call's lifetime"),
  g(
    'keyLimitWindow',
    'duration',
    "the sliding window of client keys' requestsPerMinute and tokensPerMinute: a minute, shorter only for tests and demonstrations",
  ),
];

/** Runners that register themselves with the gateway. */
export const registrationSettings: readonly Setting[] = [
  ...withSecretFile(
    {
      key: 'runnerToken',
      type: 'string',
      secret: true,
      description:
        'shared secret runners present to register (16+ printable ASCII characters, no spaces); prefer --runner-token-file or the environment variable (never shown)',
      defaultText: 'none: registration off',
    },
    'runner tokens, one a line, newest first, all accepted (rotation)',
  ),
  {
    key: 'runnerNetworks',
    type: 'list',
    description:
      "CIDR networks registered runner URLs must be in, e.g. 10.0.0.0/8,fd00::/8; loopback, link-local and unspecified addresses are refused unless listed, the gateway's own listeners always",
    defaultText: 'none: any address but those',
  },
  g('heartbeatInterval', 'duration', 'how often registered runners heartbeat'),
  g('unreachableAfterMissed', 'integer', 'missed heartbeats after which a runner is not placed on'),
  g('lostAfter', 'duration', 'silence after which a registered runner is forgotten'),
];

/** What the gateway knows of the engines' caches: the feeds' freshness, the index's bounds, the tokenizers. */
export const cacheTruthSettings: readonly Setting[] = [
  g(
    'cacheFeedStaleAfterMs',
    'duration',
    "silence after which a runner's cache feed is stale and placement treats its cache as unknown",
  ),
  g(
    'cachePendingMs',
    'duration',
    "how long a placed call's blocks count as held by its runner before its cache feed reports them (0: off)",
  ),
  g('cacheMaxBlocksPerRunner', 'integer', 'cache blocks the truth index keeps per runner (about 90 bytes each)'),
  g('cacheMaxBlocks', 'integer', 'cache blocks the truth index keeps over every runner (about 90 bytes each)'),
  {
    key: 'tokenizers',
    type: 'string',
    description:
      'directory of Hugging Face tokenizer folders (<dir>/<name>/tokenizer.json), for runners that announce the tokenizer <name>; nothing is downloaded',
    defaultText: "none: only the simulated engine's tokenizer",
  },
];

/** Who may call the gateway: the operator's token and whether client calls need a key. */
export const accessSettings: readonly Setting[] = [
  ...withSecretFile(
    {
      key: 'operatorToken',
      type: 'string',
      secret: true,
      description:
        'token of the operator routes (every change: drains, keys, deployments; and every read); prefer the environment variable or the file (never shown)',
      defaultText: 'made at start-up and written to a file only you can read (its path is logged)',
    },
    'operator tokens, one a line, all accepted (rotation)',
  ),
  ...withSecretFile(
    {
      key: 'viewerToken',
      type: 'string',
      secret: true,
      description:
        'token of the read-only routes (/metrics, /v1/stats, GET of runners, deployments and the queue): what Prometheus and the dashboard need; prefer the environment variable or the file (never shown)',
      defaultText: 'made at start-up and written to a file only you can read, beside the operator token',
    },
    'viewer tokens, one a line, all accepted (rotation)',
  ),
  {
    key: 'requireKeys',
    type: 'boolean',
    description:
      'client calls need a client key, decided at start-up: a gateway whose keys all go refuses every call, never opens',
    defaultText: 'false; true with --keys',
  },
  ...keySettings,
];

/** Where detached calls are kept and where their callbacks may go; not placer or timing settings. */
export const detachedSettings: readonly Setting[] = [
  // Which store to make is the command line's own choice (code passes a store object), so it keeps its default here.
  {
    key: 'store',
    type: 'string',
    default: 'memory',
    secret: 'url',
    description:
      'detached-call store: memory, or redis://[user:password@]host:port[/db] to share calls between gateways (password never shown; prefer the environment variable)',
  },
  ...storeRedisSettings,
  ...withSecretFile(
    {
      key: 'callbackSecret',
      type: 'string',
      secret: true,
      description:
        'whsec_ secret that signs callbacks (Standard Webhooks); prefer --callback-secret-file or the environment variable (never shown)',
      defaultText: 'none: callbacks off',
    },
    'whsec_ callback secrets, one a line, newest first: each delivery is signed with every one (rotation)',
  ),
  {
    key: 'callbackAllow',
    type: 'list',
    description: 'where callbacks may go: origins (https://hooks.example.com) or host patterns (*.example.com)',
    defaultText: 'none',
  },
  {
    key: 'callbackAllowPrivate',
    type: 'boolean',
    libraryDefault: callbackPolicyDefaults.allowPrivate,
    description: 'let callbacks reach loopback and private addresses (off: SSRF guard)',
  },
];

/**
 * The gateway's id: --gateway-id, else a fresh one, chosen here rather than by the gateway so
 * that telemetry, started first, names the same instance.
 */
export async function gatewayIdOf(values: Record<string, unknown>): Promise<string> {
  const { newGatewayId } = await import('../options.ts');
  return (values.gatewayId as string | undefined) ?? newGatewayId();
}

/**
 * A gateway built in this process with `options`, and the telemetry it renders its metrics with,
 * started first under the gateway's id (which `options` must hold, as {@link gatewayOptions} gives it).
 */
export async function cliGateway(
  env: NodeJS.ProcessEnv,
  options: GatewayOptions,
): Promise<{ gw: Gateway; telemetry: CliTelemetry }> {
  const telemetry = await startTelemetry(env, { name: 'sluice-gateway', instanceId: options.gatewayId! });
  const { createGateway } = await import('../server.ts');
  return { gw: createGateway({ ...options, renderMetrics: telemetry.render }), telemetry };
}

/** The gateway options the settings give: only those given, with the placer, store and callbacks made. */
export async function gatewayOptions(values: Record<string, unknown>, logger: Logger): Promise<GatewayOptions> {
  const [
    { loadPlacer },
    { createRedisBatchStore, createStore },
    { createCallbackPolicy, createCallbackSender },
    { readSecretLines },
  ] = await Promise.all([
    import('../../placer/registry.ts'),
    import('../store/index.ts'),
    import('../callbacks/index.ts'),
    import('../access/secrets.ts'),
  ]);
  // Settings that are not gateway options of the same name: made or read below.
  const madeHere = ['placer', 'placerOptions', 'runnerTokenFile'];
  const keys = [...gatewaySettings, ...registrationSettings, ...cacheTruthSettings]
    .map((s) => s.key)
    .filter((key) => !madeHere.includes(key));
  oneOf(values, 'runnerToken', 'runnerTokenFile');
  oneOf(values, 'callbackSecret', 'callbackSecretFile');
  const runnerTokenFile = values.runnerTokenFile as string | undefined;
  const callbackSecretFile = values.callbackSecretFile as string | undefined;
  const operatorTokens = secretLines(values, 'operatorToken', readSecretLines);
  const viewerTokens = secretLines(values, 'viewerToken', readSecretLines);
  // A file may hold the new secret and the old one, newest first, while receivers move over.
  const secret =
    callbackSecretFile === undefined
      ? (values.callbackSecret as string | undefined)
      : readSecretLines('callbackSecretFile', callbackSecretFile);
  const callbacks = secret
    ? createCallbackSender({
        secret,
        policy: createCallbackPolicy({
          allow: (values.callbackAllow as string[] | undefined) ?? [],
          ...(values.callbackAllowPrivate === undefined
            ? {}
            : { allowPrivate: values.callbackAllowPrivate as boolean }),
        }),
        logger,
      })
    : undefined;
  // Made here rather than by the gateway: the reconciler's Redis lease is held under it.
  const gatewayId = await gatewayIdOf(values);
  const placerGiven = values.placer !== undefined || values.placerOptions !== undefined;
  // One clock for the gateway, its placer and its store's TTLs.
  const clock = gatewayDefaults.clock;
  const storeBounds = givenValues(values, ['resultTtl', 'maxStoredBytes']);
  return {
    ...givenValues(values, keys),
    ...(runnerTokenFile === undefined ? {} : { runnerTokens: readSecretLines('runnerTokenFile', runnerTokenFile) }),
    // Without --placer the gateway makes its default placer, on its own clock.
    ...(placerGiven
      ? {
          placer: await loadPlacer(String(values.placer ?? gatewayDefaults.placer), {
            cwd: process.cwd(),
            options: values.placerOptions as Record<string, unknown> | undefined,
            clock,
          }),
        }
      : {}),
    store: createStore(values.store as string, {
      ...storeBounds,
      ...storeRedisOf(values)?.timeouts,
      logger,
      now: () => clock.now(),
    }),
    // Files and batches are kept where detached calls are: a Redis --store shares them too.
    batch: {
      ...batchOptionsOf(values),
      ...(storeRedisOf(values) === undefined
        ? {}
        : {
            store: createRedisBatchStore({
              url: values.store as string,
              ...storeBounds,
              ...storeRedisOf(values)?.timeouts,
              logger,
              now: () => clock.now(),
            }),
          }),
    },
    clock,
    // The bound the store was made with, so the gateway checks it against maxResultBytes as it does
    // for a store it makes itself.
    maxStoredBytes: (storeBounds.maxStoredBytes as number | undefined) ?? storeDefaults.maxStoredBytes,
    ...(callbacks ? { callbacks } : {}),
    ...(operatorTokens === undefined ? {} : { operatorTokens }),
    ...(viewerTokens === undefined ? {} : { viewerTokens }),
    ...givenAs(values, {
      engineBinary: 'engineBinaries',
      engineEnvAllow: 'engineEnvAllow',
      requireKeys: 'requireKeys',
    }),
    ...gatewayDataPlaneOptions(values),
    ...(await clientKeysOptions(values, logger, clock)),
    gatewayId,
    ...(await deploymentsOptions(values, { now: () => clock.now(), logger, gatewayId })),
    logger,
  };
}

/**
 * Reads the runner token file again on SIGHUP, so a token is rotated without a restart; a file
 * that cannot be used then is logged (named, never its content) and the tokens stay as they were.
 * Returns how to stop listening for the signal.
 */
async function reloadRunnerTokensOnHangup(
  path: string | undefined,
  gw: { setRunnerTokens(tokens: readonly string[]): void },
  logger: Logger,
): Promise<() => void> {
  if (path === undefined) return () => {};
  const { readSecretLines } = await import('../access/secrets.ts');
  const reload = (): void => {
    try {
      gw.setRunnerTokens(readSecretLines('runnerTokenFile', path));
    } catch (error) {
      logger.error('runner tokens not reloaded; the previous ones stay', { error: (error as Error).message });
    }
  };
  process.on('SIGHUP', reload);
  return () => process.off('SIGHUP', reload);
}

/** `sluice gateway`. */
export const gateway: Command = {
  summary:
    'Runs the gateway in front of static runners (--runners), runners that register themselves (--runner-token), or both.',
  settings: [
    port(8080),
    host,
    {
      key: 'runners',
      type: 'list',
      description: 'static runner URLs, comma-separated, e.g. http://127.0.0.1:9001,http://127.0.0.1:9002',
      defaultText: 'none: give --runners, --runner-token (or --runner-token-file), or both',
    },
    ...gatewaySettings,
    ...detachedSettings,
    ...registrationSettings,
    ...cacheTruthSettings,
    ...accessSettings,
    ...deploymentSettings,
    ...gatewayDataPlaneSettings,
    ...frontSettings,
    ...batchSettings,
    logLevel,
    logFormat,
  ],
  async run({ values, env, logger }) {
    const options = await gatewayOptions(values, logger);
    const { gw, telemetry } = await cliGateway(env, {
      ...options,
      runners: (values.runners as string[] | undefined) ?? [],
    });
    const stopReloading = await reloadRunnerTokensOnHangup(values.runnerTokenFile as string | undefined, gw, logger);
    const { url, port } = await gw.listen(values.port as number, values.host as string);
    await keepOperatorToken(gw.config, port, env, logger);
    await keepViewerToken(gw.config, port, env, logger);
    reportListening(url);
    return async () => {
      stopReloading();
      await gw.close();
      await telemetry.shutdown();
    };
  },
};
