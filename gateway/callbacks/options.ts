/**
 * Options of the callback sender, their defaults, and the checks run once at construction so
 * a bad setting fails at startup rather than at the first finished call.
 */
import { systemClock } from '../../placer/kernel/index.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { checksFor, rule, show } from '../../placer/kernel/index.ts';
import { CallbackConfigError } from './errors.ts';
import { parseWebhookSecret } from './signing.ts';
import type { CallbackPolicy } from './targets.ts';

/** Options for {@link createCallbackSender}. */
export interface CallbackSenderOptions {
  /**
   * `whsec_`-prefixed base64 signing secret, shared with the receivers; or several, newest first,
   * while one is rotated: each delivery then carries a signature by every one (Standard Webhooks
   * lists them space-separated), so each receiver moves to the new secret at its own pace.
   */
  secret: string | readonly string[];
  /** Where callbacks may go; see {@link createCallbackPolicy}. */
  policy: CallbackPolicy;
  /** Most delivery attempts per callback, the first included. @default see callbackSenderDefaults */
  attempts?: number;
  /** Backoff ceiling after the first failure, in ms; doubles per attempt. @default see callbackSenderDefaults */
  backoffBase?: number;
  /** Longest pause between attempts, in ms; also bounds Retry-After. @default see callbackSenderDefaults */
  backoffCap?: number;
  /** How long one attempt may take, connect to last body byte, in ms. @default see callbackSenderDefaults */
  timeout?: number;
  /** Time and pauses; `now` stamps webhook-timestamp, `sleep` waits out backoff. @default see callbackSenderDefaults */
  clock?: Clock;
  /** A number in [0, 1) for full jitter. @default see callbackSenderDefaults */
  random?: () => number;
  /** Gets one line per failed attempt; never the secret or the payload. @default see callbackSenderDefaults */
  logger?: Logger;
}

/** {@link CallbackSenderOptions} with defaults applied, checked, and frozen. */
export interface CallbackSenderConfig {
  /** The newest secret. */
  readonly secret: string;
  /** Every secret a delivery is signed with, newest first. */
  readonly secrets: readonly string[];
  readonly policy: CallbackPolicy;
  readonly attempts: number;
  readonly backoffBase: number;
  readonly backoffCap: number;
  readonly timeout: number;
  readonly clock: Clock;
  readonly random: () => number;
  readonly logger: Logger;
}

/** The sender's defaults, in one place. */
export const callbackSenderDefaults = Object.freeze({
  attempts: 5,
  backoffBase: 1000,
  backoffCap: 60_000,
  timeout: 10_000,
  clock: systemClock as Clock,
  random: Math.random,
  logger: silentLogger as Logger,
});

// A callback retried past this many times is not going to land; more only keeps sockets busy.
const MAX_ATTEMPTS = 20;
// A rotation needs two; a few more cover a rotation begun before the last one ended.
const MAX_SECRETS = 4;

/** How each defaulted option is checked, in the order the first bad one is reported. */
const senderRules = {
  attempts: rule.integer({ min: 1, max: MAX_ATTEMPTS }),
  backoffBase: rule.ms(0),
  backoffCap: rule.ms(0),
  timeout: rule.ms(1),
  random: rule.fn(),
  logger: rule.logger(),
};

const check = checksFor(CallbackConfigError);

/**
 * Applies defaults and validates every option.
 * @throws {@link CallbackConfigError} naming the option and its bad value, or
 *   {@link CallbackSecretError} for a malformed secret.
 */
export function resolveSenderOptions(options: CallbackSenderOptions): CallbackSenderConfig {
  const { policy } = options;
  const secrets = Object.freeze(Array.isArray(options.secret) ? [...options.secret] : [options.secret as string]);
  if (secrets.length === 0 || secrets.length > MAX_SECRETS)
    throw check.fail(`secret must be one secret or a list of 1 to ${MAX_SECRETS}, got ${secrets.length}`);
  for (const secret of secrets) parseWebhookSecret(secret);
  if (typeof policy?.check !== 'function')
    throw check.fail(`policy must be a CallbackPolicy (from createCallbackPolicy), got ${show(policy)}`);
  const checked = check.resolve(callbackSenderDefaults, senderRules, options);
  if (checked.backoffCap < checked.backoffBase)
    throw check.fail(`backoffCap must be at least backoffBase (${checked.backoffBase} ms), got ${checked.backoffCap}`);
  const { clock } = checked;
  if (typeof clock?.now !== 'function' || typeof clock.sleep !== 'function')
    throw check.fail('clock must have now() and sleep(ms, signal)');
  return Object.freeze({ ...checked, secret: secrets[0]!, secrets, policy });
}
