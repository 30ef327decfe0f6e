import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { InvalidPriorityError } from '../../../gateway/errors.ts';
import { turnOf } from '../../../gateway/calls/placement.ts';
import { expectThrows } from '../../support/throws.ts';

/** A request as turnOf reads it: its headers and its peer's address. */
const request = (headers: Record<string, string | string[]>, remoteAddress = '127.0.0.7'): IncomingMessage =>
  ({ headers, socket: { remoteAddress } }) as unknown as IncomingMessage;

describe('turnOf', () => {
  it.each<[Record<string, string | string[]>, string | undefined, { priority: string; flow: string }]>([
    [{}, undefined, { priority: 'batch', flow: '127.0.0.7' }],
    [{ 'sluice-priority': 'interactive' }, undefined, { priority: 'interactive', flow: '127.0.0.7' }],
    [{ 'sluice-priority': ' Interactive ' }, 'alice', { priority: 'interactive', flow: 'alice' }],
    [{ 'sluice-priority': ['batch', 'interactive'] }, undefined, { priority: 'batch', flow: '127.0.0.7' }],
    [{ 'sluice-flow': 'team-a' }, 'alice', { priority: 'batch', flow: 'team-a' }],
    [{ 'sluice-flow': '  ' }, 'alice', { priority: 'batch', flow: 'alice' }],
    [{}, '', { priority: 'batch', flow: '127.0.0.7' }],
  ])('reads headers %j with user %j as %j', (headers, user, turn) => {
    expect(turnOf(request(headers), user, 'batch')).toEqual(turn);
  });

  it('takes the default priority when the header is absent', () => {
    expect(turnOf(request({}), undefined, 'interactive').priority).toBe('interactive');
  });

  it('cuts a flow key to 256 characters', () => {
    expect(turnOf(request({ 'sluice-flow': 'f'.repeat(1_000) }), undefined, 'batch').flow).toBe('f'.repeat(256));
  });

  it('refuses a priority that names no class, naming the header and the value', () => {
    const error = expectThrows(
      () => turnOf(request({ 'sluice-priority': 'urgent' }), undefined, 'batch'),
      InvalidPriorityError,
      { code: 'GW_INVALID_PRIORITY', status: 400 },
    );
    expect(error.message).toContain('sluice-priority');
    expect(error.message).toContain('"urgent"');
  });
});
