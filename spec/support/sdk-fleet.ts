/** A fleet of simulated engines with the official OpenAI SDK pointed at its gateway. */
import OpenAI from 'openai';
import { fieldsWhenStarted, startFleet, startedForSuite } from './fleet.ts';
import type { Fleet } from './fleet.ts';

/** What {@link sdkFleetForSuite} started. */
export interface SdkFleet {
  readonly fleet: Fleet;
  readonly client: OpenAI;
}

/**
 * A fleet of `nodes` simulated engines that answer at once with `outputTokens` tokens, and the
 * SDK on its gateway, started before the tests of the enclosing describe (or file) and stopped
 * after them; each field reads what the suite started. The SDK never retries: a call sent twice
 * would hide a refusal and count twice on the engines.
 */
export function sdkFleetForSuite(nodes: number, outputTokens: number): SdkFleet {
  const read = startedForSuite(
    'SDK fleet',
    async (): Promise<SdkFleet> => {
      const fleet = await startFleet({
        nodes,
        engineArgs: ['--ttft-ms', '0', '--itl-ms', '0', '--output-tokens', String(outputTokens)],
      });
      const client = new OpenAI({ baseURL: `${fleet.gateway.url}/v1`, apiKey: 'sk-test-dummy', maxRetries: 0 });
      return { fleet, client };
    },
    ({ fleet }) => fleet.stop(),
  );
  return fieldsWhenStarted(read, ['fleet', 'client']);
}
