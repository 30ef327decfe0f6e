/** A call as the gateway hands it to placement, for specs of the pool, the runner transport and detached calls. */
import type { GatewayCall } from '../../gateway/http/call.ts';

let made = 0;

/**
 * A sync chat call for model `sim-small` with an empty JSON body, made at `now`: 10 s to be placed
 * and 10 s to run, a fresh id and signal; `overrides` replace any field. The call's `abort` is
 * its signal unless given.
 */
export function gatewayCall(now: number, overrides: Partial<GatewayCall> = {}): GatewayCall {
  const signal = overrides.signal ?? new AbortController().signal;
  return {
    id: `call-${++made}`,
    fn: 'sim-small',
    key: 'sim-small',
    type: 'sync',
    placerDeadline: now + 10_000,
    signal,
    abort: signal,
    route: 'chat',
    method: 'POST',
    path: '/v1/chat/completions',
    headers: {},
    body: Buffer.from('{}'),
    createdAt: now,
    startedAt: now,
    timeout: 10_000,
    ...overrides,
  };
}
