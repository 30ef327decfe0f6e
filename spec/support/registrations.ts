/** What a runner registers with a gateway, and what the gateway's address policy says of a URL. */
import { expect } from 'vitest';
import { InvalidRegistrationError } from '../../gateway/errors.ts';
import type { RunnerAddressPolicy } from '../../gateway/fleet/registration-policy.ts';
import type { RunnerRegistration } from '../../runner/protocol/index.ts';

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
