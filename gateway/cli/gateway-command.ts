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
import { callbackPolicyDefaults } from '../callbacks/options.ts';
import type { Command } from './command.ts';
import { givenValues, host, logLevel, port } from './command.ts';
import { reportListening } from './processes.ts';
import type { Setting } from './settings.ts';
import { startTelemetry } from './telemetry.ts';

const g = gatewayDefaults;

/** Gateway settings shared by `gateway` and `up`. */
export const gatewaySettings: readonly Setting[] = [
  { key: 'placer', type: 'string', libraryDefault: g.placer, description: `${Object.keys(placerDescriptors).join(', ')}, or a path to a module exporting a Placer` },
  { key: 'placerOptions', type: 'json', description: 'options for the placer, e.g. {"loadFactor":1.5} for consistent-hash (docs/placers.md lists each placer\'s)', defaultText: "the placer's defaults" },
  { key: 'placerTimeout', type: 'duration', libraryDefault: placerDefaults.placerTimeout, description: 'how long a sync call may wait for a runner' },
  { key: 'detachedPlacerTimeout', type: 'duration', libraryDefault: placerDefaults.detachedPlacerTimeout, description: 'how long a detached call may wait for a runner' },
  { key: 'retryAllDelay', type: 'duration', libraryDefault: placerDefaults.retryAllDelay, description: 'pause after every runner was tried once' },
  { key: 'callTimeout', type: 'duration', libraryDefault: g.callTimeout, description: 'execution limit of a call once a runner took it' },
  { key: 'maxBodyBytes', type: 'integer', libraryDefault: g.maxBodyBytes, description: 'largest request body accepted, in bytes' },
  { key: 'bodyReadTimeout', type: 'duration', libraryDefault: g.bodyReadTimeout, description: 'longest time a request body may take to arrive' },
  { key: 'bodyIdleTimeout', type: 'duration', libraryDefault: g.bodyIdleTimeout, description: 'longest silence before or between chunks of a request body (408 after)' },
  { key: 'drainTimeout', type: 'duration', libraryDefault: g.drainTimeout, description: 'how long shutdown waits for in-flight calls' },
  { key: 'runnerConnectTimeout', type: 'duration', libraryDefault: g.runnerConnectTimeout, description: 'how long connecting to a runner may take' },
  { key: 'runnerResponseTimeout', type: 'duration', libraryDefault: g.runnerResponseTimeout, description: 'how long a runner may take to acknowledge a call before it is deemed hung and the call goes elsewhere; after that, the longest silence before its answer\'s status line' },
  { key: 'streamIdleTimeout', type: 'duration', libraryDefault: g.streamIdleTimeout, description: 'longest silence between body chunks of a call a runner took; past it the call ends with GW_RUNNER_STALLED' },
  { key: 'statusInterval', type: 'duration', libraryDefault: g.statusInterval, description: 'how often each runner\'s /status is fetched' },
  { key: 'retryAfter', type: 'integer', libraryDefault: g.retryAfter, description: 'seconds sent in Retry-After when no runner took a call' },
  { key: 'maxInFlight', type: 'integer', libraryDefault: g.maxInFlight, description: 'calls at once in the gateway once their body is in; more are refused with 503 GW_OVERLOADED' },
  { key: 'maxUploads', type: 'integer', libraryDefault: g.maxUploads, description: 'request bodies being received at once, apart from --max-in-flight; more are refused with 503 GW_UPLOADS_FULL' },
  { key: 'maxUploadsPerClient', type: 'integer', libraryDefault: g.maxUploadsPerClient, description: 'request bodies being received at once from one client address (IPv6: one /64); more get 429' },
  { key: 'maxConnectionsPerClient', type: 'integer', libraryDefault: g.maxConnectionsPerClient, description: 'open connections per client address (IPv6: one /64); a request on one more gets 429 and the connection closes' },
  { key: 'gatewayId', type: 'string', description: 'this gateway\'s id, owner of the detached calls it runs', defaultText: 'gw- and 6 random hex digits' },
  { key: 'resultTtl', type: 'duration', libraryDefault: g.resultTtl, description: 'how long detached results and Idempotency-Keys are kept' },
  { key: 'maxResultBytes', type: 'integer', libraryDefault: g.maxResultBytes, description: 'largest detached result kept, in bytes; a larger one fails its call' },
  { key: 'maxStoredBytes', type: 'integer', libraryDefault: g.maxStoredBytes, description: 'bytes of detached results the store keeps until their TTL (shared on one Redis); new detached calls get 503 GW_STORE_FULL when one more would not fit' },
  { key: 'executionHeadroom', type: 'duration', libraryDefault: g.executionHeadroom, description: 'added to detached-placer-timeout + call-timeout for a detached call\'s lifetime' },
];

/** Runners that register themselves with the gateway. */
export const registrationSettings: readonly Setting[] = [
  { key: 'runnerToken', type: 'string', secret: true, description: 'shared secret runners present to register (16+ printable ASCII characters, no spaces); prefer the environment variable (never shown)', defaultText: 'none: registration off' },
  { key: 'heartbeatInterval', type: 'duration', libraryDefault: g.heartbeatInterval, description: 'how often registered runners heartbeat' },
  { key: 'unreachableAfterMissed', type: 'integer', libraryDefault: g.unreachableAfterMissed, description: 'missed heartbeats after which a runner is not placed on' },
  { key: 'lostAfter', type: 'duration', libraryDefault: g.lostAfter, description: 'silence after which a registered runner is forgotten' },
];

/** Where detached calls are kept and where their callbacks may go; not placer or timing settings. */
export const detachedSettings: readonly Setting[] = [
  // Which store to make is the command line's own choice (code passes a store object), so it keeps its default here.
  { key: 'store', type: 'string', default: 'memory', secret: 'url', description: 'detached-call store: memory, or redis://[user:password@]host:port[/db] to share calls between gateways (password never shown; prefer the environment variable)' },
  { key: 'callbackSecret', type: 'string', secret: true, description: 'whsec_ secret that signs callbacks (Standard Webhooks); prefer the environment variable (never shown)', defaultText: 'none: callbacks off' },
  { key: 'callbackAllow', type: 'list', description: 'where callbacks may go: origins (https://hooks.example.com) or host patterns (*.example.com)', defaultText: 'none' },
  { key: 'callbackAllowPrivate', type: 'boolean', libraryDefault: callbackPolicyDefaults.allowPrivate, description: 'let callbacks reach loopback and private addresses (off: SSRF guard)' },
];

/**
 * The gateway's id: --gateway-id, else a fresh one, chosen here rather than by the gateway so
 * that telemetry, started first, names the same instance.
 */
export async function gatewayIdOf(values: Record<string, unknown>): Promise<string> {
  const { newGatewayId } = await import('../options.ts');
  return (values.gatewayId as string | undefined) ?? newGatewayId();
}

/** The gateway options the settings give: only those given, with the placer, store and callbacks made. */
export async function gatewayOptions(values: Record<string, unknown>, logger: Logger): Promise<GatewayOptions> {
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
        policy: createCallbackPolicy({
          allow: (values.callbackAllow as string[] | undefined) ?? [],
          ...(values.callbackAllowPrivate === undefined ? {} : { allowPrivate: values.callbackAllowPrivate as boolean }),
        }),
        logger,
      })
    : undefined;
  const placerGiven = values.placer !== undefined || values.placerOptions !== undefined;
  // One clock for the gateway, its placer and its store's TTLs.
  const clock = gatewayDefaults.clock;
  const storeBounds = givenValues(values, ['resultTtl', 'maxStoredBytes']);
  return {
    ...givenValues(values, keys),
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
    store: createStore(values.store as string, { ...storeBounds, logger, now: () => clock.now() }),
    clock,
    // The bound the store was made with, so the gateway checks it against maxResultBytes as it does
    // for a store it makes itself.
    maxStoredBytes: (storeBounds.maxStoredBytes as number | undefined) ?? storeDefaults.maxStoredBytes,
    ...(callbacks ? { callbacks } : {}),
    logger,
  };
}

/** `sluice gateway`. */
export const gateway: Command = {
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
