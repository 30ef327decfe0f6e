/**
 * A runner's membership in its gateways: one {@link GatewayRegistration} per configured gateway,
 * each registering and then heartbeating the runner's status (runner/registration.ts), and one
 * {@link CacheForwarder} per gateway carrying its engine's cache truth (runner/cache-forwarder.ts).
 */
import type { Logger } from '../placer/kernel/index.ts';
import { CacheForwarder } from './cache-forwarder.ts';
import type { CacheMirror } from './cache-mirror.ts';
import type { RunnerConfig } from './options.ts';
import { GatewayRegistration, registrationDefaults, reportedLoad, systemTimers } from './registration.ts';
import type { RegistrationTimers } from './registration.ts';
import type { CacheAnnouncement, EngineOrder, HostedEngine, RunnerStatus } from './protocol/index.ts';

/** What the registrations need from their runner. */
export interface Membership {
  config: RunnerConfig;
  /** The URL gateways call this runner at. */
  advertised: string;
  status(): RunnerStatus;
  log: Logger;
  /** Test seams: the backoff's jitter and the scheduling timers. */
  environment: { random?: () => number; timers?: RegistrationTimers };
  /** Runs when a gateway asks this runner to drain. */
  onDrainRequested(): void;
  /** Takes the engine orders gateways send; absent for a runner that takes none. */
  onHostOrder?: (host: EngineOrder | null, answered: HostedEngine | undefined) => void;
  /** How gateways name the engine's cache blocks now; undefined while they cannot. @default never announced */
  cache?: () => CacheAnnouncement | undefined;
}

/** A runner's ties to one gateway. */
export interface GatewayLink {
  /** The gateway's origin, as metrics and logs name it. */
  readonly gateway: string;
  readonly registration: GatewayRegistration;
  /** Absent without a mirror to forward. */
  readonly forwarder: CacheForwarder | undefined;
}

/**
 * Registers with every configured gateway and keeps heartbeating each; warns when a loopback
 * URL is advertised to a gateway on another host, which would then call itself.
 */
export function registerWithGateways(m: Membership): GatewayRegistration[] {
  return joinGateways(m, undefined).map((link) => link.registration);
}

/**
 * Registers with every configured gateway, as {@link registerWithGateways}, and forwards the
 * engine's cache `mirror` to each while the announcement says the engine's events are followed.
 */
export function joinGateways(m: Membership, mirror: CacheMirror | undefined): GatewayLink[] {
  const { config, advertised, log, environment } = m;
  const loopback = (h: string) => h === 'localhost' || h.startsWith('127.') || h === '[::1]';
  for (const g of config.gateways) {
    if (loopback(new URL(advertised).hostname) && !loopback(g.hostname))
      log.warn('advertising a loopback url to a remote gateway; set advertiseUrl', {
        url: advertised,
        gateway: g.origin,
      });
  }
  return config.gateways.map((gateway) => {
    const registration = new GatewayRegistration({
      gateway,
      token: config.runnerToken ?? '',
      url: advertised,
      status: m.status,
      heartbeatInterval: config.heartbeatInterval,
      // Three missed scrapes: the engine's metrics are failing, not merely between reads.
      loadStaleAfter: 3 * config.loadInterval,
      onDrainRequested: m.onDrainRequested,
      ...(m.onHostOrder ? { onHostOrder: m.onHostOrder } : {}),
      logger: log,
      ...(environment.random ? { random: environment.random } : {}),
      ...(environment.timers ? { timers: environment.timers } : {}),
      ...(config.tls ? { ca: config.tls.ca } : {}),
      ...(m.cache ? { cache: m.cache } : {}),
    });
    registration.start();
    if (mirror === undefined) return { gateway: gateway.origin, registration, forwarder: undefined };
    const forwarder = new CacheForwarder({
      gateway,
      token: config.runnerToken ?? '',
      runnerId: config.id,
      mirror,
      active: () => m.cache?.()?.events === true,
      interval: config.cacheFeedInterval,
      load: () => reportedLoad(m.status(), 3 * config.loadInterval),
      keepAlive: () => registration.interval,
      requestTimeout: registrationDefaults.requestTimeout,
      timers: environment.timers ?? systemTimers,
      now: Date.now,
      logger: log,
      ...(config.tls ? { ca: config.tls.ca } : {}),
    });
    mirror.listen(forwarder);
    forwarder.start();
    return { gateway: gateway.origin, registration, forwarder };
  });
}
