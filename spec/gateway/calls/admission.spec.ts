import { describe, expect, it } from 'vitest';
import { ClientCounts, UploadBudget, clientKey, notReadyReasons } from '../../../gateway/calls/admission.ts';

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

describe('UploadBudget', () => {
  it('refuses a client past its share with client-full while others are still admitted', () => {
    const budget = new UploadBudget({ max: 10, perClient: 2 });
    expect(budget.admit('staller').kind).toBe('admitted');
    expect(budget.admit('staller').kind).toBe('admitted');
    expect(budget.admit('staller').kind).toBe('client-full');
    expect(budget.admit('other').kind).toBe('admitted');
    expect(budget.size).toBe(3);
    expect(budget.full).toBe(false);
  });

  it('refuses everyone with full once the budget is taken, and admits again after a release', () => {
    const budget = new UploadBudget({ max: 2, perClient: 5 });
    const first = budget.admit('a');
    budget.admit('b');
    expect(budget.full).toBe(true);
    expect(budget.admit('c').kind).toBe('full');
    if (first.kind !== 'admitted') throw new Error('first upload was not admitted');
    first.release();
    expect(budget.full).toBe(false);
    expect(budget.admit('c').kind).toBe('admitted');
  });

  it('answers client-full before full when both hold', () => {
    const budget = new UploadBudget({ max: 2, perClient: 2 });
    budget.admit('a');
    budget.admit('a');
    expect(budget.admit('a').kind).toBe('client-full');
    expect(budget.admit('b').kind).toBe('full');
  });

  it('counts a release once however often it is called, and forgets the client after', () => {
    const budget = new UploadBudget({ max: 3, perClient: 3 });
    const one = budget.admit('a');
    budget.admit('a');
    if (one.kind !== 'admitted') throw new Error('not admitted');
    one.release();
    one.release();
    expect(budget.size).toBe(1);
    expect(budget.clients).toBe(1);
  });

  it('leaves nothing counted after every admitted upload is released', () => {
    const budget = new UploadBudget({ max: 100, perClient: 10 });
    const admitted = Array.from({ length: 50 }, (_, i) => budget.admit(`client-${i % 7}`));
    for (const a of admitted) if (a.kind === 'admitted') a.release();
    expect(budget.size).toBe(0);
    expect(budget.clients).toBe(0);
  });
});

describe('notReadyReasons', () => {
  const ready = { closing: false, inFlight: 0, maxInFlight: 10, uploadsFull: false, runnersReady: true, storeReady: true };

  it('returns no reason when a new call would be taken', () => {
    expect(notReadyReasons(ready)).toEqual([]);
    expect(notReadyReasons({ ...ready, inFlight: 9 })).toEqual([]);
  });

  it('returns each reason that holds, in a fixed order', () => {
    expect(notReadyReasons({ ...ready, inFlight: 10 })).toEqual(['max_in_flight']);
    expect(notReadyReasons({ ...ready, uploadsFull: true })).toEqual(['uploads_full']);
    expect(notReadyReasons({ ...ready, storeReady: false })).toEqual(['store_unavailable']);
    expect(notReadyReasons({ closing: true, inFlight: 12, maxInFlight: 10, uploadsFull: true, runnersReady: false, storeReady: false })).toEqual([
      'closing',
      'max_in_flight',
      'uploads_full',
      'no_ready_runner',
      'store_unavailable',
    ]);
  });
});
