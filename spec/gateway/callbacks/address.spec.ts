/**
 * The address table behind the SSRF policy: every special range, its edges, and the IPv6
 * forms that smuggle an IPv4 address.
 */
import { describe, expect, it } from 'vitest';
import { classifyAddress } from '../../../gateway/callbacks/index.ts';
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
  ['169.254.169.254', { range: 'link-local' }],
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
  ['::ffff:169.254.169.254', { range: 'link-local', via: 'ipv4-mapped', ipv4: '169.254.169.254' }],
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
