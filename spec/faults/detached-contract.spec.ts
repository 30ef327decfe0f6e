/**
 * Fault: detached calls broke their documented contract. The runner answered 202 before its
 * engine accepted the call, so an engine's 429 or 503 failed the call ("may have run") instead of
 * moving it to another runner as a sync call is; a call the runner stopped at the end of its budget
 * ended `expired` with GW_CALL_TIMEOUT and no result, where the docs promise `failed` with
 * RUNNER_ENGINE_TIMEOUT and what arrived. A spec per engine answer.
 */
import { describe, expect, it } from 'vitest';
import { chatBody, eventually, fleetForSuite, getJson, metrics, metricValue, postJson } from '../support/fleet.ts';

const ASYNC = { prefer: 'respond-async' };

/** Posts `count` detached calls and waits for each to end; returns their final records. */
async function runDetached(gateway: string, count: number, body = chatBody({ max_tokens: 3 })): Promise<any[]> {
  const accepted = await Promise.all(
    Array.from({ length: count }, () => postJson(`${gateway}/v1/chat/completions`, body, ASYNC)),
  );
  for (const a of accepted) expect(a.status).toBe(202);
  const records: any[] = [];
  for (const a of accepted) {
    let record: any;
    await eventually(
      async () => {
        record = (await getJson(`${gateway}/v1/calls/${a.json.id}`)).json;
        return record.status !== 'running';
      },
      15_000,
      `call ${a.json.id} to end`,
    );
    records.push(record);
  }
  return records;
}

for (const status of [429, 503] as const) {
  describe(`a detached call whose engine refuses it with ${status}`, () => {
    const suite = fleetForSuite(
      {
        nodes: 2,
        // The first engine refuses everything; the second serves.
        engineArgs: (i: number) => [
          '--ttft-ms',
          '0',
          '--itl-ms',
          '5',
          ...(i === 0 ? [`--failure-rate-${status}`, '1'] : []),
        ],
        runnerArgs: ['--slots', '4'],
      },
      60_000,
    );

    it('moves to another runner, as a sync call does, and runs there once', async () => {
      const records = await runDetached(suite.gw, 6);
      for (const record of records) {
        expect(record.status).toBe('succeeded');
        expect(record.runner).toBe('runner-2');
      }
      const refused = metricValue(await metrics(suite.fleet.nodes[0]!.engine), 'sluice_sim_injected_failures_total', {
        status: String(status),
      });
      expect(refused).toBeGreaterThanOrEqual(1);
      expect(metricValue(await metrics(suite.fleet.nodes[0]!.engine), 'sluice_sim_requests_completed_total')).toBe(0);
      expect(metricValue(await metrics(suite.fleet.nodes[1]!.engine), 'sluice_sim_requests_completed_total')).toBe(6);
    });
  });
}

describe('a detached call its runner stops at the end of its budget', () => {
  const suite = fleetForSuite(
    {
      nodes: 1,
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '50', '--output-tokens', '400'],
      gatewayArgs: ['--call-timeout', '1500ms'],
    },
    60_000,
  );

  it('ends failed with RUNNER_ENGINE_TIMEOUT and keeps the stream that arrived, under the engine status', async () => {
    const [record] = await runDetached(suite.gw, 1, chatBody({ stream: true, max_tokens: 400 }));
    expect(record.status).toBe('failed');
    expect(record.error.code).toBe('RUNNER_ENGINE_TIMEOUT');
    const result = await getJson(`${suite.gw}/v1/calls/${record.id}/result`);
    expect(result.status).toBe(200);
    expect(String(result.headers['content-type'])).toContain('text/event-stream');
    expect(result.text).toContain('data: {');
    expect(result.text).not.toContain('[DONE]');
  });

  it("ends failed with RUNNER_ENGINE_TIMEOUT and keeps the runner's 504 when the engine never answered", async () => {
    const [record] = await runDetached(suite.gw, 1, chatBody({ max_tokens: 400 }));
    expect(record.status).toBe('failed');
    expect(record.error.code).toBe('RUNNER_ENGINE_TIMEOUT');
    const result = await getJson(`${suite.gw}/v1/calls/${record.id}/result`);
    expect(result.status).toBe(504);
    expect(result.json.error.code).toBe('RUNNER_ENGINE_TIMEOUT');
  });
});
