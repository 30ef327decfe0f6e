/** gateway/http/headers.ts: which of a client's headers reach the runner. */
import { describe, expect, it } from 'vitest';
import { forwardable } from '../../../gateway/http/headers.ts';

describe('forwardable', () => {
  it("returns the client's end-to-end headers without the gateway-only and hop-by-hop ones", () => {
    const headers = {
      'content-type': 'application/json',
      'x-custom': ['a', 'b'],
      authorization: 'Bearer sk-client',
      origin: 'https://app.example.com',
      prefer: 'respond-async',
      'sluice-invoke-type': 'detached',
      'sluice-callback-url': 'https://hooks.example/x?token=t',
      'idempotency-key': 'k1',
      'sluice-session': 's1',
      'sluice-priority': 'high',
      'sluice-flow': 'f1',
      connection: 'keep-alive',
      'keep-alive': 'timeout=5',
    };
    expect(forwardable(headers)).toEqual({ 'content-type': 'application/json', 'x-custom': ['a', 'b'] });
  });

  it("returns the added headers beside the client's", () => {
    expect(forwardable({ accept: 'text/event-stream' }, { 'x-request-id': 'r1' })).toEqual({
      accept: 'text/event-stream',
      'x-request-id': 'r1',
    });
  });
});
