import { describe, expect, it } from 'vitest';
import { PlacerConfigError, placerDefaults, resolvePlacerConfig, type PlacerOptions } from '../../placer/index.ts';

describe('resolvePlacerConfig', () => {
  it("returns Fn's defaults when no options are given", () => {
    expect(resolvePlacerConfig()).toEqual({ placerTimeout: 360_000, detachedPlacerTimeout: 30_000, retryAllDelay: 10 });
    expect(resolvePlacerConfig({})).toEqual(placerDefaults);
  });

  it('returns the given values with defaults for the rest when some options are set', () => {
    expect(resolvePlacerConfig({ placerTimeout: 5_000, retryAllDelay: 0 })).toEqual({
      placerTimeout: 5_000,
      detachedPlacerTimeout: 30_000,
      retryAllDelay: 0,
    });
  });

  it('returns a frozen config when resolved', () => {
    const config = resolvePlacerConfig({ placerTimeout: 1 });
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(placerDefaults)).toBe(true);
  });

  it.each<[PlacerOptions, string]>([
    [{ placerTimeout: -5 }, 'placerTimeout must be a positive integer, got -5'],
    [{ placerTimeout: 0 }, 'placerTimeout must be a positive integer, got 0'],
    [{ placerTimeout: 1.5 }, 'placerTimeout must be a positive integer, got 1.5'],
    [{ placerTimeout: Number.NaN }, 'placerTimeout must be a positive integer, got NaN'],
    [{ detachedPlacerTimeout: 0 }, 'detachedPlacerTimeout must be a positive integer, got 0'],
    [
      { detachedPlacerTimeout: Number.POSITIVE_INFINITY },
      'detachedPlacerTimeout must be a positive integer, got Infinity',
    ],
    [{ retryAllDelay: -1 }, 'retryAllDelay must be a non-negative integer, got -1'],
    [{ retryAllDelay: '10' as unknown as number }, 'retryAllDelay must be a non-negative integer, got "10"'],
    [{ placerTimeout: null as unknown as number }, 'placerTimeout must be a positive integer, got null'],
    [{ placerTimeout: 2 ** 31 }, 'placerTimeout must be at most 2147483647 ms, got 2147483648'],
  ])('throws PlacerConfigError naming the option and value when given %j', (options, message) => {
    const resolve = (): unknown => resolvePlacerConfig(options);
    expect(resolve).toThrow(PlacerConfigError);
    expect(resolve).toThrow(message);
  });

  it('throws PlacerConfigError with a stable code when an option is bad', () => {
    try {
      resolvePlacerConfig({ retryAllDelay: -1 });
      expect.unreachable();
    } catch (error) {
      expect(error).toMatchObject({ code: 'PLACER_INVALID_OPTION', name: 'PlacerConfigError' });
    }
  });
});
