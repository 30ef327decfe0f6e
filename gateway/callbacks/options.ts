/**
 * Options of the callback sender, their defaults, and the checks run once at construction so
 * a bad setting fails at startup rather than at the first finished call.
 */
import { systemClock } from '../../placer/kernel/index.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import type { Clock } from '../../placer/kernel/index.ts';
import { checkInteger, checkMs, show } from '../../placer/kernel/index.ts';
import { CallbackConfigError } from './errors.ts';
import { parseWebhookSecret } from './signing.ts';
import type { CallbackPolicy } from './targets.ts';

/** Options for {@link createCallbackSender}. */
export interface CallbackSenderOptions {
  /** `whsec_`-prefixed base64 signing secret, shared with the receivers. */
  secret: string;
  /** Where callbacks may go; see {@link createCallbackPolicy}. */
  policy: CallbackPolicy;
  /** Most delivery attempts per callback, the first included. @default 5 */
  attempts?: number;
  /** Backoff ceiling after the first failure, in ms; doubles per attempt. @default 1000 */
  backoffBase?: number;
  /** Longest pause between attempts, in ms; also bounds Retry-After. @default 60000 */
  backoffCap?: number;
  /** How long one attempt may take, connect to last body byte, in ms. @default 10000 */
  timeout?: number;
  /** Time and pauses; `now` stamps webhook-timestamp, `sleep` waits out backoff. @default systemClock */
  clock?: Clock;
  /** A number in [0, 1) for full jitter. @default Math.random */
  random?: () => number;
  /** Gets one line per failed attempt; never the secret or the payload. @default silentLogger */
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

// A callback retried past this many times is not going to land; more only keeps sockets busy.
const MAX_ATTEMPTS = 20;

/**
 * Applies defaults and validates every option.
 * @throws {@link CallbackConfigError} naming the option and its bad value, or
 *   {@link CallbackSecretError} for a malformed secret.
 */
export function resolveSenderOptions(options: CallbackSenderOptions): CallbackSenderConfig {
  const fail = (message: string): Error => new CallbackConfigError(message);
  const {
    secret,
    policy,
    attempts = 5,
    backoffBase = 1000,
    backoffCap = 60_000,
    timeout = 10_000,
    clock = systemClock,
    random = Math.random,
    logger = silentLogger,
  } = options;
  parseWebhookSecret(secret);
  if (typeof policy?.check !== 'function') throw fail(`policy must be a CallbackPolicy (from createCallbackPolicy), got ${show(policy)}`);
  const config: CallbackSenderConfig = {
    secret,
    policy,
    attempts: checkInteger('attempts', attempts, { min: 1, max: MAX_ATTEMPTS }, fail),
    backoffBase: checkMs('backoffBase', backoffBase, 0, fail),
    backoffCap: checkMs('backoffCap', backoffCap, 0, fail),
    timeout: checkMs('timeout', timeout, 1, fail),
    clock,
    random,
    logger,
  };
  if (config.backoffCap < config.backoffBase) throw fail(`backoffCap must be at least backoffBase (${config.backoffBase} ms), got ${backoffCap}`);
  if (typeof clock?.now !== 'function' || typeof clock.sleep !== 'function') throw fail('clock must have now() and sleep(ms, signal)');
  if (typeof random !== 'function') throw fail(`random must be a function, got ${show(random)}`);
  if (typeof logger?.warn !== 'function') throw fail('logger must be a Logger');
  return Object.freeze(config);
}
