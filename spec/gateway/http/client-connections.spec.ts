import { describe, expect, it } from 'vitest';
import { ClientCounts, clientKey } from '../../../gateway/http/client-connections.ts';

describe('clientKey', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['10.1.2.3', '10.1.2.3'],
    ['::ffff:127.0.0.1', '127.0.0.1'],
    ['::FFFF:10.1.2.3', '10.1.2.3'],
    ['::1', '0:0:0:0::/64'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::10.1.2.3', '64:ff9b:0:0::/64'],
  ])('returns %s as %s', (address, key) => {
    expect(clientKey(address)).toBe(key);
  });

  it('returns one key for every address of one IPv6 /64, and another for the next /64', () => {
    expect(clientKey('2001:db8:1:2::1')).toBe(clientKey('2001:db8:1:2:ffff:ffff:ffff:ffff'));
    expect(clientKey('2001:db8:1:2::1')).not.toBe(clientKey('2001:db8:1:3::1'));
  });

  it('returns "unknown" when the socket has no address, and an unparsable one as it is', () => {
    expect(clientKey(undefined)).toBe('unknown');
    expect(clientKey('')).toBe('unknown');
    expect(clientKey('not-an-ip')).toBe('not-an-ip');
  });
});

describe('ClientCounts', () => {
  it('admits up to the limit per client, each client on its own', () => {
    const counts = new ClientCounts(2);
    expect([counts.acquire('a'), counts.acquire('a'), counts.acquire('a')]).toEqual([true, true, false]);
    expect(counts.acquire('b')).toBe(true);
    expect([counts.count('a'), counts.count('b'), counts.count('c')]).toEqual([2, 1, 0]);
  });

  it('admits again after a release, and forgets a client that holds nothing', () => {
    const counts = new ClientCounts(1);
    counts.acquire('a');
    counts.acquire('b');
    expect(counts.clients).toBe(2);
    counts.release('a');
    expect(counts.clients).toBe(1);
    expect(counts.acquire('a')).toBe(true);
    counts.release('a');
    counts.release('b');
    expect(counts.clients).toBe(0);
  });

  it('ignores a release for a client that holds nothing', () => {
    const counts = new ClientCounts(1);
    counts.release('a');
    expect(counts.count('a')).toBe(0);
    expect(counts.acquire('a')).toBe(true);
    expect(counts.acquire('a')).toBe(false);
  });
});
