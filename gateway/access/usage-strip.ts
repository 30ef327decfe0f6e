/**
 * Taking out of a client's stream the usage the gateway asked the engine for on its own account
 * (access/token-budget.ts): the usage-only event that ends an OpenAI stream
 * (`"choices":[]` with a `"usage"` object) and the `"usage":null` field every other event then
 * carries. The client gets the stream it asked for; the gateway has read the usage from the
 * engine's bytes before this runs.
 *
 * It works on whole events, as the relay hands them over (it already holds a partial event back
 * until its end arrives), so an event is dropped or kept whole and nothing more is buffered. A
 * chunk without `"usage"` in it is passed on as it is, without a copy. A `"usage"` inside a
 * string value is escaped (`\"usage\"`), so only the field itself is ever matched.
 */

const USAGE = Buffer.from('"usage"');
/** An event's end: a blank line, in any of SSE's line endings. */
const EVENT_END = /(?<=\r\n\r\n|\n\n|\r\r)/;
const NULL_USAGE = /,\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,/g;
const EMPTY_CHOICES = /"choices"\s*:\s*\[\s*\]/;
const USAGE_OBJECT = /"usage"\s*:\s*\{/;

/** `events` (whole SSE events) without the injected usage; `events` itself when it holds none. */
export function stripInjectedUsage(events: Buffer): Buffer {
  if (events.indexOf(USAGE) === -1) return events;
  const kept: string[] = [];
  for (const event of events.toString('utf8').split(EVENT_END)) {
    if (EMPTY_CHOICES.test(event) && USAGE_OBJECT.test(event)) continue;
    kept.push(event.includes('"usage"') ? event.replace(NULL_USAGE, '') : event);
  }
  return Buffer.from(kept.join(''));
}
