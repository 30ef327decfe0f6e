/** gateway/access/key-health.ts: what a keyed gateway's client keys allow, in /readyz and in the log. */
import { describe, expect, it } from 'vitest';
import { ClientKeysWatch, clientKeysReasons } from '../../../gateway/access/key-health.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';

/** A logger keeping every info, warn and error line with its level. */
function recorder(lines: Array<LogFields & { level: string }>): Logger {
  const keep = (level: string) => (msg: string, fields?: LogFields) => void lines.push({ level, msg, ...fields });
  const logger: Logger = {
    debug: () => {},
    info: keep('info'),
    warn: keep('warn'),
    error: keep('error'),
    child: () => logger,
  };
  return logger;
}

describe('clientKeysReasons', () => {
  it.each([
    ['an open gateway', 'open', undefined, []],
    ['keys that cannot be read', 'keys', { size: 3, available: false }, ['client_keys_unavailable']],
    ['no key', 'keys', { size: 0 }, ['no_client_keys']],
    ['no key set at all', 'keys', undefined, ['no_client_keys']],
    ['a key', 'keys', { size: 1, available: true }, []],
  ] as const)('returns the reasons of %s', (_label, clients, keys, reasons) => {
    expect(clientKeysReasons(clients, keys)).toEqual(reasons);
  });
});

describe('ClientKeysWatch', () => {
  it('warns at start-up without a key, errs when the last one goes later, and says once when keys are back', () => {
    const keys = { size: 0, available: true };
    const lines: Array<LogFields & { level: string }> = [];
    const watch = new ClientKeysWatch({ clients: 'keys', keys, logger: recorder(lines) });
    expect(watch.reasons()).toEqual(['no_client_keys']);
    watch.check();
    keys.size = 2;
    watch.check();
    watch.check();
    keys.size = 0;
    keys.available = false;
    expect(watch.reasons()).toEqual(['client_keys_unavailable']);
    expect(lines.map((l) => [l.level, l.msg, l.reason])).toEqual([
      ['warn', 'no client key yet; every client call is refused until one is made', 'no_client_keys'],
      ['info', 'client keys back; client calls taken again', undefined],
      ['error', 'no client key left; every client call is refused', 'client_keys_unavailable'],
    ]);
  });

  it('logs nothing at start-up with a key, nor ever on an open gateway', () => {
    const lines: Array<LogFields & { level: string }> = [];
    new ClientKeysWatch({ clients: 'keys', keys: { size: 1 }, logger: recorder(lines) }).check();
    const open = new ClientKeysWatch({ clients: 'open', keys: { size: 0 }, logger: recorder(lines) });
    open.check();
    expect(open.reasons()).toEqual([]);
    expect(lines).toEqual([]);
  });
});
