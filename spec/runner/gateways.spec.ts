/**
 * runner/gateways.ts: one registration per configured gateway, started at once, and the warning
 * for a loopback URL advertised to a gateway on another host. Timers are held, never fired: no
 * request leaves.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { LogFields } from '../../placer/kernel/index.ts';
import { registerWithGateways } from '../../runner/gateways.ts';
import { resolveRunnerOptions } from '../../runner/options.ts';
import type { RunnerStatus } from '../../runner/protocol/index.ts';
import type { GatewayRegistration } from '../../runner/registration.ts';
import { warningRecorder } from '../support/logger.ts';

const registrations: GatewayRegistration[] = [];
afterEach(async () => {
  for (const registration of registrations.splice(0)) await registration.deregister();
});

/** Registers with `gateways`, advertising `advertised`; returns the warnings and the delays scheduled. */
function register(gateways: readonly string[], advertised: string) {
  const warnings: LogFields[] = [];
  const scheduled: number[] = [];
  const config = resolveRunnerOptions({
    engine: 'http://127.0.0.1:8000',
    gateways,
    runnerToken: 'runner-token-0123456789abcdef',
  });
  const made = registerWithGateways({
    config,
    advertised,
    status: () => ({ id: config.id }) as RunnerStatus,
    log: warningRecorder(warnings),
    environment: { timers: { setTimeout: (_callback, ms) => void scheduled.push(ms), clearTimeout: () => {} } },
    onDrainRequested: () => {},
  });
  registrations.push(...made);
  return { made, warnings, scheduled };
}

describe('registerWithGateways', () => {
  it('returns one started registration per gateway', () => {
    const { made, scheduled } = register(['http://10.0.0.1:8080', 'http://10.0.0.2:8080'], 'http://10.0.0.9:9000');
    expect(made).toHaveLength(2);
    expect(scheduled).toEqual([0, 0]);
  });

  it('warns when a loopback URL is advertised to a gateway on another host, and only then', () => {
    const remote = register(['http://10.0.0.1:8080', 'http://127.0.0.1:8080'], 'http://127.0.0.1:9000');
    expect(remote.warnings).toEqual([
      {
        msg: 'advertising a loopback url to a remote gateway; set advertiseUrl',
        url: 'http://127.0.0.1:9000',
        gateway: 'http://10.0.0.1:8080',
      },
    ]);
    expect(register(['http://localhost:8080'], 'http://[::1]:9000').warnings).toEqual([]);
    expect(register(['http://10.0.0.1:8080'], 'http://10.0.0.9:9000').warnings).toEqual([]);
  });
});
