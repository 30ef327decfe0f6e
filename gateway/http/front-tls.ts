/**
 * Whether the gateway's front may listen where it is asked to. Clients send their keys and
 * prompts to it; without TLS only a loopback address, which no other machine reaches, is
 * allowed, unless the operator says the network is taken care of (a proxy that terminates TLS).
 */
import { GatewayConfigError } from '../errors.ts';

/** What the check reads of the data plane's settings (gateway/fleet's DataPlaneConfig). */
export interface FrontSecurity {
  /** The front's certificate and key, when it serves TLS. */
  readonly tls: object | undefined;
  readonly allowPlainHttp: boolean;
}

/**
 * Refuses a plain-http listen on an address other than loopback, unless allowPlainHttp.
 * @throws {GatewayConfigError} naming the flags that fix it
 */
export function checkFrontListen(dataPlane: FrontSecurity, host: string): void {
  if (dataPlane.tls || dataPlane.allowPlainHttp || isLoopbackHost(host)) return;
  throw new GatewayConfigError(
    `the gateway would take credentials in clear text on ${host || 'every interface'}: give tls (--tls-cert and --tls-key), listen on 127.0.0.1, or set allowPlainHttp (--tls-terminated-upstream) when a proxy in front terminates TLS`,
  );
}

/** True for an address only this machine reaches: 127.0.0.0/8, ::1, localhost. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127(?:\.\d{1,3}){3}$/.test(host);
}
