/**
 * Options of the callback sender, their defaults, and the checks run once at construction so
 * a bad setting fails at startup rather than at the first finished call.
 */
import { systemClock } from '../../placer/kernel/index.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { checksFor, show } from '../../placer/kernel/index.ts';
import { CallbackConfigError } from './errors.ts';
import { parseWebhookSecret } from './signing.ts';
import type { CallbackPolicy } from './targets.ts';

/** Options for {@link createCallbackSender}. */
export interface CallbackSenderOptions {
  /** `whsec_`-prefixed base64 signing secret, shared with the receivers. */
  secret: string;
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
  readonly secret: string;
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

/** The policy's defaults (createCallbackPolicy); `--callback-allow-private` shows this one. */
export const callbackPolicyDefaults = Object.freeze({ allowPrivate: false });

// A callback retried past this many times is not going to land; more only keeps sockets busy.
const MAX_ATTEMPTS = 20;

const check = checksFor(CallbackConfigError);

/**
 * Applies defaults and validates every option.
 * @throws {@link CallbackConfigError} naming the option and its bad value, or
 *   {@link CallbackSecretError} for a malformed secret.
 */
export function resolveSenderOptions(options: CallbackSenderOptions): CallbackSenderConfig {
  const d = callbackSenderDefaults;
  const {
    secret,
    policy,
    attempts = d.attempts,
    backoffBase = d.backoffBase,
    backoffCap = d.backoffCap,
    timeout = d.timeout,
    clock = d.clock,
    random = d.random,
    logger = d.logger,
  } = options;
  parseWebhookSecret(secret);
  if (typeof policy?.check !== 'function') throw check.fail(`policy must be a CallbackPolicy (from createCallbackPolicy), got ${show(policy)}`);
  const config: CallbackSenderConfig = {
    secret,
    policy,
    attempts: check.integer('attempts', attempts, { min: 1, max: MAX_ATTEMPTS }),
    backoffBase: check.ms('backoffBase', backoffBase, 0),
    backoffCap: check.ms('backoffCap', backoffCap, 0),
    timeout: check.ms('timeout', timeout, 1),
    clock,
    random,
    logger,
  };
  if (config.backoffCap < config.backoffBase) throw check.fail(`backoffCap must be at least backoffBase (${config.backoffBase} ms), got ${backoffCap}`);
  if (typeof clock?.now !== 'function' || typeof clock.sleep !== 'function') throw check.fail('clock must have now() and sleep(ms, signal)');
  if (typeof random !== 'function') throw check.fail(`random must be a function, got ${show(random)}`);
  check.logger('logger', logger);
  return Object.freeze(config);
}
