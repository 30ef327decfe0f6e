/**
 * GET /readyz on a real gateway on port 0 with no runner: not ready while no call could be
 * taken, ready (with the note no_replica_yet) once a deployment at zero can start the replica a
 * call needs, since a load balancer reading it must keep sending the calls that start replicas.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryDeploymentStore } from '../../gateway/control/store.ts';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { OPERATOR_TOKEN, eventually, getJson } from '../support/fleet.ts';
import { putLlama } from './control/fake-fleet.ts';

let gateway: Gateway | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

async function start(): Promise<string> {
  gateway = createGateway({
    runnerToken: 'a-runner-token-long-enough',
    operatorTokens: [OPERATOR_TOKEN],
    deployments: new MemoryDeploymentStore({ now: () => 1_000 }),
  });
  return (await gateway.listen()).url;
}

describe('GET /readyz', () => {
  it('answers 503 no_ready_runner with no runner and no deployment', async () => {
    const url = await start();
    const res = await getJson(`${url}/readyz`);
    expect(res.status).toBe(503);
    expect(res.json).toMatchObject({ ready: false, reasons: ['no_ready_runner'], notes: [] });
  });

  it('answers 200 with the note no_replica_yet while a deployment is at zero', async () => {
    const url = await start();
    expect(await putLlama(url)).toBe(201);
    await eventually(async () => (await getJson(`${url}/readyz`)).status === 200, 10_000, 'ready');
    const res = await getJson(`${url}/readyz`);
    expect(res.json).toMatchObject({ ready: true, reasons: [], notes: ['no_replica_yet'] });
  });
});
