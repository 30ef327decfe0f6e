import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from '../../../gateway/fleet/breaker.ts';
import { FakeClock } from '../../placer/fake.ts';

function breaker() {
  const clock = new FakeClock({ now: 0 });
  const b = new CircuitBreaker({ threshold: 5, openFor: 30_000, closeAfter: 2, clock });
  return { b, advance: (ms: number) => clock.advance(ms) };
}

describe('CircuitBreaker', () => {
  it('opens after 5 failures in a row, not after 4 or after failures broken by a success', () => {
    const { b } = breaker();
    for (let i = 0; i < 4; i++) b.failure();
    expect(b.state).toBe('closed');
    b.success();
    for (let i = 0; i < 4; i++) b.failure();
    expect(b.state).toBe('closed');
    b.failure();
    expect(b.state).toBe('open');
    expect(b.allows()).toBe(false);
  });

  it('half-opens after 30 s, and closes after 2 successes in a row', () => {
    const { b, advance } = breaker();
    for (let i = 0; i < 5; i++) b.failure();
    advance(29_999);
    expect(b.state).toBe('open');
    advance(1);
    expect(b.state).toBe('half-open');
    expect(b.allows()).toBe(true);
    b.success();
    expect(b.state).toBe('half-open');
    b.success();
    expect(b.state).toBe('closed');
  });

  it('opens again on a failure while half-open, for another full period', () => {
    const { b, advance } = breaker();
    for (let i = 0; i < 5; i++) b.failure();
    advance(30_000);
    b.success();
    b.failure();
    expect(b.state).toBe('open');
    advance(29_000);
    expect(b.state).toBe('open');
  });

  it('half-opens at once when an active probe finds the runner answering', () => {
    const { b } = breaker();
    for (let i = 0; i < 5; i++) b.failure();
    b.probeSucceeded();
    expect(b.state).toBe('half-open');
  });
});
