/**
 * placer/kernel/abort.ts: a LazyAbort behaves as an AbortSignal for whoever reads it or waits on
 * it, undici included, and makes a real AbortSignal only when one is asked for.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { LazyAbort } from '../../../placer/kernel/abort.ts';

describe('LazyAbort', () => {
  it('tells each listener once, with the reason set, and not one taken off before', () => {
    const abort = new LazyAbort();
    const heard: string[] = [];
    const kept = () => heard.push(`kept:${String((abort.reason as Error).message)}`);
    const removed = () => heard.push('removed');
    abort.addEventListener('abort', kept);
    abort.addEventListener('abort', removed);
    abort.removeEventListener('abort', removed);
    expect(abort.aborted).toBe(false);
    abort.abort(new Error('client left'));
    abort.abort(new Error('a second abort changes nothing'));
    expect(abort.aborted).toBe(true);
    expect(heard).toEqual(['kept:client left']);
  });

  it('never tells a listener added once it has aborted, as an AbortSignal', () => {
    const abort = new LazyAbort();
    abort.abort();
    let heard = false;
    abort.addEventListener('abort', () => {
      heard = true;
    });
    expect(heard).toBe(false);
    expect(abort.reason).toBeInstanceOf(DOMException);
  });

  it('gives a signal that aborts with it, or is aborted already, with the same reason', () => {
    const before = new LazyAbort();
    const signal = before.signal;
    expect(before.signal).toBe(signal);
    const reason = new Error('gone');
    before.abort(reason);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(reason);

    const after = new LazyAbort();
    after.abort(reason);
    expect(after.signal.aborted).toBe(true);
    expect(after.signal.reason).toBe(reason);
  });

  it('cancels an undici request it is given as the signal, before the answer comes', async () => {
    const server = createServer(() => {
      // Never answers: only the abort can end the request.
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const abort = new LazyAbort();
      const { port } = server.address() as AddressInfo;
      const pending = request(`http://127.0.0.1:${port}/`, { signal: abort as unknown as AbortSignal });
      const reason = new Error('the client went away');
      setImmediate(() => abort.abort(reason));
      await expect(pending).rejects.toBe(reason);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
