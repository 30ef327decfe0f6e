/**
 * Reading how a client wants a call run: RFC 7240's `Prefer: respond-async[, wait=N]`, or
 * `sluice-invoke-type: detached` (Fn's header, for clients that cannot set Prefer).
 */
import { InvalidPreferError } from '../errors.ts';
import { INVOKE_TYPE_HEADER } from '../http/index.ts';

/** What the client asked for. */
export interface CallPreference {
  /** Answer 202 once a runner commits, keep the result to fetch later. */
  detached: boolean;
  /** Seconds to hold the request open for the whole result before answering 202 (wait=N). */
  waitSeconds: number | undefined;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Longest wait=N honoured; a client asking for more waits this long, then gets the 202. */
const MAX_WAIT_SECONDS = 600;

/**
 * Parses the preferences; unknown preferences are ignored as RFC 7240 asks, malformed syntax
 * or a bad wait value is refused with {@link InvalidPreferError}.
 */
export function parsePreference(
  prefer: string | string[] | undefined,
  invokeType: string | string[] | undefined,
): CallPreference {
  let detached = false;
  let waitSeconds: number | undefined;
  const values = prefer === undefined ? [] : Array.isArray(prefer) ? prefer : [prefer];
  for (const value of values) {
    for (const item of splitList(value)) {
      const [pair] = item.split(';');
      const eq = pair!.indexOf('=');
      const name = (eq === -1 ? pair! : pair!.slice(0, eq)).trim().toLowerCase();
      const raw = eq === -1 ? undefined : unquote(pair!.slice(eq + 1).trim());
      if (!TOKEN.test(name))
        throw new InvalidPreferError(`Prefer header is malformed near ${JSON.stringify(item.trim())}`);
      if (name === 'respond-async') detached = true;
      else if (name === 'wait') {
        if (raw === undefined || !/^\d+$/.test(raw)) {
          throw new InvalidPreferError(
            `Prefer wait must be a whole number of seconds, got ${JSON.stringify(raw ?? '')}`,
          );
        }
        waitSeconds = Math.min(Number(raw), MAX_WAIT_SECONDS);
      }
    }
  }
  if (invokeType !== undefined) {
    const type = (Array.isArray(invokeType) ? invokeType[0]! : invokeType).trim().toLowerCase();
    if (type === 'detached') detached = true;
    else if (type !== 'sync') {
      throw new InvalidPreferError(`${INVOKE_TYPE_HEADER} must be sync or detached, got ${JSON.stringify(type)}`);
    }
  }
  return { detached, waitSeconds };
}

/** Splits a header list on commas outside quoted strings; empty items are skipped. */
function splitList(value: string): string[] {
  const items: string[] = [];
  let current = '';
  let quoted = false;
  for (const ch of value) {
    if (ch === '"') quoted = !quoted;
    if (ch === ',' && !quoted) {
      items.push(current);
      current = '';
    } else current += ch;
  }
  if (quoted) throw new InvalidPreferError('Prefer header has an unterminated quoted string');
  items.push(current);
  return items.filter((item) => item.trim() !== '');
}

function unquote(value: string): string {
  return value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value;
}
