/**
 * Which runner URLs a registration may name: a table of addresses against the default policy
 * and against --runner-networks, and the gateway's own listeners, which no network allows.
 */
import { describe, expect, it } from 'vitest';
import { createRunnerAddressPolicy } from '../../../gateway/fleet/registration-policy.ts';
import { GatewayConfigError } from '../../../gateway/errors.ts';
import { verdict } from '../../support/registrations.ts';

describe('the runner address policy without --runner-networks', () => {
  const policy = createRunnerAddressPolicy({ localAddresses: () => [] });

  it.each([
    'http://10.0.0.5:9000',
    'http://172.16.3.4:9000',
    'http://192.168.1.10:9000',
    'https://203.0.113.9',
    'http://100.64.0.7:9000',
    'http://[fd00::5]:9000',
    'http://[2001:db8::5]:9000',
  ])('takes %s', (url) => {
    expect(verdict(policy, url)).toBe('ok');
  });

  it.each<[string, RegExp]>([
    ['http://127.0.0.1:9000', /127\.0\.0\.1 is a loopback address; list a network holding it in --runner-networks/],
    ['http://127.8.9.10:9000', /loopback/],
    ['http://[::1]:9000', /::1 is a loopback address/],
    ['http://169.254.169.254', /169\.254\.169\.254 is a link-local address/],
    ['http://169.254.169.254:80/latest/meta-data', /link-local/],
    ['http://[fe80::1]:9000', /fe80::1 is a link-local address/],
    ['http://[::ffff:169.254.169.254]:80', /link-local \(ipv4-mapped 169\.254\.169\.254\)/],
    ['http://[::ffff:127.0.0.1]:9000', /loopback \(ipv4-mapped 127\.0\.0\.1\)/],
    ['http://[64:ff9b::a9fe:a9fe]', /link-local \(nat64 169\.254\.169\.254\)/],
    ['http://0.0.0.0:9000', /unspecified/],
    ['http://[::]:9000', /unspecified/],
    ['http://224.0.0.1:9000', /multicast/],
    ['http://255.255.255.255:9000', /reserved/],
    // The URL parser reads these as 127.0.0.1: judged as what they reach, not as written.
    ['http://0x7f.1:9000', /127\.0\.0\.1 is a loopback address/],
    ['http://2130706433:9000', /127\.0\.0\.1 is a loopback address/],
    ['http://localhost:9000', /the host must be an IP address, got the name "localhost"/],
    ['http://runner-1.internal:9000', /the host must be an IP address, got the name "runner-1\.internal"/],
    ['http://metadata.google.internal', /must be an IP address/],
  ])('refuses %s, saying why', (url, message) => {
    const said = verdict(policy, url);
    expect(said).toMatch(/^registration url refused: /);
    expect(said).toMatch(message);
  });
});

describe('the runner address policy with --runner-networks', () => {
  const policy = createRunnerAddressPolicy({
    networks: ['10.0.0.0/8', '127.0.0.0/8', 'fd00::/8'],
    localAddresses: () => [],
  });

  it.each(['http://10.1.2.3:9000', 'http://127.0.0.1:9000', 'http://[::ffff:127.0.0.1]:9000', 'http://[fd00::1]:9000'])(
    'takes %s, which a network holds',
    (url) => {
      expect(verdict(policy, url)).toBe('ok');
    },
  );

  it.each<[string, RegExp]>([
    [
      'http://192.168.1.1:9000',
      /192\.168\.1\.1 is not in --runner-networks \(10\.0\.0\.0\/8, 127\.0\.0\.0\/8, fd00::\/8\)/,
    ],
    ['http://169.254.169.254', /169\.254\.169\.254 is not in --runner-networks/],
    ['http://[::1]:9000', /::1 is not in --runner-networks/],
    ['http://8.8.8.8:9000', /not in --runner-networks/],
  ])('refuses %s, outside them', (url, message) => {
    expect(verdict(policy, url)).toMatch(message);
  });

  it('refuses a bad network at construction with GW_INVALID_OPTION naming it', () => {
    expect(() => createRunnerAddressPolicy({ networks: ['10.0.0.1/8'] })).toThrow(GatewayConfigError);
    expect(() => createRunnerAddressPolicy({ networks: ['0.0.0.0/0'] })).toThrow(
      /runnerNetworks\[0\] would allow every address/,
    );
  });
});

describe("the gateway's own listeners", () => {
  it('refuses the address and port it listens on, even inside --runner-networks, and takes its other ports', () => {
    const policy = createRunnerAddressPolicy({ networks: ['127.0.0.0/8'], localAddresses: () => [] });
    policy.addListener('127.0.0.1', 8080);
    expect(verdict(policy, 'http://127.0.0.1:8080')).toBe(
      "registration url refused: 127.0.0.1:8080 is this gateway's own listener",
    );
    expect(verdict(policy, 'http://[::ffff:127.0.0.1]:8080')).toMatch(/own listener/);
    expect(verdict(policy, 'http://127.0.0.1:8081')).toBe('ok');
    // Bound to 127.0.0.1 only: another loopback address does not reach it.
    expect(verdict(policy, 'http://127.0.0.2:8080')).toBe('ok');
  });

  it('counts the default port of the scheme', () => {
    const policy = createRunnerAddressPolicy({ networks: ['10.0.0.0/8'], localAddresses: () => [] });
    policy.addListener('10.0.0.1', 80);
    policy.addListener('10.0.0.1', 443);
    expect(verdict(policy, 'http://10.0.0.1')).toMatch(/own listener/);
    expect(verdict(policy, 'https://10.0.0.1')).toMatch(/own listener/);
    expect(verdict(policy, 'https://10.0.0.1:80')).toMatch(/own listener/);
  });

  it.each(['0.0.0.0', '::'])('refuses every local address on the port of a wildcard listener on %s', (wildcard) => {
    const policy = createRunnerAddressPolicy({
      networks: ['10.0.0.0/8', '127.0.0.0/8', '::1/128', 'fd00::/8'],
      localAddresses: () => ['10.0.0.7', 'fd00::7', '127.0.0.1'],
    });
    policy.addListener(wildcard, 8080);
    for (const url of [
      'http://10.0.0.7:8080',
      'http://[fd00::7]:8080',
      'http://127.0.0.1:8080',
      'http://127.1.2.3:8080',
      'http://[::1]:8080',
    ]) {
      expect(verdict(policy, url), url).toMatch(/own listener/);
    }
    // Another machine on the same port is another gateway's business.
    expect(verdict(policy, 'http://10.0.0.8:8080')).toBe('ok');
    expect(verdict(policy, 'http://10.0.0.7:8081')).toBe('ok');
  });
});
