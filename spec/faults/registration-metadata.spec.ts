/**
 * Registration refuses every cloud metadata address, in every spelling a URL parser reads as
 * one, and port 0: `http://[fd00:ec2::254]` (AWS over IPv6), `http://100.100.100.200` (Alibaba
 * Cloud) and `http://10.0.0.12:0` were taken, since the first is unique-local, the second CGNAT
 * and the third a private address. A metadata address is refused even where --runner-networks
 * holds it. The callbacks judge by the same classifier (callbacks/address.ts): a metadata
 * address, or a metadata host name, is refused even with private targets allowed.
 */
import { describe, expect, it } from 'vitest';
import { createCallbackPolicy } from '../../gateway/callbacks/index.ts';
import type { CallbackRefusedError } from '../../gateway/callbacks/index.ts';
import { createRunnerAddressPolicy } from '../../gateway/fleet/registration-policy.ts';
import { createGateway } from '../../gateway/server.ts';
import { REGISTER_PATH } from '../../runner/protocol/index.ts';
import { postJson } from '../support/fleet.ts';
import { registration, verdict } from '../support/registrations.ts';
import { serversForEach } from '../support/servers.ts';

/** Every spelling of a metadata address, with the address it is and who answers there. */
const METADATA: Array<[url: string, reached: RegExp]> = [
  // AWS over IPv6, with and without zero compression, in capitals, with a port.
  ['http://[fd00:ec2::254]', /fd00:ec2::254 .*AWS instance metadata service over IPv6/],
  ['http://[fd00:ec2:0:0:0:0:0:254]:80', /AWS instance metadata service over IPv6/],
  ['http://[fd00:0ec2:0000:0000:0000:0000:0000:0254]:9000', /AWS instance metadata service over IPv6/],
  ['http://[FD00:EC2::254]', /AWS instance metadata service over IPv6/],
  ['http://[fd00:ec2:0::0:254]', /AWS instance metadata service over IPv6/],
  ['http://[fd00:ec2::23]', /EKS pod identity agent over IPv6/],
  // Alibaba Cloud, dotted, hex, octal, one number, and the short forms.
  ['http://100.100.100.200', /100\.100\.100\.200 .*Alibaba Cloud metadata service/],
  ['http://0x64.0x64.0x64.0xc8', /Alibaba Cloud/],
  ['http://0144.0144.0144.0310:8080', /Alibaba Cloud/],
  ['http://1684301000', /Alibaba Cloud/],
  ['http://100.100.25800', /Alibaba Cloud/],
  ['http://100.6579400', /Alibaba Cloud/],
  ['http://0x646464c8', /Alibaba Cloud/],
  ['http://100.100.100.200.', /Alibaba Cloud/],
  // IPv4 inside IPv6: mapped (as written and as the parser rewrites it), NAT64, 6to4.
  ['http://[::ffff:100.100.100.200]', /ipv4-mapped 100\.100\.100\.200.*Alibaba Cloud/],
  ['http://[::ffff:6464:64c8]:9000', /Alibaba Cloud/],
  ['http://[0:0:0:0:0:ffff:6464:64c8]', /Alibaba Cloud/],
  ['http://[64:ff9b::100.100.100.200]', /nat64 100\.100\.100\.200.*Alibaba Cloud/],
  ['http://[2002:6464:64c8::1]', /6to4 100\.100\.100\.200.*Alibaba Cloud/],
  // The deprecated IPv4-compatible form and SIIT's IPv4-translated one.
  ['http://[::100.100.100.200]', /Alibaba Cloud/],
  ['http://[::ffff:0:6464:64c8]', /Alibaba Cloud/],
  // The address AWS, GCP, Azure and Oracle Cloud share, and its neighbours.
  ['http://169.254.169.254', /169\.254\.169\.254 .*instance metadata service/],
  ['http://0xa9fea9fe', /instance metadata service/],
  ['http://0251.0376.0251.0376', /instance metadata service/],
  ['http://[::ffff:a9fe:a9fe]', /instance metadata service/],
  ['http://169.254.170.2', /ECS task metadata/],
  ['http://169.254.0.23', /Tencent Cloud/],
  ['http://169.254.42.42', /Scaleway/],
  ['http://192.0.0.192', /Oracle Cloud/],
];

const PORT_ZERO = ['http://10.0.0.12:0', 'http://10.0.0.12:000', 'http://[fd00::5]:0', 'https://203.0.113.9:0'];

describe('the runner address policy and cloud metadata addresses', () => {
  const byDefault = createRunnerAddressPolicy({ localAddresses: () => [] });
  // Networks that hold every one of them: a metadata address is refused all the same.
  const wide = createRunnerAddressPolicy({
    networks: [
      '10.0.0.0/8',
      '100.64.0.0/10',
      'fd00::/8',
      '169.254.0.0/16',
      '192.0.0.0/24',
      '203.0.113.0/24',
      '64:ff9b::/96',
      '2002::/16',
      '::ffff:0:0/96',
      '::/96',
      '::ffff:0:0:0/96',
    ],
    localAddresses: () => [],
  });

  it.each(METADATA)('refuses %s by default, naming what answers there', (url, reached) => {
    const said = verdict(byDefault, url);
    expect(said).toMatch(/^registration url refused: /);
    expect(said).toMatch(reached);
  });

  it.each(METADATA)('refuses %s even when --runner-networks holds it', (url, reached) => {
    const said = verdict(wide, url);
    expect(said).toMatch(reached);
    expect(said).toMatch(/no network of --runner-networks allows it/);
  });

  it.each(PORT_ZERO)('refuses port 0 in %s, by default and whatever the networks', (url) => {
    expect(verdict(byDefault, url)).toMatch(/^registration url refused: port 0 .*nothing listens on port 0/);
    expect(verdict(wide, url)).toMatch(/port 0/);
  });

  it.each([
    'http://10.0.0.12:9000',
    'http://100.100.100.201:9000',
    'http://100.64.0.7:9000',
    'http://[fd00:ec2::255]:9000',
    'http://[fd00::5]:9000',
  ])('still takes the neighbour %s', (url) => {
    expect(verdict(byDefault, url)).toBe('ok');
    expect(verdict(wide, url)).toBe('ok');
  });
});

describe('registration over the wire', () => {
  const { cleanups } = serversForEach();
  const TOKEN = 'a-runner-token-long-enough';

  it('answers 400 GW_INVALID_REGISTRATION for the three URLs the review registered', async () => {
    const gw = createGateway({ runnerToken: TOKEN, placerTimeout: 300 });
    const { url } = await gw.listen();
    cleanups.push(() => gw.close());
    for (const [target, why] of [
      ['http://[fd00:ec2::254]', /AWS instance metadata service over IPv6/],
      ['http://100.100.100.200', /Alibaba Cloud metadata service/],
      ['http://10.0.0.12:0', /port 0/],
    ] as const) {
      const res = await postJson(`${url}${REGISTER_PATH}`, JSON.stringify(registration('sink', target)), {
        authorization: `Bearer ${TOKEN}`,
      });
      expect(res.status, target).toBe(400);
      expect(res.json.error.code).toBe('GW_INVALID_REGISTRATION');
      expect(res.json.error.message).toMatch(why);
    }
  });
});

describe('the callback policy and cloud metadata services', () => {
  const lookup = async (hostname: string) =>
    hostname === 'hooks.example.com'
      ? [{ address: '100.100.100.200', family: 4 }]
      : [{ address: '169.254.169.254', family: 4 }];

  async function refusal(url: string, allow: string): Promise<CallbackRefusedError> {
    const policy = createCallbackPolicy({ allow: [allow], allowPrivate: true, lookup });
    const error = await policy.check(url).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error, url).toBeDefined();
    return error as CallbackRefusedError;
  }

  it.each(METADATA.map(([url]) => url))('refuses %s even with private targets allowed', async (url) => {
    const error = await refusal(`${url}/hook`, new URL(url).origin);
    expect(error.code).toBe('CALLBACK_URL_REFUSED');
    expect(error.reason).toBe('special-address');
  });

  it.each([
    'http://metadata.google.internal/hook',
    'http://METADATA.google.internal./hook',
    'http://metadata.goog/hook',
    'http://metadata/hook',
  ])('refuses the metadata host name %s before any lookup', async (url) => {
    const error = await refusal(url, new URL(url).origin);
    expect(error.message).toMatch(/is a cloud metadata service/);
  });

  it('refuses a name that resolves to a metadata address, and still takes a private one', async () => {
    const error = await refusal('https://hooks.example.com/hook', 'https://hooks.example.com');
    expect(error.message).toMatch(
      /resolves to 100\.100\.100\.200, which is a cgnat address, the Alibaba Cloud metadata service/,
    );
    const policy = createCallbackPolicy({ allow: ['http://10.0.0.7'], allowPrivate: true, lookup });
    await expect(policy.check('http://10.0.0.7/hook')).resolves.toMatchObject({ address: '10.0.0.7' });
  });
});
