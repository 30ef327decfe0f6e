/**
 * Keeping secrets out of output. One place decides how a secret is hidden: the settings use it
 * for the values they quote, the logger for every string it writes, and the entry point for
 * every start-up failure it prints, so a secret stays hidden whichever way it was given and
 * whichever library's message happens to quote it.
 */

/** What stands in for a hidden secret. */
export const REDACTED = '***';

/**
 * Secrets shorter than this are not searched for in free text: a two-letter password would
 * blank out every word that contains it. URL passwords are masked whatever their length.
 */
export const MIN_SCRUBBED_LENGTH = 4;

/**
 * A URL scheme, then everything up to the last `@` before the next space or quote: the
 * userinfo. Deliberately loose: a malformed URL (`redis:/user:pw@host`, no port, an `@` or `/`
 * left unencoded in the password) is exactly what an error message quotes, so anything that
 * might be userinfo is treated as such; hiding a little too much is the safe mistake.
 */
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/{0,2})([^\s"<>]*)@/gi;

/**
 * `text` with the password of every URL in it masked: `redis://user:pw@host` becomes
 * `redis://user:***@host`. A userinfo without a colon (`redis://pw@host`) is masked whole,
 * since clients take a lone userinfo as a password as often as a user name.
 */
export function redactUrl(text: string): string {
  return text.replace(USERINFO, (_match, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(':');
    return `${scheme}${colon === -1 ? REDACTED : `${userinfo.slice(0, colon)}:${REDACTED}`}@`;
  });
}

/**
 * The secret parts of a URL (its password, or a lone userinfo), as given and percent-decoded,
 * for a {@link createRedactor} that must also find them outside the URL.
 */
export function urlSecrets(url: string): string[] {
  const found: string[] = [];
  for (const m of url.matchAll(USERINFO)) {
    const userinfo = m[2]!;
    const colon = userinfo.indexOf(':');
    const secret = colon === -1 ? userinfo : userinfo.slice(colon + 1);
    if (secret === '') continue;
    found.push(secret);
    try {
      const decoded = decodeURIComponent(secret);
      if (decoded !== secret) found.push(decoded);
    } catch {
      // A stray % leaves only the form as given to look for.
    }
  }
  return found;
}

/** Hides secrets in text. */
export type Redact = (text: string) => string;

/**
 * A function that replaces each of `secrets` in a text by {@link REDACTED}, as given and as
 * JSON would escape it, then masks URL passwords ({@link redactUrl}). Longer secrets go first
 * so that one containing another is hidden whole.
 */
export function createRedactor(secrets: Iterable<string>): Redact {
  const forms = new Set<string>();
  for (const secret of secrets) {
    if (typeof secret !== 'string' || secret.length < MIN_SCRUBBED_LENGTH) continue;
    forms.add(secret);
    forms.add(JSON.stringify(secret).slice(1, -1));
  }
  const ordered = [...forms].sort((a, b) => b.length - a.length);
  return (text) => {
    let out = text;
    for (const form of ordered) if (out.includes(form)) out = out.split(form).join(REDACTED);
    return redactUrl(out);
  };
}

/**
 * A request target as telemetry may show it: the path alone, without its query or fragment.
 * A client's query may carry a credential (`?api-key=...`) or a prompt, and a bare query word
 * may be one too, so neither names nor values are kept. Every span attribute and log field that
 * shows a request's target takes it from here.
 */
export function telemetryPath(target: string): string {
  const end = target.search(/[?#]/);
  return end === -1 ? target : target.slice(0, end);
}
