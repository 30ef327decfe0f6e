/**
 * The data plane's settings, for `sluice gateway`, `sluice up` and `sluice runner`: the call
 * secret (by value, or from a file), the TLS files of mutual TLS between gateways and runners,
 * and the TLS of the gateway's front. Files are read here, at start-up, so the libraries take
 * PEM text and secrets, never paths.
 */
import { readFileSync } from 'node:fs';
import type { DataPlaneOptions } from '../fleet/data-plane.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import { runnerDefaults } from '../../runner/options.ts';
import { readSecretLines } from '../access/secrets.ts';
import { secretLines, settingsOf } from './command.ts';
import { SettingsError, flagOf } from './settings.ts';
import type { Setting } from './settings.ts';

const r = settingsOf(runnerDefaults);

/** Where a side's TLS settings start: the gateway's front and the runner's server (`tls`), the gateway's client side (`runnerTls`). */
type TlsPrefix = 'tls' | 'runnerTls';
/** The PEM files of one TLS side. */
type TlsPart = 'cert' | 'key' | 'ca';

/** What each PEM file of one TLS side is, for its setting's description. */
interface PemFiles {
  /** The certificate. */
  cert: string;
  /** What --help shows when the certificate is not given. @default 'none' */
  certDefault?: string;
  /** The CA, when this side takes one. */
  ca?: string;
}

/** The PEM-file settings of one TLS side: `<prefix>Cert`, `<prefix>Key` (the certificate's key) and, when `ca` is described, `<prefix>Ca`. */
function pemSettings(prefix: TlsPrefix, files: PemFiles): Setting[] {
  const pem = (part: string, description: string, defaultText = 'none'): Setting => ({
    key: `${prefix}${part}`,
    type: 'string',
    description: `PEM file: ${description}`,
    defaultText,
  });
  return [
    pem('Cert', files.cert, files.certDefault),
    pem('Key', `the key of ${flagOf(`${prefix}Cert`)}`),
    ...(files.ca === undefined ? [] : [pem('Ca', files.ca)]),
  ];
}

const callSecretFile: Setting = {
  key: 'callSecretFile',
  type: 'string',
  secret: 'file',
  description:
    'file holding the call secret (one per line on a runner: every line verifies, for a rotation); read at start',
  defaultText: 'none',
};

/** The gateway's: the secret it signs calls with, its client side of mutual TLS, and its front's TLS. */
export const gatewayDataPlaneSettings: readonly Setting[] = [
  {
    key: 'callSecret',
    type: 'string',
    secret: true,
    description:
      'secret every call to a runner is signed with (32+ printable ASCII characters, no spaces or commas); runners given it refuse unsigned calls. Not the runner token; prefer the environment variable or --call-secret-file (never shown)',
    defaultText: 'none: calls go unsigned',
  },
  callSecretFile,
  ...pemSettings('runnerTls', {
    cert: 'the client certificate this gateway presents to runners under mutual TLS',
    ca: "the CA that signs the runners' certificates (https runner URLs)",
  }),
];

/**
 * The gateway's front: TLS, or the operator's word that TLS terminates upstream (an ingress, a
 * load balancer), which lets it listen with plain http off loopback. The switch is named for that
 * fact rather than for what it permits, so a deployment that sets it says why.
 */
export const frontSettings: readonly Setting[] = [
  ...pemSettings('tls', {
    cert: "the front's certificate; with --tls-key the gateway listens on https",
    certDefault: 'none: plain http',
  }),
  {
    key: 'tlsTerminatedUpstream',
    type: 'boolean',
    description:
      'TLS terminates upstream (an ingress or load balancer in front): listen with plain http on an address other than loopback',
    defaultText: 'false: plain http on loopback only',
  },
];

/** The runner's: the secrets it verifies calls with, the skew it allows, mutual TLS, and the open door's switch. */
export const runnerDataPlaneSettings: readonly Setting[] = [
  {
    key: 'callSecret',
    type: 'list',
    secret: true,
    description:
      'secret the gateways sign calls with, or several comma-separated during a rotation; unsigned calls get 401. Not the runner token; prefer the environment variable or --call-secret-file (never shown)',
    defaultText: 'none: see --allow-unsigned-calls',
  },
  callSecretFile,
  r(
    'callClockSkew',
    'duration',
    'how far past its signed deadline a call is still taken: the clocks of gateway and runner may disagree by this much',
  ),
  ...pemSettings('tls', {
    cert: "the runner's certificate; with --tls-key and --tls-ca it listens on https and requires a client certificate",
    certDefault: 'none: plain http',
    ca: "the CA that signs gateways' client certificates, and checks https gateways registered with",
  }),
  {
    key: 'allowUnsignedCalls',
    type: 'boolean',
    libraryDefault: runnerDefaults.allowUnsignedCalls,
    description:
      'serve calls without a call secret or mutual TLS on an address other than loopback (anyone reaching the port can spend the engine)',
  },
];

/** The gateway options the data plane's settings give. */
export function gatewayDataPlaneOptions(values: Record<string, unknown>): DataPlaneOptions {
  const out: DataPlaneOptions = {};
  const secrets = secretLines(values, 'callSecret', readSecretLines);
  if (secrets !== undefined) {
    if (secrets.length !== 1)
      throw new SettingsError(
        `${flagOf('callSecretFile')} must hold one secret on a gateway (it signs with one), got ${secrets.length} lines`,
      );
    out.callSecret = secrets[0]!;
  }
  const runnerTls = tlsFiles(values, 'runnerTls', ['cert', 'key', 'ca']);
  if (runnerTls) out.runnerTls = runnerTls as unknown as DataPlaneOptions['runnerTls'];
  const tls = tlsFiles(values, 'tls', ['cert', 'key']);
  if (tls) out.tls = tls as unknown as DataPlaneOptions['tls'];
  if (values.tlsTerminatedUpstream !== undefined) out.allowPlainHttp = values.tlsTerminatedUpstream as boolean;
  return out;
}

/** The runner options the data plane's settings give. */
export function runnerDataPlaneOptions(
  values: Record<string, unknown>,
): Pick<RunnerOptions, 'callSecret' | 'callClockSkew' | 'allowUnsignedCalls' | 'tls'> {
  const out: Pick<RunnerOptions, 'callSecret' | 'callClockSkew' | 'allowUnsignedCalls' | 'tls'> = {};
  const secrets = secretLines(values, 'callSecret', readSecretLines);
  if (secrets !== undefined) out.callSecret = secrets;
  if (values.callClockSkew !== undefined) out.callClockSkew = values.callClockSkew as number;
  if (values.allowUnsignedCalls !== undefined) out.allowUnsignedCalls = values.allowUnsignedCalls as boolean;
  const tls = tlsFiles(values, 'tls', ['cert', 'key', 'ca']);
  if (tls) out.tls = tls as unknown as RunnerOptions['tls'];
  return out;
}

/**
 * Reads the PEM files of `parts` (`cert` from `<prefix>Cert`, and so on); undefined when none is
 * given, refused when only some are. A key file's text never reaches a message: only its path and
 * the flag do.
 */
function tlsFiles(
  values: Record<string, unknown>,
  prefix: TlsPrefix,
  parts: readonly TlsPart[],
): Record<string, Buffer> | undefined {
  const keys = Object.fromEntries(parts.map((part) => [part, `${prefix}${part[0]!.toUpperCase()}${part.slice(1)}`]));
  const given = Object.entries(keys).filter(([, key]) => values[key] !== undefined);
  if (given.length === 0) return undefined;
  const missing = parts.filter((part) => values[keys[part]!] === undefined);
  if (missing.length > 0) {
    throw new SettingsError(
      `${given.map(([, key]) => flagOf(key)).join(' and ')} ${given.length === 1 ? 'needs' : 'need'} ${missing.map((part) => flagOf(keys[part]!)).join(' and ')} too`,
    );
  }
  const out: Record<string, Buffer> = {};
  for (const [part, key] of given) out[part] = Buffer.from(readText(values[key] as string, key));
  return out;
}

function readText(path: string, key: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    throw new SettingsError(
      `invalid ${flagOf(key)}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
}
