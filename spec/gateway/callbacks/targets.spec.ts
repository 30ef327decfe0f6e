/**
 * The callback URL policy: the SSRF table, hostnames resolving to special addresses, the
 * allowlist rules, and the pinned lookup. DNS is always injected: no test touches real DNS.
 */
import { describe, expect, it } from 'vitest';
import { CallbackConfigError, CallbackRefusedError, createCallbackPolicy } from '../../../gateway/callbacks/index.ts';
import type { CallbackPolicyOptions, ResolvedAddress } from '../../../gateway/callbacks/index.ts';
import { pinnedLookup } from '../../../gateway/callbacks/targets.ts';

/** A lookup answering from a table, recording what it was asked. */
function fakeDns(records: Record<string, string[]>) {
  const asked: string[] = [];
  const lookup = async (hostname: string): Promise<ResolvedAddress[]> => {
    asked.push(hostname);
    const addresses = records[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return { lookup, asked };
}

async function refusal(options: CallbackPolicyOptions, url: string): Promise<CallbackRefusedError> {
  const error = await createCallbackPolicy(options)
    .check(url)
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(error).toBeInstanceOf(CallbackRefusedError);
  const refused = error as CallbackRefusedError;
  expect(refused.code).toBe('CALLBACK_URL_REFUSED');
  expect(refused.status).toBe(400);
  return refused;
}

const noDns = fakeDns({}).lookup;

describe('createCallbackPolicy: special addresses', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.254', 'private'],
    ['192.168.0.10', 'private'],
    ['169.254.169.254', 'link-local'],
    ['100.64.0.1', 'cgnat'],
    ['0.0.0.0', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['[::1]', 'loopback'],
    ['[fe80::1]', 'link-local'],
    ['[fc00::1]', 'unique-local'],
    ['[::ffff:10.0.0.1]', 'private (ipv4-mapped 10.0.0.1)'],
  ])('refuses http://%s even when allowlisted, naming the range', async (host, range) => {
    const url = `http://${host}/hook`;
    const error = await refusal({ allow: [`http://${host}`], lookup: noDns }, url);
    expect(error.reason).toBe('special-address');
    expect(error.message).toContain(range);
    expect(error.message).toContain('refused');
  });

  it('refuses loopback written in a form the URL parser normalises (0x7f.1, 2130706433)', async () => {
    for (const url of ['http://0x7f.1/', 'http://2130706433/']) {
      expect((await refusal({ allow: ['127.0.0.1'], lookup: noDns }, url)).reason).toBe('special-address');
    }
  });

  it('refuses a hostname that resolves to a private address, naming host and address', async () => {
    const { lookup } = fakeDns({ 'hooks.example.com': ['10.0.0.5'] });
    const error = await refusal({ allow: ['hooks.example.com'], lookup }, 'https://hooks.example.com/x');
    expect(error.message).toBe(
      'callback URL "https://hooks.example.com/x" refused: hooks.example.com resolves to 10.0.0.5, which is a private address',
    );
  });

  it('refuses a hostname when any one of its addresses is special', async () => {
    const { lookup } = fakeDns({ 'hooks.example.com': ['93.184.215.14', '2606:4700::1', '::1'] });
    expect((await refusal({ allow: ['hooks.example.com'], lookup }, 'https://hooks.example.com/')).message).toContain(
      '::1',
    );
  });

  it('returns the URL and the first approved address for public targets', async () => {
    const { lookup } = fakeDns({
      'hooks.example.com': ['93.184.215.14', '93.184.215.15'],
      'v6.example.com': ['2606:4700::1111'],
    });
    const policy = createCallbackPolicy({
      allow: ['https://hooks.example.com', '*.example.com', 'http://8.8.8.8', 'http://[2001:4860:4860::8888]'],
      lookup,
    });
    const target = await policy.check('https://hooks.example.com/calls?token=abc');
    expect(target.url.href).toBe('https://hooks.example.com/calls?token=abc');
    expect(target).toMatchObject({ address: '93.184.215.14', family: 4 });
    expect(await policy.check('https://v6.example.com/')).toMatchObject({ address: '2606:4700::1111', family: 6 });
    expect(await policy.check('http://8.8.8.8/x')).toMatchObject({ address: '8.8.8.8', family: 4 });
    expect(await policy.check('http://[2001:4860:4860::8888]/x')).toMatchObject({
      address: '2001:4860:4860::8888',
      family: 6,
    });
  });

  it('lets loopback and private targets through with allowPrivate', async () => {
    const { lookup } = fakeDns({ 'hooks.internal.test': ['10.0.0.5'] });
    const policy = createCallbackPolicy({
      allow: ['http://127.0.0.1:8080', 'hooks.internal.test'],
      allowPrivate: true,
      lookup,
    });
    expect(await policy.check('http://127.0.0.1:8080/cb')).toMatchObject({ address: '127.0.0.1', family: 4 });
    expect(await policy.check('http://hooks.internal.test/cb')).toMatchObject({ address: '10.0.0.5' });
  });
});

describe('createCallbackPolicy: URL and allowlist checks', () => {
  const { lookup } = fakeDns({
    'hooks.example.com': ['93.184.215.14'],
    'hooks.example.com.': ['93.184.215.14'],
    'a.b.example.com': ['93.184.215.14'],
    'example.com': ['93.184.215.14'],
  });

  it.each([
    ['not a URL', 'invalid-url'],
    ['/relative/path', 'invalid-url'],
    ['ftp://hooks.example.com/x', 'scheme'],
    ['file:///etc/passwd', 'scheme'],
    ['javascript:alert(1)', 'scheme'],
    ['https://user:hunter2@hooks.example.com/x', 'userinfo'],
    ['https://evil.example.org/x', 'not-allowlisted'],
  ])('refuses %s with reason %s', async (url, reason) => {
    const error = await refusal({ allow: ['*.example.com', 'hooks.example.com'], lookup }, url);
    expect(error.reason).toBe(reason);
    expect(error.message).toMatch(/^callback URL ".*" refused: /);
  });

  it('keeps a password given in the URL out of the message', async () => {
    const error = await refusal({ allow: ['hooks.example.com'], lookup }, 'https://user:hunter2@hooks.example.com/x');
    expect(error.message).not.toContain('hunter2');
    expect(error.message).toContain('carries credentials');
  });

  it('refuses everything when the allowlist is empty, without asking DNS', async () => {
    const dns = fakeDns({ 'hooks.example.com': ['93.184.215.14'] });
    const error = await refusal({ allow: [], lookup: dns.lookup }, 'https://hooks.example.com/x');
    expect(error.message).toContain('no callback targets are configured');
    expect(dns.asked).toEqual([]);
  });

  it('matches an origin entry on scheme, host and port only', async () => {
    const options = { allow: ['https://hooks.example.com'], lookup };
    await expect(createCallbackPolicy(options).check('https://hooks.example.com:443/x')).resolves.toBeTruthy();
    expect((await refusal(options, 'http://hooks.example.com/x')).reason).toBe('not-allowlisted');
    expect((await refusal(options, 'https://hooks.example.com:8443/x')).reason).toBe('not-allowlisted');
    expect((await refusal(options, 'https://a.hooks.example.com/x')).reason).toBe('not-allowlisted');
  });

  it('matches a host pattern on subdomains at any depth but not on the domain itself', async () => {
    const options = { allow: ['*.example.com'], lookup };
    await expect(createCallbackPolicy(options).check('http://hooks.example.com:9000/x')).resolves.toBeTruthy();
    await expect(createCallbackPolicy(options).check('https://a.b.example.com/x')).resolves.toBeTruthy();
    await expect(createCallbackPolicy(options).check('https://HOOKS.Example.COM./x')).resolves.toBeTruthy();
    expect((await refusal(options, 'https://example.com/x')).reason).toBe('not-allowlisted');
    expect((await refusal(options, 'https://evilexample.com/x')).reason).toBe('not-allowlisted');
    expect((await refusal(options, 'https://example.com.evil.org/x')).reason).toBe('not-allowlisted');
  });

  it('refuses a host that does not resolve', async () => {
    const error = await refusal({ allow: ['*.example.com'], lookup }, 'https://missing.example.com/x');
    expect(error.reason).toBe('unresolvable');
    expect(error.message).toContain('missing.example.com does not resolve');
  });

  it.each([
    ['*'],
    ['*.com'],
    ['a*.example.com'],
    ['https://hooks.example.com/path'],
    ['https://hooks.example.com?x'],
    ['ftp://hooks.example.com'],
    ['https://u:p@hooks.example.com'],
    ['hooks.example.com:8443'],
    [''],
    [42],
  ])('refuses the allowlist entry %j with CALLBACK_INVALID_OPTION', (entry) => {
    expect(() => createCallbackPolicy({ allow: [entry as string] })).toThrow(CallbackConfigError);
    expect(() => createCallbackPolicy({ allow: [entry as string] })).toThrow(/allow\[0\]/);
  });

  it('refuses an allowlist that is not an array', () => {
    expect(() => createCallbackPolicy({ allow: 'hooks.example.com' as unknown as string[] })).toThrow(
      /allow must be an array/,
    );
  });
});

describe('pinnedLookup', () => {
  const target = { url: new URL('https://hooks.example.com/x'), address: '93.184.215.14', family: 4 as const };

  it('answers the target hostname with the approved address, in both callback forms', () => {
    const lookup = pinnedLookup(target);
    const seen: unknown[] = [];
    lookup('hooks.example.com', { all: true }, (err, address) => seen.push(err, address));
    lookup('hooks.example.com', {}, (err, address, family) => seen.push(err, address, family));
    expect(seen).toEqual([null, [{ address: '93.184.215.14', family: 4 }], null, '93.184.215.14', 4]);
  });

  it('fails for any other hostname', () => {
    let error: unknown;
    pinnedLookup(target)('internal.example.com', {}, (err) => (error = err));
    expect(error).toBeInstanceOf(Error);
  });
});
