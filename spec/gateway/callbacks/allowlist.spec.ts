/**
 * gateway/callbacks/allowlist.ts: which callback URLs an allowlist entry matches. The
 * entries it refuses, and the policy around it (addresses, DNS), are targets.spec.ts's.
 */
import { describe, expect, it } from 'vitest';
import { compileAllowlist } from '../../../gateway/callbacks/allowlist.ts';

const allows = (entries: readonly string[], url: string): boolean => compileAllowlist(entries).allows(new URL(url));

describe('compileAllowlist', () => {
  it.each([
    [
      'an origin: its scheme, host and default port',
      ['https://hooks.example.com'],
      'https://hooks.example.com/x',
      true,
    ],
    ['an origin: not another scheme', ['https://hooks.example.com'], 'http://hooks.example.com/x', false],
    ['an origin: not another port', ['https://hooks.example.com'], 'https://hooks.example.com:8443/x', false],
    ['an origin with a port: that port only', ['http://127.0.0.1:8080'], 'http://127.0.0.1:8080/cb', true],
    ['a host: either scheme, any port', ['hooks.example.com'], 'http://hooks.example.com:9000/x', true],
    ['a host: not a subdomain', ['hooks.example.com'], 'https://a.hooks.example.com/x', false],
    ['a pattern: a subdomain at any depth', ['*.example.com'], 'https://a.b.example.com/x', true],
    ['a pattern: not the domain itself', ['*.example.com'], 'https://example.com/x', false],
    ['a pattern: not a name that merely ends alike', ['*.example.com'], 'https://evilexample.com/x', false],
    ['a pattern with a scheme: that scheme only', ['https://*.example.com'], 'http://a.example.com/x', false],
    ['a host in any case, and with a trailing dot', ['Hooks.Example.com.'], 'https://hooks.example.com./x', true],
    ['an IPv4 host in another spelling', ['127.0.0.1'], 'http://0x7f.1/x', true],
    ['an empty list: nothing', [], 'https://hooks.example.com/x', false],
  ] as const)('matches %s', (_label, entries, url, allowed) => {
    expect(allows(entries, url)).toBe(allowed);
  });

  it('keeps the entries as given, frozen', () => {
    const list = compileAllowlist([' hooks.example.com ', '*.example.org']);
    expect(list.entries).toEqual([' hooks.example.com ', '*.example.org']);
    expect(Object.isFrozen(list.entries)).toBe(true);
  });
});
