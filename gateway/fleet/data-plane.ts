/**
 * The gateway's side of a closed data plane: what proves to a runner that a call came from this
 * gateway (the call secret's signature, a client certificate under mutual TLS), and the TLS of
 * the gateway's own front. Options, their checks, and the signer HttpRunner calls for every call.
 * The wire (headers, canonical string, MAC) is runner/protocol/signature.ts, shared with runners.
 */
import type { Fail } from '../../placer/kernel/index.ts';
import {
  BODY_DIGEST_HEADER,
  CALL_SECRET_RULE,
  DEADLINE_HEADER,
  SIGNATURE_HEADER,
  bodyDigest,
  isCallSecret,
  signCall,
} from '../../runner/protocol/index.ts';
import type { GatewayCall } from '../http/index.ts';

/** PEM text of a certificate, its key, and optionally a CA. */
export interface TlsMaterial {
  cert: string | Buffer;
  key: string | Buffer;
  ca?: string | Buffer;
}

/** The data plane's options, part of GatewayOptions. */
export interface DataPlaneOptions {
  /**
   * The secret every call sent to a runner is signed with (HMAC-SHA256 over its id, method,
   * path, deadline and body digest); runners given the same secret refuse any call without it.
   * Not the runner token, which lets a node register: this one lets its holder spend GPU time.
   * Never logged.
   * @default none: calls are sent unsigned
   */
  callSecret?: string;
  /**
   * Client side of mutual TLS with runners: the certificate and key this gateway presents, and
   * the CA that signs the runners' certificates. Runner URLs are then https.
   * @default none: the system's CAs, no client certificate
   */
  runnerTls?: Required<TlsMaterial>;
  /**
   * The front's certificate and key: the gateway listens on https (HTTP/1.1).
   * @default none: plain http, on a loopback address only unless allowPlainHttp
   */
  tls?: Omit<TlsMaterial, 'ca'>;
  /**
   * Listen with plain http on an address other than loopback (behind a proxy that terminates
   * TLS, on a private network). Without it such a listen is refused.
   * @default false
   */
  allowPlainHttp?: boolean;
}

/** The data plane's options after their checks; frozen. */
export interface DataPlaneConfig {
  readonly callSecret: string | undefined;
  readonly runnerTls: Readonly<Required<TlsMaterial>> | undefined;
  readonly tls: Readonly<Omit<TlsMaterial, 'ca'>> | undefined;
  readonly allowPlainHttp: boolean;
}

/**
 * Checks the data plane's options; `fail` makes the gateway's config error. Messages never quote
 * a secret or a key. `runners` are the static runner URLs: under mutual TLS each must be https,
 * or its calls would go in clear text to a runner that could not take them.
 */
export function resolveDataPlane(options: DataPlaneOptions, fail: Fail, runners: readonly URL[] = []): DataPlaneConfig {
  const { callSecret, allowPlainHttp = false } = options;
  if (callSecret !== undefined && !isCallSecret(callSecret))
    throw fail(`callSecret must be ${CALL_SECRET_RULE}`, 'callSecret');
  if (typeof allowPlainHttp !== 'boolean')
    throw fail(`allowPlainHttp must be true or false, got ${JSON.stringify(allowPlainHttp)}`, 'allowPlainHttp');
  const runnerTls =
    options.runnerTls === undefined ? undefined : pem('runnerTls', options.runnerTls, ['cert', 'key', 'ca'], fail);
  const tls = options.tls === undefined ? undefined : pem('tls', options.tls, ['cert', 'key'], fail);
  const plain = runners.find((url) => url.protocol !== 'https:');
  if (runnerTls && plain)
    throw fail(
      `runners entries must be https:// URLs with runnerTls (mutual TLS), got ${JSON.stringify(plain.origin)}`,
      'runners',
    );
  return Object.freeze({
    callSecret,
    runnerTls: runnerTls as DataPlaneConfig['runnerTls'],
    tls,
    allowPlainHttp,
  });
}

function pem(option: string, value: unknown, parts: readonly (keyof TlsMaterial)[], fail: Fail): Readonly<TlsMaterial> {
  if (value === null || typeof value !== 'object')
    throw fail(`${option} must be an object with ${parts.join(', ')}`, option);
  const out: Partial<TlsMaterial> = {};
  for (const part of parts) {
    const text = (value as Partial<TlsMaterial>)[part];
    if (!(typeof text === 'string' || Buffer.isBuffer(text)) || text.length === 0) {
      throw fail(`${option}.${part} must be PEM text; ${option} needs ${parts.join(', ')} together`, option);
    }
    out[part] = text;
  }
  return Object.freeze(out as TlsMaterial);
}

/**
 * Signs the calls a gateway sends. The body's digest is computed once per call (a call offered
 * to three runners is hashed once); the deadline and MAC are made per send, since a retry is
 * sent later, with a later deadline.
 */
export class CallSigner {
  readonly #secret: string;
  readonly #now: () => number;
  readonly #digest: (body: Buffer) => string;
  /** Digests by body buffer: a call's buffered body is one Buffer for its whole life. */
  readonly #digests = new WeakMap<Buffer, string>();

  /**
   * @param now wall-clock ms since the epoch: a runner compares the deadline with its own wall clock
   * @param digest the body's digest, as the wire defines it (a spec counts the calls)
   */
  constructor(secret: string, now: () => number = Date.now, digest: (body: Buffer) => string = bodyDigest) {
    this.#secret = secret;
    this.#now = now;
    this.#digest = digest;
  }

  /** Appends the signature's headers for `call` to `flat` (name, value, ...), as undici takes them. */
  sign(call: GatewayCall, flat: string[]): void {
    let digest = this.#digests.get(call.body);
    if (digest === undefined) {
      digest = this.#digest(call.body);
      this.#digests.set(call.body, digest);
    }
    const deadline = Math.ceil(this.#now()) + call.timeout;
    flat.push(
      DEADLINE_HEADER,
      String(deadline),
      SIGNATURE_HEADER,
      signCall(this.#secret, { callId: call.id, method: call.method, path: call.path, deadline, bodyDigest: digest }),
      // In the head, so a runner verifies the signature before it takes a slot or reads the body.
      BODY_DIGEST_HEADER,
      digest,
    );
  }
}
