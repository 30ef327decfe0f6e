import { describe, expect, it } from 'vitest';
import type { StartService } from '../../placer/index.ts';
import { startGroup } from '../../k6/driver/stack.ts';

describe('startGroup', () => {
  const startService: StartService = () => Promise.reject(new Error('no process in this spec'));
  const options = { env: { PATH: '/bin', SLUICE_PORT: '8080' }, logLevel: 'warn', startService };

  it('hands the start-up the children’s env, log level and starter, and returns what it started with a stop for all of it', async () => {
    const stopped: string[] = [];
    const fleet = await startGroup(options, async ({ env, level, group, startService: start }) => {
      expect(start).toBe(startService);
      // The run's own operator token joins what the bench was given.
      expect(env).toEqual({ PATH: '/bin', SLUICE_OPERATOR_TOKEN: expect.stringMatching(/^[\w-]{32}$/) });
      expect(level).toEqual(['--log-level', 'warn']);
      group.add({ stop: async () => void stopped.push('engine') });
      group.add({ stop: async () => void stopped.push('gateway') });
      return { name: 'fleet' };
    });
    expect(fleet.name).toBe('fleet');
    expect(stopped).toEqual([]);
    await fleet.stop();
    await fleet.stop();
    expect(stopped).toEqual(['gateway', 'engine']);
  });

  it('stops what did start and rethrows when the start-up fails', async () => {
    const stopped: string[] = [];
    const failure = new Error('the runner did not start');
    await expect(
      startGroup(options, async ({ group }) => {
        group.add({ stop: async () => void stopped.push('engine') });
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(stopped).toEqual(['engine']);
  });
});
