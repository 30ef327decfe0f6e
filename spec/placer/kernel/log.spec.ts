import { describe, expect, it } from 'vitest';
import { createJsonLogger, createLogger, isLogFormat, isLogLevel, silentLogger } from '../../../placer/kernel/index.ts';
import type { LogLevel } from '../../../placer/kernel/index.ts';
import { PlacerTimeoutError } from '../../../placer/errors.ts';

/** A logger writing into an array, and the lines parsed. */
function capture(
  options: { level?: LogLevel; fields?: Record<string, unknown>; redact?: (text: string) => string } = {},
) {
  const lines: string[] = [];
  const logger = createJsonLogger({ ...options, write: (line) => lines.push(line) });
  const parsed = (): Array<Record<string, unknown>> => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  return { logger, lines, parsed };
}

describe('createJsonLogger', () => {
  it('returns one JSON object per line with time, level, msg and fields when logging', () => {
    const { logger, lines, parsed } = capture();
    logger.info('call placed', { callId: 'c1', runner: 'r1', attempts: 2 });
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain('\n');
    const [line] = parsed();
    expect(line).toMatchObject({ level: 'info', msg: 'call placed', callId: 'c1', runner: 'r1', attempts: 2 });
    expect(Object.keys(line!).slice(0, 3)).toEqual(['time', 'level', 'msg']);
    expect(new Date(line!.time as string).toISOString()).toBe(line!.time);
  });

  it('returns lines at info and above when no level is given', () => {
    const { logger, parsed } = capture();
    logger.debug('d');
    logger.info('i');
    logger.warn('w');
    logger.error('e');
    expect(parsed().map((l) => l.level)).toEqual(['info', 'warn', 'error']);
  });

  it.each<[LogLevel, string[]]>([
    ['debug', ['debug', 'info', 'warn', 'error']],
    ['info', ['info', 'warn', 'error']],
    ['warn', ['warn', 'error']],
    ['error', ['error']],
    ['silent', []],
  ])('returns only lines at or above %s when that is the level', (level, expected) => {
    const { logger, parsed } = capture({ level });
    logger.debug('d');
    logger.info('i');
    logger.warn('w');
    logger.error('e');
    expect(parsed().map((l) => l.level)).toEqual(expected);
    expect(parsed().map((l) => l.msg)).toEqual(expected.map((l) => l[0]));
  });

  it('returns lines with the child fields and the call fields when logging through a child', () => {
    const { logger, parsed } = capture({ fields: { service: 'gateway' } });
    const child = logger.child({ runner: 'r1' });
    const grandchild = child.child({ callId: 'c9' });
    grandchild.warn('runner busy', { attempt: 3 });
    child.info('probe ok');
    logger.info('plain');
    expect(parsed()).toMatchObject([
      { msg: 'runner busy', service: 'gateway', runner: 'r1', callId: 'c9', attempt: 3 },
      { msg: 'probe ok', service: 'gateway', runner: 'r1' },
      { msg: 'plain', service: 'gateway' },
    ]);
    expect(parsed()[1]).not.toHaveProperty('callId');
    expect(parsed()[2]).not.toHaveProperty('runner');
  });

  it('returns the call field over the child field when both name the same key', () => {
    const { logger, parsed } = capture();
    logger.child({ runner: 'r1' }).info('m', { runner: 'r2' });
    logger.child({ runner: 'r1' }).child({ runner: 'r3' }).info('m');
    expect(parsed().map((l) => l.runner)).toEqual(['r2', 'r3']);
  });

  it('returns a child that keeps the parent level when the parent filters', () => {
    const { logger, parsed } = capture({ level: 'warn' });
    const child = logger.child({ runner: 'r1' });
    child.info('dropped');
    child.error('kept');
    expect(parsed().map((l) => l.msg)).toEqual(['kept']);
  });

  it('returns errors flattened to name, message and code when a field is an Error', () => {
    const { logger, lines, parsed } = capture();
    const coded = Object.assign(new Error('connect refused'), { code: 'ECONNREFUSED' });
    logger.error('probe failed', {
      error: coded,
      plain: new TypeError('bad'),
      sluice: new PlacerTimeoutError('no runner', 3),
    });
    const [line] = parsed();
    expect(line!.error).toEqual({ name: 'Error', message: 'connect refused', code: 'ECONNREFUSED' });
    expect(line!.plain).toEqual({ name: 'TypeError', message: 'bad' });
    expect(line!.sluice).toEqual({ name: 'PlacerTimeoutError', message: 'no runner', code: 'PLACER_TIMEOUT' });
    expect(lines[0]).not.toContain('stack');
    expect(lines[0]).not.toContain('at ');
  });

  it('returns errors flattened when an Error is a child field', () => {
    const { logger, parsed } = capture();
    logger.child({ cause: new RangeError('too far') }).warn('x');
    expect(parsed()[0]!.cause).toEqual({ name: 'RangeError', message: 'too far' });
  });

  it('returns without throwing and drops the line when a field is cyclic', () => {
    const { logger, lines } = capture();
    const cyclic: Record<string, unknown> = { name: 'loop' };
    cyclic.self = cyclic;
    expect(() => logger.error('cyclic', { cyclic })).not.toThrow();
    expect(() => logger.child({ cyclic }).info('cyclic child')).not.toThrow();
    expect(() => logger.info('bigint', { n: 10n })).not.toThrow();
    logger.info('after');
    expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(['after']);
  });

  it('returns URL passwords masked in every string, nested and in errors, when no redact is given', () => {
    const { logger, lines, parsed } = capture();
    const error = new Error('cannot reach redis://app:pw-123456@db:6379');
    logger
      .child({ store: 'redis://app:pw-123456@db:6379/0' })
      .warn('store down', { error, targets: [{ url: new URL('https://u:pw-123456@hooks.example') }] });
    expect(lines[0]).not.toContain('pw-123456');
    expect(parsed()[0]).toMatchObject({
      store: 'redis://app:***@db:6379/0',
      error: { message: 'cannot reach redis://app:***@db:6379' },
      targets: [{ url: 'https://u:***@hooks.example/' }],
    });
  });

  it('returns every string value, base fields and nested ones included, through the given redact', () => {
    const { logger, parsed } = capture({
      redact: (text) => text.replaceAll('s3cret', '***'),
      fields: { base: 'a s3cret' },
    });
    logger.info('static message', { token: 's3cret', error: new Error('bad s3cret'), list: ['s3cret'] });
    expect(parsed()[0]).toMatchObject({
      msg: 'static message',
      base: 'a ***',
      token: '***',
      error: { message: 'bad ***' },
      list: ['***'],
    });
  });

  it('returns without throwing when write throws', () => {
    const logger = createJsonLogger({
      write: () => {
        throw new Error('stream closed');
      },
    });
    expect(() => logger.error('x', { a: 1 })).not.toThrow();
  });
});

describe('silentLogger', () => {
  it('returns itself from child and writes nothing when called', () => {
    expect(silentLogger.child({ a: 1 })).toBe(silentLogger);
    expect(() => silentLogger.error('x', { cyclic: silentLogger })).not.toThrow();
  });
});

describe('isLogLevel', () => {
  it.each(['debug', 'info', 'warn', 'error', 'silent'])('returns true when given %s', (level) => {
    expect(isLogLevel(level)).toBe(true);
  });

  it.each(['INFO', 'trace', '', 'toString', '__proto__'])('returns false when given %j', (value) => {
    expect(isLogLevel(value)).toBe(false);
  });
});

describe('createLogger in the pretty format', () => {
  function pretty(
    options: { level?: LogLevel; fields?: Record<string, unknown>; redact?: (t: string) => string } = {},
  ) {
    const lines: string[] = [];
    const logger = createLogger({ ...options, format: 'pretty', write: (line) => lines.push(line) });
    return { logger, lines };
  }

  it('returns one readable line: time of day, level, message, then key=value fields', () => {
    const { logger, lines } = pretty({ fields: { component: 'gateway' } });
    logger.info('gateway listening', { url: 'http://127.0.0.1:8080', runners: ['a', 'b'], open: true });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^\d{2}:\d{2}:\d{2}\.\d{3} INFO {2}gateway listening component=gateway url=http:\/\/127\.0\.0\.1:8080 runners=\["a","b"\] open=true$/,
    );
  });

  it('quotes a string with a space, a quote or an equals sign, and keeps the line one line', () => {
    const { logger, lines } = pretty();
    logger.warn('first\nsecond', { reason: 'no runner', q: 'a"b', eq: 'k=v', empty: '' });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/ WARN {2}first second reason="no runner" q="a\\"b" eq="k=v" empty=""$/);
  });

  it('returns errors as name, code and message, and honours the level', () => {
    const { logger, lines } = pretty({ level: 'warn' });
    logger.info('dropped');
    logger.error('call failed', { error: new PlacerTimeoutError('too slow', 3) });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(
      'ERROR call failed error={"name":"PlacerTimeoutError","message":"too slow","code":"PLACER_TIMEOUT"}',
    );
  });

  it('hides secrets in the message, in string fields and in nested ones', () => {
    const redact = (text: string) => text.replaceAll('s3cret-token', '***');
    const { logger, lines } = pretty({ redact });
    logger.info('token s3cret-token', {
      url: 'redis://u:pw@h:6379',
      nested: { token: 's3cret-token' },
      t: 's3cret-token',
    });
    expect(lines[0]).not.toContain('s3cret-token');
    expect(lines[0]).toContain('token ***');
    expect(lines[0]).toContain('nested={"token":"***"} t=***');
    // The default redaction still applies under a custom one: only when the redactor does it.
    const plain = pretty();
    plain.logger.info('store', { url: 'redis://u:pw@h:6379' });
    expect(plain.lines[0]).toContain('url=redis://u:***@h:6379');
  });

  it('returns json lines for format json, as createJsonLogger', () => {
    const lines: string[] = [];
    createLogger({ format: 'json', write: (line) => lines.push(line) }).info('m', { a: 1 });
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'info', msg: 'm', a: 1 });
  });

  it('reads the format names', () => {
    expect(['json', 'pretty', 'text'].map(isLogFormat)).toEqual([true, true, false]);
  });
});
