/**
 * The generic `POST /invoke/:fn`: a call that produces no token stream but still takes a slot,
 * so it loads the engine and shows in its counters like any other call.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { admit, type SimCallContext } from './call.ts';
import { sendJson } from './http.ts';
import { playTokens } from './timing.ts';

/**
 * Serves a generic function call: holds a slot for as long as a default-length generation with an
 * empty prompt (prefill overhead, then outputTokens inter-token gaps, each slowed by the load at
 * the time), then describes the body it got, so a test can check what the gateway forwarded
 * without the engine caring what the body means.
 */
export async function handleInvoke(
  ctx: SimCallContext,
  fn: string,
  headers: IncomingHttpHeaders,
  body: Buffer,
  res: ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  const release = await admit(ctx, res, signal);
  if (release === undefined) return;
  let completed = false;
  try {
    // outputTokens + 1 steps: the prefill, then one gap per output token, as before the model had load.
    const schedule = ctx.timing.plan({
      promptTokens: 0,
      outputTokens: ctx.options.outputTokens + 1,
      running: () => ctx.scheduler.running,
    });
    if ((await playTokens(schedule, () => undefined, signal)) === 'aborted') return;
    sendJson(res, 200, { fn, bytes: body.length, contentType: headers['content-type'] ?? null });
    completed = true;
  } finally {
    release(completed ? 'completed' : 'aborted');
  }
}
