/** placer/load-options.ts: the options every load-aware placer shares, and its registry entry. */
import { describe, expect, it } from 'vitest';
import { PlacerConfigError } from '../../placer/errors.ts';
import {
  LOAD_AWARE_OPTION_KEYS,
  loadAwareDefaults,
  loadAwareDescriptor,
  resolveLoadAware,
} from '../../placer/load-options.ts';
import type { LoadAwareOptions } from '../../placer/load-options.ts';
import type { Placer } from '../../placer/types.ts';
import { expectThrows } from '../support/throws.ts';
import { FakeClock } from './fake.ts';

describe('resolveLoadAware', () => {
  it('returns the defaults when given nothing', () => {
    expect(resolveLoadAware({})).toEqual({
      random: Math.random,
      now: loadAwareDefaults.now,
      staleAfterMs: loadAwareDefaults.staleAfterMs,
    });
  });

  it('returns the given options in place of the defaults', () => {
    const random = (): number => 0.5;
    const now = (): number => 7;
    expect(resolveLoadAware({ random, now, staleAfterMs: 0 })).toEqual({ random, now, staleAfterMs: 0 });
  });

  it.each([
    ['staleAfterMs', { staleAfterMs: -1 }],
    ['staleAfterMs', { staleAfterMs: 1.5 }],
    ['random', { random: 0.5 as unknown as () => number }],
    ['now', { now: 'soon' as unknown as () => number }],
  ] as const)('throws PlacerConfigError naming %s when it is bad', (option, options) => {
    const error = expectThrows(() => resolveLoadAware(options as LoadAwareOptions), PlacerConfigError, {});
    expect(error.message).toContain(option);
  });
});

describe('loadAwareDescriptor', () => {
  const placer = { name: 'test' } as unknown as Placer;

  it('returns an entry whose one option is staleAfterMs, at its default', () => {
    const descriptor = loadAwareDescriptor('test', () => placer);
    expect(descriptor.name).toBe('test');
    expect(descriptor.optionKeys).toEqual(LOAD_AWARE_OPTION_KEYS);
    expect(descriptor.defaults).toEqual({ staleAfterMs: loadAwareDefaults.staleAfterMs });
  });

  it("adds the placer's own options to the shared one, with their defaults", () => {
    const descriptor = loadAwareDescriptor('test', () => placer, { loadBand: 0.1 });
    expect(descriptor.optionKeys).toEqual([...LOAD_AWARE_OPTION_KEYS, 'loadBand']);
    expect(descriptor.defaults).toEqual({ staleAfterMs: loadAwareDefaults.staleAfterMs, loadBand: 0.1 });
  });

  it("creates the placer on the gateway's clock unless the options bring their own now", () => {
    const given: LoadAwareOptions[] = [];
    const descriptor = loadAwareDescriptor('test', (options) => {
      given.push(options);
      return placer;
    });
    const clock = new FakeClock({ now: 1000 });
    expect(descriptor.create({ staleAfterMs: 5 }, { clock })).toBe(placer);
    expect(given[0]!.staleAfterMs).toBe(5);
    expect(given[0]!.now!()).toBe(1000);
    clock.advance(250);
    expect(given[0]!.now!()).toBe(1250);
    descriptor.create({ now: () => 42 }, { clock });
    expect(given[1]!.now!()).toBe(42);
  });
});
