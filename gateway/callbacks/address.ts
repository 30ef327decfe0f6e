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
  for (const { net, mask, range } of V4_TABLE) if (((v4 & mask) >>> 0) === net) return range;
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
