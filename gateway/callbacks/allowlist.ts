/**
 * The callback allowlist. Two kinds of entry:
 *
 * - an origin, `https://hooks.example.com` or `http://127.0.0.1:8080`: that scheme, host and
 *   port only (a missing port means the scheme's default);
 * - a host, `hooks.example.com`, or a host pattern, `*.example.com` (any subdomain at any depth,
 *   not example.com itself): either scheme, any port. A pattern may also carry a scheme and
 *   port, `https://*.example.com`.
 *
 * Hosts compare after URL normalisation (lowercase, IPv4 in dotted form, no trailing dot), so
 * `http://0x7f.1` cannot slip past an entry for 127.0.0.1 or the other way round. A bare `*`
 * or a pattern over a single label (`*.com`) is refused: callbacks are opt-in per receiver.
 */
import { show } from '../../placer/kernel/index.ts';
import { CallbackConfigError } from './errors.ts';

/** One compiled allowlist entry. */
interface Rule {
  /** `http:` or `https:`; undefined for either. */
  protocol?: string;
  /** URL.port form ('' for the default); undefined for any. */
  port?: string;
  /** Exact hostname, or the suffix (with its leading dot) a subdomain must end with. */
  host: string;
  wildcard: boolean;
}

/** A compiled allowlist. */
export interface Allowlist {
  /** True when `url` matches an entry. */
  allows(url: URL): boolean;
  /** The entries as given, for messages. */
  readonly entries: readonly string[];
}

/**
 * Compiles allowlist entries; an empty list allows nothing.
 * @throws {@link CallbackConfigError} naming the bad entry.
 */
export function compileAllowlist(entries: readonly string[]): Allowlist {
  if (!Array.isArray(entries))
    throw new CallbackConfigError(`allow must be an array of origins or host patterns, got ${show(entries)}`);
  const rules = entries.map(compileRule);
  return Object.freeze({
    entries: Object.freeze([...entries]),
    allows(url: URL): boolean {
      const host = normaliseHost(url.hostname);
      return rules.some(
        (r) =>
          (r.protocol === undefined || r.protocol === url.protocol) &&
          (r.port === undefined || r.port === url.port) &&
          (r.wildcard ? host.endsWith(r.host) && host.length > r.host.length : host === r.host),
      );
    },
  });
}

function compileRule(entry: unknown, index: number): Rule {
  const fail = (why: string): CallbackConfigError =>
    new CallbackConfigError(
      `allow[${index}] ${why}, got ${show(entry)}; use an origin (https://hooks.example.com) or a host pattern (*.example.com)`,
    );
  if (typeof entry !== 'string' || entry.trim() === '') throw fail('must be a non-empty string');
  const text = entry.trim();
  const hasScheme = text.includes('://');
  let url: URL;
  try {
    url = new URL(hasScheme ? text : `http://${text}`);
  } catch (cause) {
    throw new CallbackConfigError(`allow[${index}] is not an origin or host pattern, got ${show(entry)}`, { cause });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw fail('must use http or https');
  if (url.username || url.password) throw fail('must not carry credentials');
  // The URL parser turns an empty path into "/" and drops an empty "?" or "#": test the text too.
  if (url.pathname !== '/' || url.search || url.hash || /[?#]/.test(text))
    throw fail('must not have a path, query or fragment');
  if (!hasScheme && url.port) throw fail('names a port without a scheme');
  let host = normaliseHost(url.hostname);
  if (host === '*') throw fail('would allow every host; list the receivers');
  const wildcard = host.startsWith('*.');
  if (wildcard) host = host.slice(1);
  if (host.includes('*')) throw fail('may only use * as its whole first label');
  if (wildcard && host.split('.').length < 3) throw fail('would allow a whole top-level domain');
  return hasScheme ? { protocol: url.protocol, port: url.port, host, wildcard } : { host, wildcard };
}

function normaliseHost(hostname: string): string {
  // "example.com." is the same DNS name as "example.com"; compare them as one.
  return hostname.endsWith('.') ? hostname.slice(0, -1) : hostname;
}
