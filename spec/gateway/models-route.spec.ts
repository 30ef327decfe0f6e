/**
 * GET /v1/models on a real gateway on port 0: each model's `created` is the time, in whole
 * seconds, at which the gateway first saw it, and stays that time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryDeploymentStore } from '../../gateway/control/store.ts';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { systemClock } from '../../placer/kernel/index.ts';
import { OPERATOR_TOKEN, eventually, getJson } from '../support/fleet.ts';
import { putLlama } from './control/fake-fleet.ts';

let gateway: Gateway | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

/** A clock set a day back, so that `created` cannot pass for the time of the answer by chance. */
const DAY = 86_400_000;
const dayBack = { now: () => systemClock.now() - DAY, sleep: systemClock.sleep };

describe('GET /v1/models', () => {
  it('gives each model the second the gateway first saw it as created', async () => {
    gateway = createGateway({
      runnerToken: 'a-runner-token-long-enough',
      operatorTokens: [OPERATOR_TOKEN],
      deployments: new MemoryDeploymentStore({ now: () => 1_000 }),
      clock: dayBack,
    });
    const { url } = await gateway.listen();
    expect(await putLlama(url)).toBe(201);
    const before = Math.floor(dayBack.now() / 1000);
    let listed: { id: string; created: number }[] = [];
    await eventually(async () => {
      listed = ((await getJson(`${url}/v1/models`)).json as { data: typeof listed }).data;
      return listed.length > 0;
    });
    const after = Math.floor(dayBack.now() / 1000);
    expect(listed[0]!.id).toBe('org/llama');
    expect(listed[0]!.created).toBeGreaterThanOrEqual(before);
    expect(listed[0]!.created).toBeLessThanOrEqual(after);
    const again = await getJson(`${url}/v1/models/org/llama`);
    expect(again.json).toMatchObject({ id: 'org/llama', created: listed[0]!.created });
  });
});
