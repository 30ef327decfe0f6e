/**
 * Fault: the same runner was `127.0.0.1:PORT` in the gateway's labels and `runner-1` in its own,
 * so the two pages could not be joined without relabelling. Here one fleet (a simulated engine,
 * a runner given `--id runner-1` in the gateway's static `--runners` list, a gateway) serves a
 * call, and the id on the gateway's page is the runner's own, as its page says it, with the URL
 * kept apart in `GET /v1/runners`.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asOperator, chatBody, metrics, metricValue, postJson, startFleet, type Fleet } from '../support/fleet.ts';

describe('fault: one runner, one name in the gateway and the runner', () => {
  let fleet: Fleet;

  beforeAll(async () => {
    fleet = await startFleet({ nodes: 1, engineArgs: ['--ttft-ms', '0', '--itl-ms', '0', '--output-tokens', '2'] });
  });
  afterAll(() => fleet?.stop());

  it('returns the runner id in the gateway metrics labels that the runner own page carries', async () => {
    const res = await postJson(`${fleet.gateway.url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(200);
    expect(res.headers['sluice-runner-id']).toBe('runner-1');

    const runnerPage = await metrics(fleet.nodes[0]!.runner);
    expect(runnerPage).toMatch(/^target_info\{[^}]*service_instance_id="runner-1"/m);
    const gatewayPage = await metrics(fleet.gateway);
    const on = { gen_ai_request_model: 'sim-small', sluice_runner_id: 'runner-1' };
    expect(metricValue(gatewayPage, 'gen_ai_server_request_duration_count', on)).toBe(1);
    const host = new URL(fleet.nodes[0]!.runner.url).host;
    expect(gatewayPage).not.toContain(`sluice_runner_id="${host}"`);
  });

  it('returns the runner under its id with its URL beside it in GET /v1/runners', async () => {
    const res = await request(`${fleet.gateway.url}/v1/runners`, { headers: asOperator });
    const body = (await res.body.json()) as { data: Array<{ id: string; url: string; source: string }> };
    expect(body.data).toEqual([
      expect.objectContaining({ id: 'runner-1', url: fleet.nodes[0]!.runner.url, source: 'static' }),
    ]);
  });
});
