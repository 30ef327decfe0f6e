/** What a runner registers with a gateway, and what the gateway's address policy says of a URL. */
import { expect } from 'vitest';
import { InvalidRegistrationError } from '../../gateway/errors.ts';
import type { RunnerAddressPolicy } from '../../gateway/fleet/registration-policy.ts';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import type { RunnerRegistration } from '../../runner/protocol/index.ts';
import { OPERATOR_TOKEN } from './fleet.ts';

/** The load of a runner with four slots, none in use. */
export const IDLE_LOAD = Object.freeze({ slotsInUse: 0, slots: 4, queue: 0, models: {} });

/** A ready runner `id` at `url` with four free slots, serving `sim-small` and holding no GPUs. */
export function registration(id: string, url: string): RunnerRegistration {
  return {
    id,
    url,
    version: 'test',
    engines: [],
    models: ['sim-small'],
    slots: 4,
    gpus: { gpus: [], source: 'none' },
    ready: true,
    load: IDLE_LOAD,
  };
}

/** What the policy says of `url`: 'ok', or the message of its GW_INVALID_REGISTRATION refusal. */
export function verdict(policy: RunnerAddressPolicy, url: string): string {
  try {
    policy.check(new URL(url));
    return 'ok';
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidRegistrationError);
    expect((error as InvalidRegistrationError).code).toBe('GW_INVALID_REGISTRATION');
    return (error as Error).message;
  }
}

/**
 * An in-process gateway that takes registrations with `runnerToken` from loopback runners and
 * answers {@link OPERATOR_TOKEN}, logging errors only; `options` add to or override that.
 */
export function registeringGateway(runnerToken: string, options: Omit<GatewayOptions, 'runnerToken'> = {}): Gateway {
  return createGateway({
    runnerToken,
    runnerNetworks: ['127.0.0.0/8'],
    operatorTokens: [OPERATOR_TOKEN],
    logger: createJsonLogger({ level: 'error', write: () => {} }),
    ...options,
  });
}
