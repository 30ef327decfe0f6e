/**
 * Which IP addresses a callback may reach. Written out here rather than taken from a library
 * because the list is the security boundary: every range is visible and tested in one table.
 * Anything that reaches the gateway's own host, its network, or nothing routable is special;
 * IPv6 forms that embed an IPv4 address (mapped, NAT64, 6to4) are judged by that address.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** The kinds of address a callback is refused unless private targets are allowed. */
export type SpecialRange =
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link-local'
  | 'site-local'
  | 'unique-local'
  | 'cgnat'
  | 'multicast'
  | 'reserved';

/** How an IPv6 address carried the IPv4 address it was judged by. */
export type EmbeddingKind = 'ipv4-mapped' | 'nat64' | '6to4';

/** What {@link classifyAddress} found. */
export interface AddressClass {
  /** `public` for an address a callback may reach. */
  range: SpecialRange | 'public';
  /** Set when an IPv6 address was judged by the IPv4 address inside it. */
  via?: EmbeddingKind;
  /** That IPv4 address, dotted. */
  ipv4?: string;
  /**
   * Set when the address is a well-known cloud metadata service (see {@link METADATA_ADDRESSES}):
   * who answers there. Such an address is refused whatever a policy allows.
   */
  metadata?: string;
}

/**
 * The cloud metadata services, by address: they hand out the machine's credentials to whoever
 * asks from inside it, so the gateway must never be made to call them. Matched after parsing,
 * so every spelling of an address (IPv4 in hex, octal or short forms as URL parsers read them,
 * IPv6 with or without zero compression, IPv4 inside an IPv6 address) is the same entry.
 */
export const METADATA_ADDRESSES: ReadonlyMap<string, string> = new Map([
  ['169.254.169.254', 'the instance metadata service of AWS, GCP, Azure, Oracle Cloud, OpenStack and others'],
  ['169.254.170.2', 'the AWS ECS task metadata and credentials endpoint'],
  ['169.254.170.23', 'the AWS EKS pod identity agent'],
  ['169.254.0.23', 'the Tencent Cloud metadata service'],
  ['169.254.42.42', 'the Scaleway metadata service'],
  ['100.100.100.200', 'the Alibaba Cloud metadata service'],
  ['192.0.0.192', 'the Oracle Cloud (classic) metadata service'],
  ['fd00:ec2::254', 'the AWS instance metadata service over IPv6'],
  ['fd00:ec2::23', 'the AWS EKS pod identity agent over IPv6'],
]);

/**
 * Host names of metadata services (lowercase, no trailing dot): a callback to one is refused
 * before any lookup, since inside its cloud it resolves to a {@link METADATA_ADDRESSES} entry.
 */
export const METADATA_HOSTNAMES: ReadonlySet<string> = new Set([
  'metadata.google.internal',
  'metadata.goog',
  'metadata',
  'instance-data',
  'instance-data.ec2.internal',
  'metadata.tencentyun.com',
]);

/** True when `hostname` (as a URL holds it) names a metadata service; see {@link METADATA_HOSTNAMES}. */
export function isMetadataHostname(hostname: string): boolean {
  const name = hostname.toLowerCase();
  return METADATA_HOSTNAMES.has(name.endsWith('.') ? name.slice(0, -1) : name);
}

// [network, prefix length, range], IPv4 as unsigned 32-bit integers.
const V4_RANGES: ReadonlyArray<readonly [string, number, SpecialRange]> = [
  ['0.0.0.0', 8, 'unspecified'], // "this network"; 0.0.0.0 itself reaches the local host on Linux
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'cgnat'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'], // cloud metadata services live here (169.254.169.254)
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'], // IETF protocol assignments
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'reserved'], // benchmarking; some networks use it internally
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'], // includes the broadcast address 255.255.255.255
];
const V4_TABLE = V4_RANGES.map(([net, bits, range]) => ({ net: parseIPv4(net)!, mask: maskOf(bits), range }));

/**
 * Classifies an IP address (IPv4 dotted, or IPv6 with an optional `%zone`).
 * @throws TypeError when `address` is not an IP address.
 */
export function classifyAddress(address: string): AddressClass {
  const found = classifyOnly(address);
  const metadata = METADATA_BY_KEY.get(metadataKey(address, found));
  return metadata === undefined ? found : { ...found, metadata };
}

/**
 * How {@link METADATA_BY_KEY} knows an address: IPv4 dotted, the IPv4 address an IPv6 one
 * carries (mapped, NAT64, 6to4, the deprecated IPv4-compatible form, or SIIT's IPv4-translated
 * `::ffff:0:a.b.c.d`), else its eight groups.
 */
function metadataKey(address: string, found: AddressClass): string {
  const v4 = parseIPv4(address);
  if (v4 !== undefined) return formatIPv4(v4);
  if (found.ipv4 !== undefined) return found.ipv4;
  const g = parseIPv6(address)!;
  const compatible = g.slice(0, 6).every((x) => x === 0);
  const translated = g.slice(0, 4).every((x) => x === 0) && g[4] === 0xffff && g[5] === 0;
  return compatible || translated ? formatIPv4(((g[6]! << 16) | g[7]!) >>> 0) : g.join(':');
}

/** {@link METADATA_ADDRESSES} keyed as classifyAddress looks them up: IPv4 dotted, IPv6 as its eight groups. */
const METADATA_BY_KEY = new Map(
  [...METADATA_ADDRESSES].map(([address, name]) => {
    const v4 = parseIPv4(address);
    return [v4 === undefined ? parseIPv6(address)!.join(':') : formatIPv4(v4), name] as const;
  }),
);

function classifyOnly(address: string): AddressClass {
  const v4 = parseIPv4(address);
  if (v4 !== undefined) return { range: classifyV4(v4) };
  const g = parseIPv6(address);
  if (g === undefined) throw new TypeError(`not an IP address: ${JSON.stringify(address)}`);
  const zeros = (from: number, to: number): boolean => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 8)) return { range: 'unspecified' };
  if (zeros(0, 7) && g[7] === 1) return { range: 'loopback' };
  if (zeros(0, 5) && g[5] === 0xffff) return embedded('ipv4-mapped', g[6]!, g[7]!);
  // IPv4-compatible (::a.b.c.d) was deprecated in 2006; nothing legitimate answers there.
  if (zeros(0, 6)) return { range: 'reserved' };
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return embedded('nat64', g[6]!, g[7]!);
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return { range: 'private' }; // local-use NAT64
  if (g[0] === 0x2002) return embedded('6to4', g[1]!, g[2]!);
  if (g[0] === 0x100 && zeros(1, 4)) return { range: 'reserved' }; // discard-only prefix
  const top = g[0]!;
  if ((top & 0xfe00) === 0xfc00) return { range: 'unique-local' };
  if ((top & 0xffc0) === 0xfe80) return { range: 'link-local' };
  if ((top & 0xffc0) === 0xfec0) return { range: 'site-local' };
  if ((top & 0xff00) === 0xff00) return { range: 'multicast' };
  // Only 2000::/3 is allocated for global unicast; everything else is unassigned or special.
  if ((top & 0xe000) !== 0x2000) return { range: 'reserved' };
  return { range: 'public' };
}

function embedded(via: EmbeddingKind, high: number, low: number): AddressClass {
  const v4 = ((high << 16) | low) >>> 0;
  return { range: classifyV4(v4), via, ipv4: formatIPv4(v4) };
}

function classifyV4(v4: number): SpecialRange | 'public' {
  for (const { net, mask, range } of V4_TABLE) if ((v4 & mask) >>> 0 === net) return range;
  return 'public';
}

function maskOf(bits: number): number {
  return bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
}

function parseIPv4(text: string): number | undefined {
  if (!isIPv4(text)) return undefined;
  return text.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

function formatIPv4(v4: number): string {
  return [v4 >>> 24, (v4 >>> 16) & 0xff, (v4 >>> 8) & 0xff, v4 & 0xff].join('.');
}

/** Eight 16-bit groups, or undefined when `text` is not IPv6. */
function parseIPv6(text: string): number[] | undefined {
  // A zone (fe80::1%eth0) picks an interface, not an address; the range is in what precedes it.
  const address = text.split('%', 1)[0]!.toLowerCase();
  if (!isIPv6(address)) return undefined;
  let head = address;
  const tail: number[] = [];
  const lastColon = address.lastIndexOf(':');
  if (address.includes('.', lastColon)) {
    const v4 = parseIPv4(address.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    tail.push(v4 >>> 16, v4 & 0xffff);
    // Keep a "::" that ends the head; drop the single ":" that only separated the IPv4 part.
    head = address.slice(0, address.endsWith('::', lastColon + 1) ? lastColon + 1 : lastColon);
  }
  const groups = (part: string): number[] => (part === '' ? [] : part.split(':').map((h) => parseInt(h, 16)));
  const gap = head.indexOf('::');
  if (gap < 0) return [...groups(head), ...tail];
  const before = groups(head.slice(0, gap));
  const after = [...groups(head.slice(gap + 2)), ...tail];
  return [...before, ...new Array<number>(8 - before.length - after.length).fill(0), ...after];
}

/** A compiled list of CIDR networks (`10.0.0.0/8`, `fd00::/8`). */
export interface NetworkList {
  /** True when `address` (an IP literal) lies in one of the networks; an IPv4-mapped IPv6 address counts as its IPv4 address. */
  contains(address: string): boolean;
  /** The networks as given, for messages. */
  readonly entries: readonly string[];
}

/** One network: the address as 32-bit (IPv4) or eight 16-bit groups (IPv6), and its prefix length. */
type Network = { v4: number; bits: number } | { v6: number[]; bits: number };

/**
 * Compiles CIDR networks. A bare address is a network of one (/32 or /128). A prefix of 0 is
 * refused: a list that allows every address is no policy, and would let in the metadata address.
 * @throws TypeError naming the bad entry, `${option}[i]`.
 */
export function compileNetworks(entries: readonly string[], option = 'networks'): NetworkList {
  if (!Array.isArray(entries))
    throw new TypeError(`${option} must be a list of CIDR networks, got ${JSON.stringify(entries)}`);
  const networks = entries.map((entry, i) => compileNetwork(entry, `${option}[${i}]`));
  return Object.freeze({
    entries: Object.freeze([...entries]),
    contains(address: string): boolean {
      const v4 = asIPv4(address);
      if (v4 !== undefined) return networks.some((n) => 'v4' in n && (v4 & maskOf(n.bits)) >>> 0 === n.v4);
      const v6 = parseIPv6(address);
      return v6 !== undefined && networks.some((n) => 'v6' in n && v6InNetwork(v6, n.v6, n.bits));
    },
  });
}

/** `address` as an unsigned IPv4 integer: dotted, or carried in an IPv4-mapped IPv6 address. */
function asIPv4(address: string): number | undefined {
  const v4 = parseIPv4(address);
  if (v4 !== undefined) return v4;
  const g = parseIPv6(address);
  if (g === undefined || !g.slice(0, 5).every((x) => x === 0) || g[5] !== 0xffff) return undefined;
  return ((g[6]! << 16) | g[7]!) >>> 0;
}

function compileNetwork(entry: unknown, where: string): Network {
  const fail = (why: string): TypeError =>
    new TypeError(`${where} ${why}, got ${JSON.stringify(entry)}; use a CIDR network such as 10.0.0.0/8 or fd00::/8`);
  if (typeof entry !== 'string' || entry.trim() === '') throw fail('must be a non-empty string');
  const [address = '', prefix, extra] = entry.trim().split('/');
  if (extra !== undefined) throw fail('is not a CIDR network');
  const v4 = parseIPv4(address);
  const v6 = v4 === undefined && !address.includes('%') ? parseIPv6(address) : undefined;
  if (v4 === undefined && v6 === undefined) throw fail('does not start with an IP address');
  const max = v4 === undefined ? 128 : 32;
  if (prefix !== undefined && !/^\d{1,3}$/.test(prefix)) throw fail('has a prefix length that is not a number');
  const bits = prefix === undefined ? max : Number(prefix);
  if (bits > max) throw fail(`has a prefix length over ${max}`);
  if (bits === 0) throw fail('would allow every address; list the networks');
  if (v4 !== undefined) {
    if ((v4 & maskOf(bits)) >>> 0 !== v4) throw fail('has host bits set past its prefix length');
    return { v4, bits };
  }
  if (v6!.some((group, i) => (group & ~groupMask(bits - i * 16) & 0xffff) !== 0))
    throw fail('has host bits set past its prefix length');
  return { v6: v6!, bits };
}

/** The mask of a 16-bit group's first `bits` bits (0 to 16). */
function groupMask(bits: number): number {
  return bits <= 0 ? 0 : bits >= 16 ? 0xffff : (0xffff << (16 - bits)) & 0xffff;
}

function v6InNetwork(address: readonly number[], network: readonly number[], bits: number): boolean {
  for (let i = 0; i < 8 && i * 16 < bits; i++) {
    const mask = groupMask(bits - i * 16);
    if ((address[i]! & mask) !== (network[i]! & mask)) return false;
  }
  return true;
}

/**
 * True when `a` and `b` are one IP address written two ways (`::1` and `0:0::1`, `127.0.0.1`
 * and `::ffff:127.0.0.1`); false when either is not an IP address.
 */
export function sameAddress(a: string, b: string): boolean {
  const canonical = (text: string): string | undefined => {
    const v4 = asIPv4(text);
    if (v4 !== undefined) return formatIPv4(v4);
    return parseIPv6(text)?.join(':');
  };
  const left = canonical(a);
  return left !== undefined && left === canonical(b);
}
