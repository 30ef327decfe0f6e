/**
 * Fault: resetting an HTTP/2 stream did not cancel the call. On the TLS front a client that
 * reset its stream (or dropped its connection) left the call running: the engine kept
 * generating, and the key's concurrent-call lease, the runner's slot and the gateway's in-flight
 * count stayed taken until the call timeout (600 s), since Node's HTTP/2 compatibility response
 * reads `writableFinished` true after a reset and that was the test of "the client is gone".
 *
 * Real sockets on 127.0.0.1, Node's own HTTP/2 client, and a gateway, runner and simulated
 * engine in-process. The engine's calls run for minutes unless abandoned, so every count that
 * comes back to 0 was given back by the reset. Each phase of a call is reset once the spec
 * has seen the call reach it; "within a few seconds" bounds what a loaded machine cannot break,
 * far below the call timeout the leak lasted for.
 */
import { constants } from 'node:http2';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeCa } from '../support/certs.ts';
import type { TestCa } from '../support/certs.ts';
import { chatBody, eventually } from '../support/fleet.ts';
import { h2Call, startH2Fleet } from '../support/h2-fleet.ts';
import type { FleetCounts, H2Call, H2Fleet } from '../support/h2-fleet.ts';

const CHAT = '/v1/chat/completions';
/** The bound on a reset's effects: several seconds, far below the 600 s the leak lasted. */
const SETTLES_WITHIN_MS = 5000;

let ca: TestCa;
beforeAll(() => {
  ca = makeCa('h2-reset');
});
afterAll(() => ca.remove());

let fleet: H2Fleet;
afterEach(async () => {
  await fleet?.stop();
});

/** Polls until every count in `want` holds. */
async function settles(want: Partial<FleetCounts>, what: string): Promise<FleetCounts> {
  let last: FleetCounts | undefined;
  await eventually(
    async () => {
      last = await fleet.counts();
      return Object.entries(want).every(([name, value]) => last![name as keyof FleetCounts] === value);
    },
    SETTLES_WITHIN_MS,
    `${what}: want ${JSON.stringify(want)}`,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; last ${JSON.stringify(last)}`);
  });
  return last!;
}

/** Everything given back, with `engineCalls` offered to the engine in all. */
const idle = (engineCalls: number): Partial<FleetCounts> => ({
  inFlight: 0,
  uploads: 0,
  queued: 0,
  leases: 0,
  slots: 0,
  engineRunning: 0,
  engineCalls,
});

/** A call that runs on the runner's one slot, streaming, until the spec resets it. */
async function blocker(): Promise<H2Call> {
  const call = h2Call(await fleet.session(), CHAT, chatBody({ stream: true }));
  await settles({ engineRunning: 1, slots: 1 }, 'the blocker to run');
  return call;
}

const reset = (call: H2Call): void => {
  call.stream.close(constants.NGHTTP2_CANCEL);
};

describe('an HTTP/2 client that resets its stream', () => {
  it('gives back its upload and its key lease when reset while its body is being sent', async () => {
    fleet = await startH2Fleet(ca);
    const call = h2Call(await fleet.session(), CHAT, '{"model": "sim-small", "messa', {
      open: true,
      headers: { 'content-length': '200' },
    });
    await settles({ uploads: 1, leases: 1 }, 'the upload to start');
    reset(call);
    await settles(idle(0), 'the upload to be given back');
  });

  // The slot it waited for frees at the blocker's end: a call still queued would be offered to the engine.
  it.each([
    ['leaves the queue and never runs when reset while it waits for a runner', 'the second call', {}],
    [
      'is not run when a detached call is reset while it waits for a runner to commit',
      'the detached call',
      { prefer: 'respond-async' },
    ],
  ])('%s', async (_name, what, headers) => {
    fleet = await startH2Fleet(ca);
    const running = await blocker();
    const waiting = h2Call(await fleet.session(), CHAT, chatBody(), { headers });
    await settles({ queued: 1, inFlight: 2, leases: 2 }, `${what} to wait`);
    reset(waiting);
    await settles({ queued: 0, inFlight: 1, leases: 1, engineRunning: 1 }, `${what} to leave`);
    reset(running);
    const after = await settles(idle(1), 'the blocker to end');
    expect(after.engineAborted).toBe(1);
  });

  it("aborts the engine's work when reset while it waits for its answer", async () => {
    fleet = await startH2Fleet(ca);
    // Not streamed: the engine answers only at its end, minutes away.
    const call = h2Call(await fleet.session(), CHAT, chatBody());
    await settles({ engineRunning: 1, slots: 1, inFlight: 1, leases: 1 }, 'the call to run');
    reset(call);
    const after = await settles(idle(1), 'the call to be abandoned');
    expect(after.engineAborted).toBe(1);
  });

  it("aborts the engine's work when reset while its answer streams", async () => {
    fleet = await startH2Fleet(ca);
    const call = h2Call(await fleet.session(), CHAT, chatBody({ stream: true }));
    expect((await call.head)?.[':status']).toBe(200);
    await eventually(() => call.received().includes('data: '), SETTLES_WITHIN_MS, 'the first event');
    reset(call);
    const after = await settles(idle(1), 'the stream to be abandoned');
    expect(after.engineAborted).toBe(1);
  });

  it("aborts the engine's work when its connection drops while its answer streams", async () => {
    fleet = await startH2Fleet(ca);
    const session = await fleet.session();
    const call = h2Call(session, CHAT, chatBody({ stream: true }));
    await eventually(() => call.received().includes('data: '), SETTLES_WITHIN_MS, 'the first event');
    session.destroy();
    const after = await settles(idle(1), 'the stream to be abandoned');
    expect(after.engineAborted).toBe(1);
  });

  it('ends a whole answer as it ended before: nothing is aborted', async () => {
    fleet = await startH2Fleet(ca, {}, { outputTokens: 3, itlMs: 0 });
    const call = h2Call(await fleet.session(), CHAT, chatBody({ stream: true }));
    await call.closed;
    expect(call.received()).toContain('data: [DONE]');
    const after = await settles(idle(1), 'the call to end');
    expect(after.engineAborted).toBe(0);
  });
});
