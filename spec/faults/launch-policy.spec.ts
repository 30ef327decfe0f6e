/**
 * Hostile review round two, defect 3: an operator token ran any command on every on-demand
 * runner. `profile.binary: "/bin/bash"` with `env.BASH_ENV`, and `env.NODE_OPTIONS: "--require …"`
 * were accepted and launched; reserved flags were refused only by exact spelling, so argparse's
 * `--ho=0.0.0.0` (read as `--host`) and `--po 8000` passed.
 *
 * Each order is refused twice over: by the gateway, 400 GW_INVALID_DEPLOYMENT naming the field,
 * and by the runner itself when an order bypasses the gateway (its hosting driven with the order
 * directly), reported failed naming the field, with nothing launched. Values never appear.
 */
import { describe, expect, it } from 'vitest';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import type { RunnerEngine } from '../../runner/engine.ts';
import { Hosting } from '../../runner/hosting.ts';
import type { HostingOptions } from '../../runner/hosting.ts';
import type { EngineOrder, OrderedProfile } from '../../runner/protocol/index.ts';
import { Slots } from '../../runner/slots.ts';
import { OPERATOR_TOKEN, asOperator, getJson } from '../support/fleet.ts';
import { serversForEach } from '../support/servers.ts';

const BASH_ENV_VALUE = 'touch /tmp/sluice-spec-pwned-bash';
const NODE_OPTIONS_VALUE = '--require /tmp/sluice-spec-pwned.js';

/** The hostile orders of the review, each with the fields a refusal must name. */
const HOSTILE: ReadonlyArray<{ name: string; profile: Partial<OrderedProfile> & { kind: string }; fields: string[] }> =
  [
    {
      name: '/bin/bash with BASH_ENV',
      profile: { kind: 'vllm', binary: '/bin/bash', env: { BASH_ENV: BASH_ENV_VALUE } },
      fields: ['profile.binary', 'profile.env.BASH_ENV'],
    },
    {
      name: 'NODE_OPTIONS on the sim engine (a Node process)',
      profile: { kind: 'sim', env: { NODE_OPTIONS: NODE_OPTIONS_VALUE } },
      fields: ['profile.env.NODE_OPTIONS'],
    },
    {
      name: 'argparse abbreviations of --host and --port',
      profile: { kind: 'vllm', args: ['--ho=0.0.0.0', '--po', '8000'] },
      fields: ['profile.args[0]', 'profile.args[1]'],
    },
    {
      name: 'LD_PRELOAD',
      profile: { kind: 'llamacpp', env: { LD_PRELOAD: '/tmp/evil.so' } },
      fields: ['profile.env.LD_PRELOAD'],
    },
    {
      name: "TGI's -p with its value attached",
      profile: { kind: 'tgi', args: ['-p8000'] },
      fields: ['profile.args[0]'],
    },
    {
      name: '--trust-remote-code with a model from anywhere',
      profile: { kind: 'vllm', args: ['--trust-remote-code'] },
      fields: ['profile.args[0]'],
    },
    // vLLM takes the model as a positional argument: a model that is an option, its model in args.
    {
      name: 'an option smuggled in as the model',
      profile: { kind: 'vllm', model: '--trust-remote-code', args: ['attacker/evil-model'] },
      fields: ['profile.model'],
    },
  ];

const VALUES = [BASH_ENV_VALUE, NODE_OPTIONS_VALUE, '0.0.0.0', '/tmp/evil.so'];

const { cleanups } = serversForEach();

async function gateway(): Promise<string> {
  const gw: Gateway = createGateway({
    runnerToken: 'spec-runner-token-0123456789',
    operatorTokens: [OPERATOR_TOKEN],
    placerTimeout: 300,
  });
  const { url } = await gw.listen(0, '127.0.0.1');
  cleanups.push(() => gw.close());
  return url;
}

async function put(
  url: string,
  model: string,
  body: unknown,
): Promise<{ status: number; json: { error: { code: string; message: string; problems?: string[] } } }> {
  const res = await fetch(`${url}/v1/deployments/${encodeURIComponent(model)}`, {
    method: 'PUT',
    headers: { ...asOperator, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as never };
}

describe('the gateway refuses a deployment that would run what no runner operator allowed', () => {
  it.each(HOSTILE)('answers 400 naming the field for $name, and stores nothing', async ({ profile, fields }) => {
    const url = await gateway();
    const answer = await put(url, 'm', { profile });
    expect(answer.status).toBe(400);
    expect(answer.json.error.code).toBe('GW_INVALID_DEPLOYMENT');
    const problems = answer.json.error.problems ?? [];
    for (const field of fields)
      expect(
        problems.some((p) => p.includes(`${field} `)),
        `${field} in ${problems.join(' | ')}`,
      ).toBe(true);
    const text = JSON.stringify(answer.json);
    for (const value of VALUES) expect(text).not.toContain(value);
    const listed = await getJson(`${url}/v1/deployments`, asOperator);
    expect(listed.json.data).toEqual([]);
  });

  it('still takes a deployment within the defaults: an allowed variable and unreserved arguments', async () => {
    const url = await gateway();
    const answer = await put(url, 'm', {
      profile: {
        kind: 'vllm',
        args: ['--max-model-len', '8192', '--gpu-memory-utilization=0.9'],
        env: { HF_TOKEN: 'hf_spec' },
      },
    });
    expect(answer.status).toBe(201);
  });
});

/** An engine that records what it was asked to launch and launches nothing. */
function recordingEngine(): { engine: RunnerEngine; launched: unknown[] } {
  const launched: unknown[] = [];
  const engine = {
    unload: async () => {},
    launch: async (profile: unknown) => void launched.push(profile),
    drain: () => {},
    adapter: undefined,
    busyReason: () => 'starting',
  } as unknown as RunnerEngine;
  return { engine, launched };
}

function hosting(engine: RunnerEngine, extra: Partial<HostingOptions> = {}): Hosting {
  return new Hosting({
    engine,
    slots: new Slots(1),
    drainTimeout: 1000,
    inventory: () => ({ gpus: [], source: 'none', reason: 'spec' }),
    // Every binary exists and every port is free: only the launch policy can refuse.
    facts: () => ({
      gpuIndices: [],
      findBinary: async (name) => (name.startsWith('/') ? name : `/usr/bin/${name}`),
      portFree: async () => true,
    }),
    changed: () => {},
    logger: silentLogger,
    freePort: async () => 40_000,
    ...extra,
  });
}

const order = (replica: string, profile: Partial<OrderedProfile> & { kind: string }): EngineOrder => ({
  replica,
  model: 'm',
  profile: { model: 'm', gpus: 0, args: [], env: {}, ...profile },
});

describe('the runner refuses the same orders itself, when one bypasses the gateway', () => {
  it.each(HOSTILE)('reports $name failed, naming the field, and launches nothing', async ({ profile, fields }) => {
    const { engine, launched } = recordingEngine();
    const h = hosting(engine);
    h.order(order('rep-1', profile));
    await h.settled();
    const report = h.report();
    expect(report?.state).toBe('failed');
    expect(report!.reason).toContain(`${fields[0]} `);
    for (const value of VALUES) expect(report!.reason).not.toContain(value);
    expect(launched).toEqual([]);
  });

  it('launches an order within its policy, and a binary its operator listed', async () => {
    const { engine, launched } = recordingEngine();
    const h = hosting(engine);
    h.order(order('rep-ok', { kind: 'vllm', args: ['--max-model-len', '8192'], env: { HF_TOKEN: 'hf_spec' } }));
    await h.settled();
    expect(launched).toHaveLength(1);
    // `/opt/vllm/bin/vllm` is refused by default and launched once the runner's operator lists it
    // (runner option engineBinaries, `--engine-binary vllm=/opt/vllm/bin/vllm`).
    const refused = hosting(engine);
    refused.order(order('rep-path', { kind: 'vllm', binary: '/opt/vllm/bin/vllm' }));
    await refused.settled();
    expect(refused.report()).toMatchObject({ state: 'failed', reason: expect.stringContaining('profile.binary ') });
    const { policy } = await import('../../runner/options.ts').then((m) => ({
      policy: m.resolveRunnerOptions({ engineBinaries: ['vllm=/opt/vllm/bin/vllm'] } as never).launchPolicy,
    }));
    const listed = hosting(engine, { policy });
    listed.order(order('rep-path', { kind: 'vllm', binary: '/opt/vllm/bin/vllm' }));
    await listed.settled();
    expect(launched).toHaveLength(2);
  });
});
