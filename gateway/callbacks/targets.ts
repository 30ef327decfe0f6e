/**
 * The callback URL policy: the gateway POSTs to URLs its clients choose, so without a policy
 * any client could make it reach its own metadata service, admin ports or internal network
 * (SSRF). A URL must be http(s), carry no credentials, match the allowlist, and, unless
 * private targets are allowed, neither be nor resolve to a special address (see address.ts).
 * A cloud metadata service (by name or by address, in any spelling) is refused even when
 * private targets are allowed: no receiver lives there.
 *
 * Checking a name and then letting the HTTP client resolve it again leaves a gap: DNS can
 * answer "public" to the check and "127.0.0.1" to the connect (rebinding). So check returns
 * the address it approved, and {@link pinnedLookup} makes the connection use exactly that
 * address. Pinning through the socket's `lookup` (rather than dialling the IP with a Host
 * header) keeps TLS honest: SNI and certificate checks still use the hostname.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { LookupFunction } from 'node:net';
import { show } from '../../placer/kernel/index.ts';
import { classifyAddress, isMetadataHostname } from './address.ts';
import { compileAllowlist } from './allowlist.ts';
import { CallbackConfigError, CallbackRefusedError } from './errors.ts';

/** The policy's defaults (createCallbackPolicy); `--callback-allow-private` shows this one. */
export const callbackPolicyDefaults = Object.freeze({ allowPrivate: false });

/** One address a hostname resolved to. */
export interface ResolvedAddress {
  address: string;
  /** 4 or 6. */
  family: number;
}

/** Resolves a hostname to all its addresses; injected so tests never touch real DNS. */
export type HostLookup = (hostname: string) => Promise<readonly ResolvedAddress[]>;

/** Options for {@link createCallbackPolicy}. */
export interface CallbackPolicyOptions {
  /**
   * Origins (`https://hooks.example.com`) and host patterns (`*.example.com`) callbacks may
   * reach; see allowlist.ts for the matching rules. Empty refuses every callback.
   */
  allow: readonly string[];
  /** Let callbacks reach loopback, private and other special addresses; never a cloud metadata service. @default see callbackPolicyDefaults */
  allowPrivate?: boolean;
  /** @default node:dns/promises lookup with `all: true` */
  lookup?: HostLookup;
}

/** A URL the policy approved, with the address the delivery must connect to. */
export interface CallbackTarget {
  readonly url: URL;
  /** The IP address approved for this URL's host. */
  readonly address: string;
  readonly family: 4 | 6;
}

/** Decides where callbacks may go. */
export interface CallbackPolicy {
  /**
   * Approves `url` and picks the address to connect to.
   * @throws {@link CallbackRefusedError} (`CALLBACK_URL_REFUSED`, 400) naming the URL and the reason.
   */
  check(url: string): Promise<CallbackTarget>;
}

const systemLookup: HostLookup = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

/**
 * Builds the policy from its options, validated up front.
 * @throws {@link CallbackConfigError} for a bad allowlist entry or option.
 */
export function createCallbackPolicy({
  allow,
  allowPrivate = callbackPolicyDefaults.allowPrivate,
  lookup = systemLookup,
}: CallbackPolicyOptions): CallbackPolicy {
  const allowlist = compileAllowlist(allow);
  if (typeof allowPrivate !== 'boolean')
    throw new CallbackConfigError(`allowPrivate must be a boolean, got ${show(allowPrivate)}`);
  if (typeof lookup !== 'function') throw new CallbackConfigError(`lookup must be a function, got ${show(lookup)}`);

  return Object.freeze({
    async check(raw: string): Promise<CallbackTarget> {
      const refuse = (reason: ConstructorParameters<typeof CallbackRefusedError>[0], why: string, cause?: unknown) =>
        new CallbackRefusedError(
          reason,
          `callback URL ${display(raw)} refused: ${why}`,
          cause === undefined ? undefined : { cause },
        );
      let url: URL;
      try {
        url = new URL(raw);
      } catch (cause) {
        throw refuse('invalid-url', 'it is not an absolute URL', cause);
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:')
        throw refuse('scheme', `scheme ${url.protocol.slice(0, -1)} is not http or https`);
      // Credentials in a callback URL would be sent to the receiver and written to logs.
      if (url.username || url.password) throw refuse('userinfo', 'it carries credentials');
      if (!allowlist.allows(url)) {
        throw refuse(
          'not-allowlisted',
          allowlist.entries.length === 0
            ? 'no callback targets are configured'
            : `host ${url.host} is not on the callback allowlist`,
        );
      }
      const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
      if (isMetadataHostname(host)) throw refuse('special-address', `host ${host} is a cloud metadata service`);
      let addresses: readonly ResolvedAddress[];
      if (isIP(host)) {
        addresses = [{ address: host, family: isIP(host) }];
      } else {
        try {
          addresses = await lookup(host);
        } catch (cause) {
          throw refuse('unresolvable', `host ${host} does not resolve`, cause);
        }
      }
      const usable = addresses.filter((a) => isIP(a.address) !== 0);
      if (usable.length === 0 || usable.length !== addresses.length)
        throw refuse('unresolvable', `host ${host} did not resolve to IP addresses`);
      // Every address must pass: an attacker controlling DNS can mix a public and a private answer.
      for (const { address } of usable) {
        const found = classifyAddress(address);
        if (found.metadata === undefined && (allowPrivate || found.range === 'public')) continue;
        const target = address === host ? address : `${host} resolves to ${address}, which`;
        const via = found.via ? ` (${found.via} ${found.ipv4})` : '';
        throw refuse(
          'special-address',
          `${target} is a ${found.range}${via} address${found.metadata === undefined ? '' : `, ${found.metadata}`}`,
        );
      }
      const first = usable[0]!;
      return Object.freeze({ url, address: first.address, family: isIP(first.address) as 4 | 6 });
    },
  });
}

/**
 * A socket `lookup` that answers only the target's hostname, with the approved address, so
 * the connection cannot be steered elsewhere by a second DNS answer. Any other hostname is
 * an error: nothing else should be dialled on this connection.
 */
export function pinnedLookup(target: CallbackTarget): LookupFunction {
  const expected = target.url.hostname;
  return (hostname, options, callback) => {
    if (hostname !== expected) {
      const error: NodeJS.ErrnoException = new Error(`callback connection may only dial ${expected}, not ${hostname}`);
      error.code = 'ENOTFOUND';
      return callback(error, '', 0);
    }
    // With autoSelectFamily (Node 20's default) net asks for every address at once.
    if (options.all) return callback(null, [{ address: target.address, family: target.family }]);
    callback(null, target.address, target.family);
  };
}

function display(raw: unknown): string {
  let text = typeof raw === 'string' ? raw : String(raw);
  try {
    const url = new URL(text);
    if (url.username || url.password) {
      url.username = 'redacted';
      url.password = '';
      text = url.href;
    }
  } catch {
    // Not a URL: shown as given.
  }
  // A client chooses this text and it lands in logs: keep it bounded.
  return show(text.length > 200 ? `${text.slice(0, 200)}...` : text);
}
