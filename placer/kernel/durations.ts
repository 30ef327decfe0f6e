/**
 * Durations in messages. Times measured on a clock come with fractions of a millisecond
 * ("991.4951171875"), which no reader wants: every duration a message or error quotes goes
 * through {@link formatMs}, rounded to a whole millisecond.
 */

/** `ms` rounded to a whole millisecond, with its unit: `991.49` -> `991 ms`. */
export function formatMs(ms: number): string {
  return `${Math.round(ms)} ms`;
}
