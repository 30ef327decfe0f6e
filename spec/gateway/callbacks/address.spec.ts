/**
 * The address table behind the SSRF policy: every special range, its edges, and the IPv6
 * forms that smuggle an IPv4 address; the CIDR networks registration's policy allows.
 */
import { describe, expect, it } from 'vitest';
import { classifyAddress, compileNetworks, sameAddress } from '../../../gateway/callbacks/index.ts';
import type { AddressClass } from '../../../gateway/callbacks/index.ts';

const table: Array<[string, AddressClass]> = [
  // IPv4
  ['0.0.0.0', { range: 'unspecified' }],
  ['0.255.255.255', { range: 'unspecified' }],
  ['10.0.0.1', { range: 'private' }],
  ['10.255.255.255', { range: 'private' }],
  ['100.63.255.255', { range: 'public' }],
  ['100.64.0.1', { range: 'cgnat' }],
  ['100.127.255.255', { range: 'cgnat' }],
  ['100.128.0.0', { range: 'public' }],
  ['127.0.0.1', { range: 'loopback' }],
  ['127.255.255.254', { range: 'loopback' }],
  [
    '169.254.169.254',
    {
      range: 'link-local',
      metadata: 'the instance metadata service of AWS, GCP, Azure, Oracle Cloud, OpenStack and others',
    },
  ],
  ['172.15.255.255', { range: 'public' }],
  ['172.16.0.1', { range: 'private' }],
  ['172.31.255.255', { range: 'private' }],
  ['172.32.0.0', { range: 'public' }],
  ['192.0.0.8', { range: 'reserved' }],
  ['192.168.1.1', { range: 'private' }],
  ['198.18.0.1', { range: 'reserved' }],
  ['224.0.0.1', { range: 'multicast' }],
  ['239.255.255.250', { range: 'multicast' }],
  ['240.0.0.1', { range: 'reserved' }],
  ['255.255.255.255', { range: 'reserved' }],
  ['8.8.8.8', { range: 'public' }],
  ['93.184.215.14', { range: 'public' }],
  // IPv6
  ['::', { range: 'unspecified' }],
  ['::1', { range: 'loopback' }],
  ['0:0:0:0:0:0:0:1', { range: 'loopback' }],
  ['fe80::1', { range: 'link-local' }],
  ['fe80::1%eth0', { range: 'link-local' }],
  ['febf::1', { range: 'link-local' }],
  ['fec0::1', { range: 'site-local' }],
  ['fc00::', { range: 'unique-local' }],
  ['fd12:3456:789a::1', { range: 'unique-local' }],
  ['ff02::1', { range: 'multicast' }],
  ['::ffff:10.0.0.1', { range: 'private', via: 'ipv4-mapped', ipv4: '10.0.0.1' }],
  ['::ffff:a00:1', { range: 'private', via: 'ipv4-mapped', ipv4: '10.0.0.1' }],
  ['::ffff:127.0.0.1', { range: 'loopback', via: 'ipv4-mapped', ipv4: '127.0.0.1' }],
  [
    '::ffff:169.254.169.254',
    {
      range: 'link-local',
      via: 'ipv4-mapped',
      ipv4: '169.254.169.254',
      metadata: 'the instance metadata service of AWS, GCP, Azure, Oracle Cloud, OpenStack and others',
    },
  ],
  ['::ffff:8.8.8.8', { range: 'public', via: 'ipv4-mapped', ipv4: '8.8.8.8' }],
  ['::10.0.0.1', { range: 'reserved' }],
  ['64:ff9b::10.0.0.1', { range: 'private', via: 'nat64', ipv4: '10.0.0.1' }],
  ['64:ff9b::8.8.8.8', { range: 'public', via: 'nat64', ipv4: '8.8.8.8' }],
  ['64:ff9b:1::1', { range: 'private' }],
  ['2002:7f00:1::', { range: 'loopback', via: '6to4', ipv4: '127.0.0.1' }],
  ['2002:808:808::1', { range: 'public', via: '6to4', ipv4: '8.8.8.8' }],
  ['100::1', { range: 'reserved' }],
  ['4000::1', { range: 'reserved' }],
  ['2606:4700:4700::1111', { range: 'public' }],
  ['2001:4860:4860::8888', { range: 'public' }],
];

describe('classifyAddress', () => {
  it.each(table)('classifies %s', (address, expected) => {
    expect(classifyAddress(address)).toEqual(expected);
  });

  it('throws a TypeError for a hostname', () => {
    expect(() => classifyAddress('localhost')).toThrow(TypeError);
  });
});

describe('compileNetworks', () => {
  const given = ['10.0.0.0/8', '192.168.1.0/24', '198.51.100.7', 'fd00::/8', '2001:db8:0:1::/64', '2001:db8::5'];
  const networks = compileNetworks(given);

  it.each<[string, boolean]>([
    ['10.0.0.1', true],
    ['10.255.255.255', true],
    ['11.0.0.0', false],
    ['9.255.255.255', false],
    ['192.168.1.200', true],
    ['192.168.2.1', false],
    ['198.51.100.7', true],
    ['198.51.100.8', false],
    // An IPv4-mapped address is its IPv4 address.
    ['::ffff:10.1.2.3', true],
    ['::ffff:127.0.0.1', false],
    ['fd12:3456::1', true],
    ['fe80::1', false],
    ['2001:db8:0:1:ffff::1', true],
    ['2001:db8:0:2::1', false],
    ['2001:db8::5', true],
    ['2001:db8::6', false],
    ['127.0.0.1', false],
  ])('says whether %s is in the networks: %s', (address, inside) => {
    expect(networks.contains(address)).toBe(inside);
  });

  it('keeps the entries as given', () => {
    expect(networks.entries).toEqual(given);
  });

  it('handles prefix lengths that split a group or an octet', () => {
    const odd = compileNetworks(['100.64.0.0/10', 'fe80::/10', '2001:db8:8000::/33']);
    expect(odd.contains('100.127.255.255')).toBe(true);
    expect(odd.contains('100.128.0.0')).toBe(false);
    expect(odd.contains('febf::1')).toBe(true);
    expect(odd.contains('fec0::1')).toBe(false);
    expect(odd.contains('2001:db8:8000::1')).toBe(true);
    expect(odd.contains('2001:db8:7fff::1')).toBe(false);
  });

  it.each<[unknown, RegExp]>([
    ['', /net\[0\] must be a non-empty string/],
    [7, /net\[0\] must be a non-empty string/],
    ['example.com/8', /does not start with an IP address/],
    ['10.0.0.0/33', /prefix length over 32/],
    ['fd00::/129', /prefix length over 128/],
    ['10.0.0.0/x', /not a number/],
    ['10.0.0.0/8/8', /is not a CIDR network/],
    ['0.0.0.0/0', /would allow every address/],
    ['::/0', /would allow every address/],
    ['10.0.0.1/8', /host bits set/],
    ['fd00::1/8', /host bits set/],
  ])('refuses %j naming the entry', (entry, message) => {
    expect(() => compileNetworks([entry as string], 'net')).toThrow(message);
  });

  it('refuses a list that is not an array', () => {
    expect(() => compileNetworks('10.0.0.0/8' as unknown as string[], 'net')).toThrow(
      /net must be a list of CIDR networks/,
    );
  });
});

describe('sameAddress', () => {
  it.each<[string, string, boolean]>([
    ['127.0.0.1', '127.0.0.1', true],
    ['127.0.0.1', '::ffff:127.0.0.1', true],
    ['::1', '0:0:0:0:0:0:0:1', true],
    ['2001:DB8::1', '2001:db8:0::1', true],
    ['127.0.0.1', '127.0.0.2', false],
    ['::1', '::2', false],
    ['localhost', 'localhost', false],
  ])('%s and %s: %s', (a, b, same) => {
    expect(sameAddress(a, b)).toBe(same);
  });
});
