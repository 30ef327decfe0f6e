/**
 * The runner process, start to stop: reads the node's GPUs, starts the engine, listens, joins
 * its gateways, and on close drains (waiting on its slots to empty, bounded by the drain
 * timeout), leaves its gateways and stops the engine. A runner given neither engine nor profile
 * starts with none and hosts the engines gateways order (hosting.ts). The rooms it builds on: routes.ts (the
 * HTTP face), admission.ts (take a call or answer busy), status.ts (GET /status and the
 * heartbeat payload), gateways.ts (registration with every gateway, and the cache feed to each:
 * kv-events.ts, cache-mirror.ts, cache-forwarder.ts), call.ts (one call's path).
 */
import type { ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { ServerType } from '@hono/node-server';
import type { Logger } from '../placer/kernel/index.ts';
import { lingerEarlyAnswers } from '../placer/kernel/index.ts';
import { answerBusy, notReadyReason } from './admission.ts';
import type { BusyReason } from './admission.ts';
import { callBodyRead, serveCall } from './call.ts';
import { CallGuard } from './call-guard.ts';
import type { CallPathContext } from './call.ts';
import { RunnerEngine } from './engine.ts';
import { RunnerConfigError } from './errors.ts';
import type { ProfileFacts } from './engines/profile.ts';
import { joinGateways } from './gateways.ts';
import type { GatewayLink } from './gateways.ts';
import { Hosting } from './hosting.ts';
import { launchableKinds } from './capacity.ts';
import { createRunnerMetrics } from './metrics.ts';
import { defaultProfileFacts } from './engines/profile.ts';
import { readGpuInventory } from './inventory.ts';
import type { GpuInventory } from './protocol/index.ts';
import { advertisedUrl, resolveRunnerOptions } from './options.ts';
import type { RunnerConfig, RunnerOptions } from './options.ts';
import type { GatewayRegistration } from './registration.ts';
import type { RegistrationTimers } from './registration.ts';
import { runnerRoutes } from './routes.ts';
import { Slots, callsFinished } from './slots.ts';
import { StallWatch } from './stall-watch.ts';
import type { RunnerStatus } from './protocol/index.ts';
import { readStatus } from './status.ts';
import type { CallCounts } from './status.ts';
import { VERSION } from './protocol/version.ts';

export type { BusyReason } from './admission.ts';
/** The status page's type lives with the wire (protocol/status.ts); re-exported for embedders. */
export type { RunnerStatus } from './protocol/index.ts';

/** Things a test (or an embedder) may supply instead of asking the machine. */
export interface RunnerEnvironment {
  /** @default runs nvidia-smi */
  readInventory?: () => Promise<GpuInventory>;
  /** @default searches PATH, binds the port, and lists GPUs from the inventory */
  profileFacts?: ProfileFacts;
  /** Draws the jitter of gateway retry backoff. @default Math.random */
  random?: () => number;
  /** Schedules registrations and heartbeats. @default the process's timers */
  timers?: RegistrationTimers;
  /** The wall clock signed calls' deadlines are read on, ms since the epoch. @default Date.now */
  now?: () => number;
}

/** A running runner. */
export interface RunnerServer {
  readonly id: string;
  readonly config: RunnerConfig;
  /**
   * Reads the GPU inventory, validates and launches the engine when there is a profile (a bad
   * profile rejects here, before anything is launched), starts probing it, and listens.
   */
  listen(port?: number, host?: string): Promise<{ url: string; port: number; host: string }>;
  /**
   * Drains and stops: answers busy to new calls, keeps heartbeating gateways as `draining`
   * while running calls finish (up to `drainTimeout` ms, default the option), deregisters from
   * every gateway, then stops the engine it launched. A drain a gateway asks for runs this too.
   */
  close(options?: { drainTimeout?: number }): Promise<void>;
  /** Resolves once the runner has stopped, whoever asked: the embedder's cue to exit after a gateway's drain. */
  readonly closed: Promise<void>;
  /** Kills a launched engine at once; for a process 'exit' hook. */
  killEngine(): void;
  status(): RunnerStatus;
}

/** Builds a runner; nothing listens or launches until {@link RunnerServer.listen}. */
export function createRunner(options: RunnerOptions, environment: RunnerEnvironment = {}): RunnerServer {
  const config = resolveRunnerOptions(options);
  const log = config.logger.child({ runner: config.id });
  const slots = new Slots(config.slots);
  const engine = new RunnerEngine(config, log);
  const counts: CallCounts = { served: 0, rejected: 0, failed: 0, unauthorized: 0 };
  let gpus: GpuInventory = { gpus: [], source: 'none', reason: 'not read yet' };
  let draining = false;
  let server: ServerType | undefined;
  let closing: Promise<void> | undefined;
  let registrations: GatewayRegistration[] = [];
  let links: GatewayLink[] = [];
  let markClosed!: () => void;
  const closed = new Promise<void>((resolve) => (markClosed = resolve));

  let engineKinds: readonly string[] = [];
  // An on-demand runner's engine comes and goes with orders; every change reaches the gateways at once.
  const hosting = config.orders
    ? new Hosting({
        engine,
        slots,
        drainTimeout: config.drainTimeout,
        inventory: () => gpus,
        facts: () => environment.profileFacts ?? defaultProfileFacts(gpus),
        policy: config.launchPolicy,
        changed: () => {
          for (const r of registrations) r.beatNow();
        },
        logger: log,
        ...(environment.now ? { now: environment.now } : {}),
      })
    : undefined;
  const status = (): RunnerStatus =>
    readStatus({
      config,
      engine,
      slots,
      counts,
      draining: () => draining,
      gpus: () => gpus,
      engineKinds: () => engineKinds,
      hosted: () => hosting?.report(),
    });
  const guard = new CallGuard({
    secrets: config.callSecrets,
    skew: config.callClockSkew,
    runnerId: config.id,
    log,
    refused: () => counts.unauthorized++,
    ...(environment.now ? { now: environment.now } : {}),
  });
  const metrics = createRunnerMetrics({
    id: config.id,
    counts,
    admitted: () => slots.acquired,
    slots: () => slots,
    engine: () => engine.status(),
    cacheFeeds: () => links.flatMap((l) => (l.forwarder ? [{ gateway: l.gateway, ...l.forwarder.counts }] : [])),
  });
  const busy = (res: ServerResponse, reason: BusyReason): void => {
    counts.rejected++;
    metrics.busy(reason);
    // Nothing ran: the gateway may offer this call here again under the same id.
    guard.forget(res);
    answerBusy(res, config.id, reason);
  };

  const stallWatch = new StallWatch();
  const callPath: CallPathContext = {
    config,
    bodyRead: callBodyRead(config),
    engine,
    slots,
    log,
    counts,
    draining: () => draining,
    stalled: () => stallWatch.stalled(),
    busy,
    ...(guard.enabled
      ? { verify: (_req, res, body) => guard.verify(res, body), abandoned: (res) => guard.forget(res) }
      : {}),
  };
  const app = runnerRoutes({
    status,
    notReady: () => notReadyReason({ draining: () => draining, engine }),
    metrics: () => metrics.render(),
    // A call without a gateway's valid signature is refused before it takes a slot or a byte of its body is read.
    serveCall: async (req, res) => (guard.admit(req, res) ? serveCall(callPath, req, res) : undefined),
  });

  const runner: RunnerServer = {
    id: config.id,
    config,
    closed,
    status,
    killEngine: () => engine.killSync(),
    async listen(port = 0, host = '127.0.0.1') {
      // Refused before the engine launches: a gateway could never call a wildcard address.
      advertisedUrl(config, host, port);
      checkCallCredential(config, host, log);
      try {
        gpus = await (environment.readInventory ?? readGpuInventory)();
      } catch (error) {
        // A broken nvidia-smi should not keep a runner in front of an external engine down;
        // a profile that asks for GPUs is then refused as this node having none, and this
        // warning says why.
        log.warn('gpu inventory failed', { error: error as Error });
        gpus = { gpus: [], source: 'none', reason: (error as Error).message };
      }
      // Once, by PATH lookups: what this node could launch, advertised to gateways.
      const facts = environment.profileFacts ?? defaultProfileFacts(gpus);
      engineKinds = await launchableKinds((name) => facts.findBinary(name));
      await engine.start(gpus, environment.profileFacts);
      stallWatch.start();
      const { tls } = config;
      const listening = await new Promise<AddressInfo>((resolve, reject) => {
        const s = tls
          ? serve(
              {
                fetch: app.fetch,
                port,
                hostname: host,
                createServer: createHttpsServer,
                // Mutual TLS: a connection without a client certificate signed by the CA ends in the handshake.
                serverOptions: {
                  cert: tls.cert,
                  key: tls.key,
                  ca: tls.ca,
                  requestCert: true,
                  rejectUnauthorized: true,
                },
              },
              (info) => resolve(info),
            )
          : serve({ fetch: app.fetch, port, hostname: host }, (info) => resolve(info));
        s.once('error', reject);
        server = s;
      });
      // A busy, 401 or 413 answer goes before the call's body is read: the rest is read and
      // discarded within bounds before the connection closes, so the gateway reads the answer.
      lingerEarlyAnswers(server!, {
        time: config.lingerTime,
        idle: config.lingerIdleTimeout,
        maxBytes: config.lingerMaxBytes,
        onEnd: (outcome) => log.debug('lingering close ended', { ...outcome }),
      });
      if (tls) {
        server!.on('tlsClientError', (error: Error, socket: { remoteAddress?: string }) => {
          counts.unauthorized++;
          log.debug('connection refused: no valid client certificate', { remote: socket.remoteAddress, error });
        });
      }
      // Outlive the gateway's idle keep-alive (30 s) so it never writes into a socket we are closing.
      const http = server as unknown as { keepAliveTimeout: number; headersTimeout: number };
      http.keepAliveTimeout = 65_000;
      http.headersTimeout = 66_000;
      const url = `${tls ? 'https' : 'http'}://${host}:${listening.port}`;
      log.info('runner listening', {
        url,
        engine: engine.origin,
        kind: config.engineKind,
        slots: slots.total,
        gpus: gpus.gpus.length,
        engineKinds,
        version: VERSION,
      });
      if (hosting) {
        log.info('runner waits for engine orders', {
          gateways: config.gateways.map((g) => g.origin),
          freeGpus: gpus.gpus.length,
          engineKinds,
        });
        if (config.gateways.length === 0)
          log.warn('runner takes engine orders but has no gateway to take them from; give gateways (--gateway)', {});
      }
      const advertised = advertisedUrl(config, host, listening.port);
      // An engine behind a URL tells its cache only when the runner was given its event endpoint.
      const behindUrl = config.engineUrl !== undefined && !config.profile;
      const mirror = behindUrl && config.engineKvEvents === undefined ? undefined : engine.cacheMirror;
      links = joinGateways(
        {
          config,
          advertised,
          status,
          log,
          environment,
          onDrainRequested: () =>
            void runner.close().catch((error: unknown) => log.error('drain failed', { error: error as Error })),
          // A runner that drains takes no new engine: close() stops the hosted one itself.
          ...(hosting
            ? { onHostOrder: (host, answered) => (draining ? undefined : hosting.order(host, answered)) }
            : {}),
          cache: () => engine.cacheAnnouncement(),
        },
        mirror,
      );
      registrations = links.map((l) => l.registration);
      return { url, port: listening.port, host };
    },
    close(options = {}) {
      closing ??= (async () => {
        draining = true;
        engine.drain();
        // Gateways learn of the drain now rather than at the next tick, and stop placing here.
        for (const r of registrations) r.beatNow();
        const drainTimeout = options.drainTimeout ?? config.drainTimeout;
        if (server) log.info('runner draining', { inFlight: slots.inUse, drainTimeout });
        await callsFinished(slots, drainTimeout);
        if (slots.inUse > 0) log.warn('drain timeout, aborting calls', { inFlight: slots.inUse });
        await Promise.all(links.map((l) => l.forwarder?.stop()));
        await Promise.all(registrations.map((r) => r.deregister()));
        await new Promise<void>((resolve) => {
          if (!server) return resolve();
          server.close(() => resolve());
          (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
        });
        // The runner's drain above already waited for calls: the hosted engine stops at once.
        await hosting?.close(0);
        await engine.close();
        stallWatch.stop();
        await metrics.shutdown();
        if (server) log.info('runner stopped', {});
      })().finally(markClosed);
      return closing;
    },
  };
  return runner;
}

/**
 * Whether this runner may serve calls that carry no credential when it listens on `host`: a call
 * secret or mutual TLS is a credential; without either, only a loopback listener, which no other
 * machine reaches, serves them (with a warning), unless allowUnsignedCalls says so.
 * @throws {RunnerConfigError} on any other address without either
 */
function checkCallCredential(config: RunnerConfig, host: string, log: Logger): void {
  if (config.callSecrets.length > 0 || config.tls) return;
  if (config.allowUnsignedCalls) {
    log.warn('runner serves calls without a credential: anyone who reaches its port can spend its engine', {
      host,
      allowUnsignedCalls: true,
    });
    return;
  }
  if (!isLoopback(host)) {
    throw new RunnerConfigError(
      `the runner would serve anyone who reaches ${host}: give callSecret (--call-secret, shared with the gateways) or tls (--tls-cert, --tls-key, --tls-ca), listen on 127.0.0.1, or set allowUnsignedCalls (--allow-unsigned-calls)`,
    );
  }
  log.warn('runner serves calls without a credential: no callSecret nor tls; any process on this machine can call it', {
    host,
  });
}

/** True for an address only this machine reaches. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(host);
}
