/**
 * A runner's membership in its gateways: one {@link GatewayRegistration} per configured gateway,
 * each registering and then heartbeating the runner's status (runner/registration.ts).
 */
import type { Logger } from '../placer/kernel/index.ts';
import type { RunnerConfig } from './options.ts';
import { GatewayRegistration } from './registration.ts';
import type { RegistrationTimers } from './registration.ts';
import type { EngineOrder, HostedEngine, RunnerStatus } from './protocol/index.ts';

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
}

/**
 * Registers with every configured gateway and keeps heartbeating each; warns when a loopback
 * URL is advertised to a gateway on another host, which would then call itself.
 */
export function registerWithGateways(m: Membership): GatewayRegistration[] {
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
    });
    registration.start();
    return registration;
  });
}
