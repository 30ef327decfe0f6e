/**
 * Which URLs a runner may register. The gateway sends users' prompts and headers to every
 * runner in its pool, so a registration is a request to receive them: a holder of the runner
 * token must not be able to point the gateway at its own host's services, the cloud metadata
 * address, or the gateway itself (a loop). The ranges are the callbacks' (callbacks/address.ts),
 * judged from this side.
 *
 * Two refusals hold whatever `--runner-networks` lists: a cloud metadata service, in any
 * spelling (callbacks/address.ts knows them), and port 0, which nothing listens on.
 *
 * Hostnames are refused: the URL must name an IP address. A name checked here could resolve to
 * another address when the gateway connects (DNS rebinding), and a runner always knows the
 * address it listens on (`--advertise-url`).
 */
import { networkInterfaces } from 'node:os';
import { isIP } from 'node:net';
import { classifyAddress, compileNetworks, sameAddress } from '../callbacks/index.ts';
import type { NetworkList, SpecialRange } from '../callbacks/index.ts';
import { GatewayConfigError, InvalidRegistrationError } from '../errors.ts';

/** Ranges a registered runner may not be in unless a network of `--runner-networks` holds it. */
const REFUSED_RANGES: ReadonlySet<SpecialRange | 'public'> = new Set([
  'unspecified',
  'loopback',
  'link-local',
  'multicast',
  'reserved',
]);

/** Options for {@link createRunnerAddressPolicy}. */
export interface RunnerAddressPolicyOptions {
  /**
   * CIDR networks registered runners must be in (`--runner-networks`). Empty: any address but
   * the unspecified, loopback, link-local, multicast and reserved ranges. A network that holds
   * one of those ranges allows it; no network allows a cloud metadata address or port 0.
   */
  networks?: readonly string[];
  /** This machine's interface addresses, read at each check. @default from os.networkInterfaces() */
  localAddresses?: () => readonly string[];
}

/** Decides whether the gateway may call a registered runner's URL. */
export interface RunnerAddressPolicy {
  /**
   * Refuses a URL the gateway may not call.
   * @throws {@link InvalidRegistrationError} naming the field and why.
   */
  check(url: URL): void;
  /** Records one of this gateway's listeners: a runner URL reaching it is refused, whatever the networks allow. */
  addListener(address: string, port: number): void;
  /** The networks as given, for the start-up log. */
  readonly networks: readonly string[];
}

const systemAddresses = (): string[] =>
  Object.values(networkInterfaces())
    .flat()
    .map((i) => i?.address)
    .filter((a): a is string => typeof a === 'string');

/**
 * Builds the policy, its networks checked up front.
 * @throws {@link GatewayConfigError} naming the bad network.
 */
export function createRunnerAddressPolicy({
  networks = [],
  localAddresses = systemAddresses,
}: RunnerAddressPolicyOptions = {}): RunnerAddressPolicy {
  let allowed: NetworkList;
  try {
    allowed = compileNetworks(networks, 'runnerNetworks');
  } catch (error) {
    throw new GatewayConfigError((error as Error).message);
  }
  const listeners: Array<{ address: string; port: number }> = [];
  const refuse = (why: string): InvalidRegistrationError =>
    new InvalidRegistrationError(`registration url refused: ${why}`);

  /** True when a connection to `address`:`port` would reach one of this gateway's listeners. */
  const isOwnListener = (address: string, port: number): boolean =>
    listeners.some((l) => {
      if (l.port !== port) return false;
      if (sameAddress(l.address, address)) return true;
      // A wildcard listener answers on every address of this machine (on both families, for ::).
      if (classifyAddress(l.address).range !== 'unspecified') return false;
      const range = classifyAddress(address).range;
      return (
        range === 'loopback' || range === 'unspecified' || localAddresses().some((local) => sameAddress(local, address))
      );
    });

  return Object.freeze({
    networks: allowed.entries,
    addListener(address: string, port: number): void {
      listeners.push({ address, port });
    },
    check(url: URL): void {
      const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
      if (isIP(host) === 0) {
        throw refuse(
          `the host must be an IP address, got the name ${JSON.stringify(host)}; a name could resolve elsewhere by the time the gateway calls it (advertise the runner's address)`,
        );
      }
      const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
      if (port === 0)
        throw refuse(`port 0 in ${url.host}: nothing listens on port 0; advertise the port the runner listens on`);
      if (isOwnListener(host, port)) throw refuse(`${url.host} is this gateway's own listener`);
      const found = classifyAddress(host);
      const via = found.via ? ` (${found.via} ${found.ipv4})` : '';
      if (allowed.entries.length > 0 && !allowed.contains(host))
        throw refuse(`${host}${via} is not in --runner-networks (${allowed.entries.join(', ')})`);
      if (found.metadata !== undefined)
        throw refuse(
          `${host} is a ${found.range}${via} address, ${found.metadata}; no network of --runner-networks allows it`,
        );
      if (allowed.entries.length > 0) return;
      if (REFUSED_RANGES.has(found.range))
        throw refuse(
          `${host} is a ${found.range}${via} address; list a network holding it in --runner-networks to allow it`,
        );
    },
  });
}
