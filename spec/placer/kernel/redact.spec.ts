import { describe, expect, it } from 'vitest';
import { MIN_SCRUBBED_LENGTH, REDACTED, createRedactor, redactUrl, urlSecrets } from '../../../placer/kernel/index.ts';

describe('redactUrl', () => {
  it.each([
    ['redis://default:hunter22@127.0.0.1:6379/0', 'redis://default:***@127.0.0.1:6379/0'],
    ['rediss://u:p@ss@host:6379', 'rediss://u:***@host:6379'],
    ['redis://hunter22@127.0.0.1', 'redis://***@127.0.0.1'],
    ['redis:/default:hunter22@127.0.0.1:6379', 'redis:/default:***@127.0.0.1:6379'],
    ['redis://u:pa/ss@host', 'redis://u:***@host'],
    ['got "redis://u:pw@h:1" and mail me@example.com', 'got "redis://u:***@h:1" and mail me@example.com'],
    ['http://a.example/x, http://u:pw@b.example', 'http://a.example/x, http://u:***@b.example'],
  ])('returns %s with the password masked', (text, expected) => {
    expect(redactUrl(text)).toBe(expected);
  });

  it.each(['redis://127.0.0.1:6379/0', 'memory', 'https://hooks.example.com/a?b=c', 'me@example.com', ''])(
    'returns %j unchanged when it holds no userinfo',
    (text) => {
      expect(redactUrl(text)).toBe(text);
    },
  );
});

describe('urlSecrets', () => {
  it('returns the password as given and percent-decoded when a URL has one', () => {
    expect(urlSecrets('redis://u:p%40ss@h:1')).toEqual(['p%40ss', 'p@ss']);
    expect(urlSecrets('redis://u:plain@h:1')).toEqual(['plain']);
  });

  it('returns a lone userinfo, and nothing when there is no userinfo or an empty password', () => {
    expect(urlSecrets('redis://token123@h')).toEqual(['token123']);
    expect(urlSecrets('redis://h:1/0')).toEqual([]);
    expect(urlSecrets('redis://u:@h:1')).toEqual([]);
  });

  it('returns the form as given when percent-decoding fails', () => {
    expect(urlSecrets('redis://u:100%@h:1')).toEqual(['100%']);
  });
});

describe('createRedactor', () => {
  it('returns text with each secret replaced, as given and JSON-escaped, and URL passwords masked', () => {
    const redact = createRedactor(['tok-0123456789abcdef', 'q"uote\\d']);
    expect(redact('token tok-0123456789abcdef refused')).toBe(`token ${REDACTED} refused`);
    expect(redact(JSON.stringify({ v: 'q"uote\\d' }))).toBe(`{"v":"${REDACTED}"}`);
    expect(redact('q"uote\\d')).toBe(REDACTED);
    expect(redact('redis://u:other@h:1')).toBe('redis://u:***@h:1');
  });

  it('returns a secret that contains another hidden whole', () => {
    const redact = createRedactor(['abcd', 'abcdefgh']);
    expect(redact('x abcdefgh y')).toBe(`x ${REDACTED} y`);
  });

  it('returns text untouched by secrets shorter than the minimum, which would blank out words', () => {
    const short = 'a'.repeat(MIN_SCRUBBED_LENGTH - 1);
    expect(createRedactor([short])(`banana ${short}`)).toBe(`banana ${short}`);
  });
});
