import { describe, expect, it } from 'vitest';
import { serviceResource } from '../../../gateway/observe/telemetry.ts';
import { VERSION } from '../../../runner/protocol/version.ts';

describe('serviceResource', () => {
  it('returns exactly service.name, service.version and service.instance.id when given an instance id', () => {
    expect(serviceResource({ name: 'sluice-gateway', instanceId: 'gw-1' }).attributes).toEqual({
      'service.name': 'sluice-gateway',
      'service.version': VERSION,
      'service.instance.id': 'gw-1',
    });
  });

  it('returns a random instance id named for the service when given none', () => {
    const a = serviceResource({ name: 'sluice-runner' }).attributes['service.instance.id'];
    const b = serviceResource({ name: 'sluice-runner' }).attributes['service.instance.id'];
    expect(a).toMatch(/^sluice-runner-[0-9a-f]{6}$/);
    expect(a).not.toBe(b);
  });
});
