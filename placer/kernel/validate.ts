/**
 * Option checks shared by every module's options.ts, so "must be a positive integer, got X"
 * reads the same everywhere and shows the bad value faithfully (NaN as NaN, "10" quoted).
 */

/** Node fires any longer timer at once (with a warning), so no duration may exceed it. */
export const MAX_TIMER_MS = 2_147_483_647;

/** Shows a bad value: strings quoted so `"10"` is told apart from `10`; NaN and Infinity as such. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' || value === undefined || value === null) return String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** Bounds for {@link checkInteger}. */
export interface IntegerBounds {
  /** Smallest accepted value: 0 for non-negative, 1 for positive. */
  min: 0 | 1;
  /** Largest accepted value. @default Number.MAX_SAFE_INTEGER */
  max?: number;
  /** Unit named in the too-large message, e.g. `ms`. */
  unit?: string;
}

/**
 * Returns `value` when it is a safe integer within bounds; otherwise throws what `fail` makes
 * of a message naming the option and the value.
 */
export function checkInteger(option: string, value: unknown, bounds: IntegerBounds, fail: Fail): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < bounds.min) {
    throw fail(
      `${option} must be a ${bounds.min === 1 ? 'positive' : 'non-negative'} integer, got ${show(value)}`,
      option,
    );
  }
  const max = bounds.max ?? Number.MAX_SAFE_INTEGER;
  if (value > max)
    throw fail(`${option} must be at most ${max}${bounds.unit ? ` ${bounds.unit}` : ''}, got ${show(value)}`, option);
  return value;
}

/** {@link checkInteger} for a duration in ms that ends up in a timer. */
export function checkMs(option: string, value: unknown, min: 0 | 1, fail: Fail): number {
  return checkInteger(option, value, { min, max: MAX_TIMER_MS, unit: 'ms' }, fail);
}

/** Bounds for {@link checkNumber}; both inclusive. */
export interface NumberBounds {
  /** Smallest accepted value. @default -Infinity */
  min?: number;
  /** Largest accepted value. @default Infinity */
  max?: number;
}

/**
 * Returns `value` when it is a finite number within bounds, for ratios and factors where a
 * fraction is meaningful; otherwise throws what `fail` makes of a message naming the option.
 */
export function checkNumber(option: string, value: unknown, bounds: NumberBounds, fail: Fail): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw fail(`${option} must be a finite number, got ${show(value)}`, option);
  }
  const { min, max } = bounds;
  if (min !== undefined && value < min) throw fail(`${option} must be at least ${min}, got ${show(value)}`, option);
  if (max !== undefined && value > max) throw fail(`${option} must be at most ${max}, got ${show(value)}`, option);
  return value;
}

/** Returns `value` when it is a function, such as an injected `random` or `now`. */
export function checkFunction<F>(option: string, value: F, fail: Fail): F {
  if (typeof value !== 'function') throw fail(`${option} must be a function, got ${show(value)}`, option);
  return value;
}

/**
 * Makes the error a failed check throws: each area passes its own config error class. The
 * checks pass the option's name too, for errors that carry it as a field.
 */
export type Fail = (message: string, option?: string) => Error;

/** Returns `value` when it has the four methods of a Logger; every module that takes one checks it so. */
export function checkLogger<L>(option: string, value: L, fail: Fail): L {
  const methods = ['debug', 'info', 'warn', 'error'] as const;
  const shape = value as Record<string, unknown> | null;
  if (typeof value !== 'object' || shape === null || methods.some((m) => typeof shape[m] !== 'function')) {
    throw fail(`${option} must have debug, info, warn and error methods, got ${show(value)}`, option);
  }
  return value;
}

/** The shortest runner token a gateway and a runner accept. */
export const RUNNER_TOKEN_MIN_LENGTH = 16;

/**
 * The one rule for the shared secret runners present to gateways, applied by both sides: at
 * least {@link RUNNER_TOKEN_MIN_LENGTH} printable ASCII characters without spaces, so that a
 * runner refuses at start a token every gateway would refuse. The message never shows the
 * value: it is a secret.
 */
export function checkRunnerToken(option: string, value: unknown, fail: Fail): string {
  if (typeof value !== 'string' || value.length < RUNNER_TOKEN_MIN_LENGTH || !/^[\x21-\x7e]+$/.test(value)) {
    throw fail(
      `${option} must be a string of at least ${RUNNER_TOKEN_MIN_LENGTH} printable ASCII characters without spaces`,
      option,
    );
  }
  return value;
}

/** The checks above with an area's error bound in, so a module names its error class once. */
export interface Checks {
  /** The area's error for a message, for checks of the module's own. */
  fail: Fail;
  integer(option: string, value: unknown, bounds: IntegerBounds): number;
  ms(option: string, value: unknown, min: 0 | 1): number;
  number(option: string, value: unknown, bounds: NumberBounds): number;
  fn<F>(option: string, value: F): F;
  logger<L>(option: string, value: L): L;
  runnerToken(option: string, value: unknown): string;
  /** {@link resolveOptions} with this area's error. */
  resolve<D extends object>(
    defaults: D,
    rules: { readonly [K in keyof D]?: Rule },
    options: { readonly [K in keyof D]?: unknown },
  ): Resolved<D>;
}

/**
 * The checks of this file throwing `ErrorClass`: `const check = checksFor(GatewayConfigError)`,
 * then `check.ms('callTimeout', value, 1)`. One helper in place of a `fail` in every module.
 */
export function checksFor(ErrorClass: new (message: string) => Error): Checks {
  return checksWith((message) => new ErrorClass(message));
}

/**
 * {@link checksFor} with the error made by `fail`, for an area whose error takes more than the
 * message: `checksWith((message, option) => new SimOptionError(option ?? '', message))`.
 */
export function checksWith(fail: Fail): Checks {
  return Object.freeze({
    fail,
    integer: (option: string, value: unknown, bounds: IntegerBounds) => checkInteger(option, value, bounds, fail),
    ms: (option: string, value: unknown, min: 0 | 1) => checkMs(option, value, min, fail),
    number: (option: string, value: unknown, bounds: NumberBounds) => checkNumber(option, value, bounds, fail),
    fn: <F>(option: string, value: F) => checkFunction(option, value, fail),
    logger: <L>(option: string, value: L) => checkLogger(option, value, fail),
    runnerToken: (option: string, value: unknown) => checkRunnerToken(option, value, fail),
    resolve: <D extends object>(
      defaults: D,
      rules: { readonly [K in keyof D]?: Rule },
      options: { readonly [K in keyof D]?: unknown },
    ) => resolveOptions(defaults, rules, options, fail),
  });
}

/** One option's check: returns the value when it passes, else throws what `fail` makes. */
export type Rule = (option: string, value: unknown, fail: Fail) => unknown;

/** The checks above as rules, for {@link resolveOptions}. */
export const rule = Object.freeze({
  integer:
    (bounds: IntegerBounds): Rule =>
    (option, value, fail) =>
      checkInteger(option, value, bounds, fail),
  ms:
    (min: 0 | 1): Rule =>
    (option, value, fail) =>
      checkMs(option, value, min, fail),
  number:
    (bounds: NumberBounds): Rule =>
    (option, value, fail) =>
      checkNumber(option, value, bounds, fail),
  fn: (): Rule => (option, value, fail) => checkFunction(option, value, fail),
  logger: (): Rule => (option, value, fail) => checkLogger(option, value, fail),
});

/** A default's type as an option's: `600000` is a number, not the literal. */
type Widen<T> = T extends number ? number : T extends string ? string : T extends boolean ? boolean : T;

/** What {@link resolveOptions} returns: every defaulted option, of its widened type. */
export type Resolved<D> = { readonly [K in keyof D]: Widen<D[K]> };

/**
 * The one way options meet their defaults: each key of `defaults` takes the option's value, or
 * the default when the option is undefined, then its rule's check, in the order of `rules`
 * (so the first bad option is the one named). Keys without a rule are taken as they are.
 * Returns the checked values, frozen.
 */
export function resolveOptions<D extends object>(
  defaults: D,
  rules: { readonly [K in keyof D]?: Rule },
  options: { readonly [K in keyof D]?: unknown },
  fail: Fail,
): Resolved<D> {
  const out: Record<string, unknown> = {};
  // Only undefined means "not given", as in a destructuring default; null is checked as given.
  const given = (key: string): unknown => {
    const value = (options as Record<string, unknown>)[key];
    return value === undefined ? (defaults as Record<string, unknown>)[key] : value;
  };
  for (const [key, check] of Object.entries(rules) as [string, Rule | undefined][])
    out[key] = check ? check(key, given(key), fail) : given(key);
  for (const key of Object.keys(defaults)) if (!Object.hasOwn(out, key)) out[key] = given(key);
  return Object.freeze(out) as Resolved<D>;
}
