/** What the detached integration specs check of a cancel: its answer, and the engine's abort. */
import { expect } from 'vitest';
import { eventually, metrics, metricValue, postJson } from '../../support/fleet.ts';

/** The calls `engine` saw their client abort so far (`sluice_sim_requests_aborted_total`). */
export async function abortedCalls(engine: { url: string }): Promise<number> {
  return metricValue(await metrics(engine), 'sluice_sim_requests_aborted_total');
}

/**
 * Cancels the call whose record is at `callUrl`, checks the answer says cancelled, and waits up to
 * `timeout` ms for `engine` to count one abort more than `before`.
 */
export async function cancelSeenByEngine(
  callUrl: string,
  engine: { url: string },
  before: number,
  timeout: number,
): Promise<void> {
  const cancel = await postJson(`${callUrl}/cancel`, '');
  expect(cancel.status).toBe(200);
  expect(cancel.json.status).toBe('cancelled');
  await eventually(async () => (await abortedCalls(engine)) === before + 1, timeout, 'the engine abort');
}
