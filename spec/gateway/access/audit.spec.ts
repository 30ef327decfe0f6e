/** gateway/access/audit.ts: who changed what and when, never a token or a value. */
import { describe, expect, it } from 'vitest';
import { AuditLog, changedFields } from '../../../gateway/access/audit.ts';
import type { Caller } from '../../../gateway/access/scopes.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';

/** A logger keeping every info line. */
function infoRecorder(lines: LogFields[]): Logger {
  const logger: Logger = {
    debug: () => {},
    info: (msg, fields) => lines.push({ msg, ...fields }),
    warn: () => {},
    error: () => {},
    child: () => logger,
  };
  return logger;
}

describe('AuditLog', () => {
  it.each([
    [{ kind: 'operator', id: 'op-1' }, 'op-1'],
    [{ kind: 'viewer', id: 'view-1' }, 'view-1'],
    [{ kind: 'client', key: { id: 'k1', name: 'team', limits: {} } }, 'client:k1'],
    [{ kind: 'runner', token: 2 }, 'runner-token:2'],
    [{ kind: 'anonymous' }, 'anonymous'],
    [undefined, 'anonymous'],
  ] as const)('records %j by its credential id %s', (caller, credential) => {
    const lines: LogFields[] = [];
    new AuditLog(infoRecorder(lines), new FakeClock({ now: Date.UTC(2026, 0, 2, 3, 4, 5) })).record(
      caller as Caller | undefined,
      { action: 'key.delete', target: 'k9' },
    );
    expect(lines).toEqual([
      { msg: 'audit', audit: true, credential, action: 'key.delete', target: 'k9', at: '2026-01-02T03:04:05.000Z' },
    ]);
  });

  it('records the names of the fields changed, as a copy', () => {
    const lines: LogFields[] = [];
    const fields = ['maxReplicas'];
    new AuditLog(infoRecorder(lines), new FakeClock()).record(
      { kind: 'operator', id: 'op' },
      { action: 'deployment.put', target: 'm', fields },
    );
    fields.push('later');
    expect(lines[0]!.fields).toEqual(['maxReplicas']);
  });
});

describe('changedFields', () => {
  it('returns the dotted paths that differ, objects key by key and lists whole, sorted', () => {
    const before = { model: 'm', maxReplicas: 1, profile: { args: ['--a'], env: { HF_TOKEN: 'x', KEEP: 'y' } } };
    const after = {
      model: 'm',
      maxReplicas: 2,
      profile: { args: ['--a', '--b'], env: { HF_TOKEN: 'z', KEEP: 'y', NEW: 'n' } },
    };
    expect(changedFields(before, after)).toEqual([
      'maxReplicas',
      'profile.args',
      'profile.env.HF_TOKEN',
      'profile.env.NEW',
    ]);
  });

  it('returns every field of the value when there was none before, and of the old one when it went', () => {
    expect(changedFields(undefined, { a: 1, b: { c: 2 } })).toEqual(['a', 'b.c']);
    expect(changedFields({ a: 1 }, undefined)).toEqual(['a']);
  });

  it('returns nothing for equal values, and the path for a value that changed type', () => {
    expect(changedFields({ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] })).toEqual([]);
    expect(changedFields({ a: { b: 1 } }, { a: 'flat' })).toEqual(['a']);
  });
});
