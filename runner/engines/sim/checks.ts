/**
 * The small value checks behind the simulator's option validation. Each returns the value (or the
 * fallback when it is undefined) or throws a {@link SimOptionError} whose message names the option
 * and shows the bad value, so a bad flag fails at start rather than on the first request.
 */
import { SimOptionError } from './errors.ts';

/** Shows a value in an error message: strings quoted, arrays listed, functions by name. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(show).join(', ')}]`;
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`;
  return String(value);
}

/** An integer of at least 1. */
export function positiveInteger(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw new SimOptionError(name, `${name} must be a positive integer, got ${show(value)}`);
  }
  return value;
}

/** An integer of at least 0; Infinity is refused on purpose, since an unbounded queue hides overload. */
export function nonNegativeInteger(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new SimOptionError(name, `${name} must be a non-negative integer, got ${show(value)}`);
  }
  return value;
}

/** A finite duration of at least 0 ms; fractions are allowed (prefill costs a fraction of a ms per token). */
export function nonNegativeMs(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new SimOptionError(name, `${name} must be a non-negative finite number of ms, got ${show(value)}`);
  }
  return value;
}

/** A finite number of at least 1: a load factor below 1 would make a busy engine faster. */
export function factorAtLeastOne(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1) {
    throw new SimOptionError(name, `${name} must be a finite number of at least 1, got ${show(value)}`);
  }
  return value;
}

/** A probability in [0, 1]. */
export function probability(name: string, value: unknown): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > 1) {
    throw new SimOptionError(name, `${name} must be a probability between 0 and 1, got ${show(value)}`);
  }
  return value;
}
