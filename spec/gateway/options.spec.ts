import { metrics } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { GatewayConfigError } from '../../gateway/errors.ts';
import { resolveGatewayOptions } from '../../gateway/options.ts';
import type { CallListener, GatewayOptions } from '../../gateway/options.ts';
import type { GatewayPool } from '../../gateway/fleet/pool.ts';
import { systemClock } from '../../placer/kernel/index.ts';
import { PlacerConfigError } from '../../placer/errors.ts';
import { silentLogger } from '../../placer/kernel/index.ts';
import { placerDefaults } from '../../placer/options.ts';
import type { Placer } from '../../placer/types.ts';
import { expectThrows } from '../support/throws.ts';

const runners = ['http://127.0.0.1:9001'];

/** resolveGatewayOptions only checks that a pool was given, so an empty stand-in is enough. */
const pool = {} as unknown as GatewayPool;

/** The GatewayConfigError resolveGatewayOptions throws; fails the test when it returns. */
const configError = (options: GatewayOptions): GatewayConfigError =>
  expectThrows(() => resolveGatewayOptions(options), GatewayConfigError, {});

describe('resolveGatewayOptions', () => {
  it('returns the documented defaults when only runners are given', () => {
    const config = resolveGatewayOptions({ runners });
    expect(config).toMatchObject({
      pool: undefined,
      callTimeout: 600_000,
      maxBodyBytes: 16 * 1024 * 1024,
      bodyReadTimeout: 30_000,
      bodyIdleTimeout: 10_000,
      drainTimeout: 30_000,
      runnerConnectTimeout: 2000,
      statusInterval: 2000,
      retryAfter: 1,
      maxInFlight: 10_000,
      maxUploads: 1000,
      maxUploadsPerClient: 256,
      maxConnectionsPerClient: 4096,
      maxStreamsPerConnection: 100,
      maxQueued: 10_000,
      maxQueuedPerFlow: 1000,
      defaultPriority: 'interactive',
      overrideCall: undefined,
      renderMetrics: undefined,
    });
    // Resolving makes nothing: the composition makes the default parts (server.spec.ts).
    expect(config).toMatchObject({ placer: undefined, store: undefined, limiter: undefined, deployments: undefined });
    expect(config.placerConfig).toEqual(placerDefaults);
    expect(config.listeners).toEqual([]);
    expect(config.logger).toBe(silentLogger);
    expect(config.clock).toBe(systemClock);
    expect(config.meterProvider).toBe(metrics.getMeterProvider());
  });

  it('returns runners as URL objects when given URL strings', () => {
    const config = resolveGatewayOptions({ runners: ['http://127.0.0.1:9001', 'https://runner-b.internal:9443/'] });
    expect(config.runners.every((u) => u instanceof URL)).toBe(true);
    expect(config.runners.map((u) => u.href)).toEqual(['http://127.0.0.1:9001/', 'https://runner-b.internal:9443/']);
  });

  it('returns the given values when every option is set', () => {
    const placer: Placer = { name: 'mine', order: (_call, list) => list };
    const listener: CallListener = {};
    const overrideCall = (): void => {};
    const renderMetrics = async (): Promise<string> => '';
    // Each is taken as given, so the config holds the same values.
    const given = {
      placer,
      callTimeout: 1,
      maxBodyBytes: 2,
      bodyReadTimeout: 3,
      bodyIdleTimeout: 4,
      drainTimeout: 0,
      runnerConnectTimeout: 5,
      statusInterval: 6,
      retryAfter: 0,
      maxUploads: 8,
      maxUploadsPerClient: 9,
      maxConnectionsPerClient: 10,
      maxQueued: 11,
      maxQueuedPerFlow: 12,
      defaultPriority: 'batch' as const,
      overrideCall,
      renderMetrics,
    };
    const config = resolveGatewayOptions({ runners, ...given, listeners: [listener], placerTimeout: 7 });
    expect(config).toMatchObject(given);
    expect(config.listeners).toEqual([listener]);
    expect(config.placerConfig.placerTimeout).toBe(7);
  });

  it('returns a frozen config with a frozen copy of the listeners when resolved', () => {
    const listeners: CallListener[] = [{}];
    const config = resolveGatewayOptions({ runners, listeners });
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.listeners)).toBe(true);
    listeners.push({});
    expect(config.listeners).toHaveLength(1);
    expect(() => {
      (config as { callTimeout: number }).callTimeout = 5;
    }).toThrow(TypeError);
  });

  it('returns a config with no runners when a pool is given instead', () => {
    const config = resolveGatewayOptions({ pool });
    expect(config.pool).toBe(pool);
    expect(config.runners).toEqual([]);
  });

  it('throws naming runners when there are neither runners, a pool, nor a runner token', () => {
    const message = 'runners must list at least one runner URL, or set runnerToken so runners can register';
    expect(configError({}).message).toBe(message);
    expect(configError({ runners: [] }).message).toBe(message);
    expect(() => resolveGatewayOptions({ runnerToken: 'x'.repeat(16) })).not.toThrow();
  });

  it('throws without echoing it when the runner token is short, and when lostAfter does not outlast unreachability', () => {
    expect(configError({ runnerToken: 'secret' }).message).toBe(
      'runnerToken must be a string of at least 16 printable ASCII characters without spaces',
    );
    // The runner's rule too: a token it would refuse is refused here, without echoing it.
    expect(configError({ runnerToken: 'sixteen chars or more' }).message).toBe(
      'runnerToken must be a string of at least 16 printable ASCII characters without spaces',
    );
    expect(
      configError({ runners, runnerToken: 'y'.repeat(16), lostAfter: 3000, heartbeatInterval: 1000 }).message,
    ).toBe('lostAfter must be longer than heartbeatInterval x unreachableAfterMissed (3000 ms), got 3000');
  });

  it('takes runner tokens as a list, newest first, each checked by the token rule without echoing it', () => {
    const [a, b] = ['a'.repeat(16), 'b'.repeat(16)];
    expect(resolveGatewayOptions({ runnerTokens: [a, b] })).toMatchObject({ runnerTokens: [a, b], runnerToken: a });
    expect(resolveGatewayOptions({ runnerToken: a })).toMatchObject({ runnerTokens: [a], runnerToken: a });
    expect(resolveGatewayOptions({ runners })).toMatchObject({ runnerTokens: [], runnerToken: undefined });
    expect(configError({ runnerToken: a, runnerTokens: [b] }).message).toBe(
      'give runnerToken or runnerTokens, not both',
    );
    expect(configError({ runnerTokens: [] }).message).toBe('runnerTokens must be a non-empty list of tokens');
    expect(configError({ runnerTokens: [a, 'short-secret'] }).message).toBe(
      'runnerTokens[1] must be a string of at least 16 printable ASCII characters without spaces',
    );
    expect(configError({ runnerTokens: [a, b, a] }).message).toBe('runnerTokens[2] repeats runnerTokens[0]');
    expect(configError({ runnerTokens: [a], pool }).message).toMatch(/cannot be used with a custom pool/);
  });

  it('checks runnerNetworks as CIDR networks, naming the bad one', () => {
    expect(resolveGatewayOptions({ runners, runnerNetworks: ['10.0.0.0/8', 'fd00::/8'] }).runnerNetworks).toEqual([
      '10.0.0.0/8',
      'fd00::/8',
    ]);
    expect(resolveGatewayOptions({ runners }).runnerNetworks).toEqual([]);
    expect(configError({ runners, runnerNetworks: ['10.0.0.0/8', '10.0.0.1/8'] }).message).toMatch(
      /^runnerNetworks\[1\] has host bits set past its prefix length, got "10\.0\.0\.1\/8"/,
    );
    expect(configError({ runners, runnerNetworks: ['0.0.0.0/0'] }).message).toMatch(
      /^runnerNetworks\[0\] would allow every address/,
    );
    expect(configError({ runners, runnerNetworks: ['runners.internal'] }).message).toMatch(
      /^runnerNetworks\[0\] does not start with an IP address/,
    );
  });

  it('throws GW_INVALID_OPTION naming runners and the value when runners is not a list', () => {
    const error = configError({ runners: 'http://127.0.0.1:9001' as unknown as string[] });
    expect(error.code).toBe('GW_INVALID_OPTION');
    expect(error.message).toBe('runners must be a list of URLs, got "http://127.0.0.1:9001"');
  });

  it.each<[unknown, string]>([
    ['127.0.0.1:9001', '"127.0.0.1:9001"'],
    ['not a url', '"not a url"'],
    ['', '""'],
    ['ftp://127.0.0.1:9001', '"ftp://127.0.0.1:9001"'],
    ['ws://127.0.0.1:9001', '"ws://127.0.0.1:9001"'],
    ['http://127.0.0.1:9001/v1', '"http://127.0.0.1:9001/v1"'],
    [9001, '9001'],
    [null, 'null'],
  ])('throws naming runners and the entry when an entry is %j', (entry, shown) => {
    const error = configError({ runners: ['http://127.0.0.1:9000', entry as string] });
    expect(error.message).toBe(`runners entries must be http(s)://host:port URLs, got ${shown}`);
  });

  it.each<[string, unknown]>([
    ['empty object', {}],
    ['no order', { name: 'x' }],
    ['no name', { order: () => [] }],
    ['null', null],
    ['a string', 'round-robin'],
  ])('throws naming placer when the placer is %s', (_label, placer) => {
    expect(configError({ runners, placer: placer as Placer }).message).toBe(
      'placer must be an object with a name and order(call, runners)',
    );
  });

  it.each<[string, unknown]>([
    ['empty object', {}],
    ['no wake', { deployed: () => true }],
    ['no deployed', { wake: () => {} }],
    ['null', null],
  ])('throws naming coldStarts when it is %s', (_label, coldStarts) => {
    expect(configError({ runners, coldStarts: coldStarts as GatewayOptions['coldStarts'] }).message).toBe(
      'coldStarts must be a ColdStarts (gateway/control/cold-start.ts), with deployed(model) and wake(model)',
    );
  });

  it('keeps coldStarts as given, and none by default', () => {
    const coldStarts = { deployed: () => false, wake: () => {} };
    expect(resolveGatewayOptions({ runners, coldStarts }).coldStarts).toBe(coldStarts);
    expect(resolveGatewayOptions({ runners }).coldStarts).toBeUndefined();
  });

  it('throws PlacerConfigError when a placer option is out of range', () => {
    expect(() => resolveGatewayOptions({ runners, placerTimeout: 0 })).toThrow(PlacerConfigError);
    expect(() => resolveGatewayOptions({ runners, retryAllDelay: -1 })).toThrow(/retryAllDelay/);
  });

  const positive = [
    'callTimeout',
    'maxBodyBytes',
    'bodyReadTimeout',
    'bodyIdleTimeout',
    'runnerConnectTimeout',
    'statusInterval',
    'maxUploads',
    'maxUploadsPerClient',
    'maxConnectionsPerClient',
    'maxQueued',
    'maxQueuedPerFlow',
  ] as const;
  const nonNegative = ['drainTimeout', 'retryAfter'] as const;

  it.each(positive.flatMap((option) => [0, -1, 1.5, '10', null, true].map((value) => [option, value] as const)))(
    'throws naming %s and the value when it is %j',
    (option, value) => {
      const error = configError({ runners, [option]: value });
      expect(error.code).toBe('GW_INVALID_OPTION');
      expect(error.status).toBe(500);
      expect(error.message).toBe(`${option} must be a positive integer, got ${JSON.stringify(value)}`);
    },
  );

  it.each(['urgent', 'Interactive', '', 1, null])(
    'throws naming defaultPriority and the value when it is %j',
    (value) => {
      expect(configError({ runners, defaultPriority: value as never }).message).toBe(
        `defaultPriority must be one of interactive, batch, got ${JSON.stringify(value)}`,
      );
    },
  );

  it.each(nonNegative.flatMap((option) => [-1, 0.5, '1', null].map((value) => [option, value] as const)))(
    'throws naming %s and the value when it is %j',
    (option, value) => {
      expect(configError({ runners, [option]: value }).message).toBe(
        `${option} must be a non-negative integer, got ${JSON.stringify(value)}`,
      );
    },
  );

  it.each(nonNegative)('returns %s as 0 when given 0', (option) => {
    expect(resolveGatewayOptions({ runners, [option]: 0 })[option]).toBe(0);
  });

  it.each(positive)('throws naming %s when it is Infinity or above the safe integers', (option) => {
    expect(configError({ runners, [option]: Number.POSITIVE_INFINITY }).message).toMatch(
      new RegExp(`^${option} must be`),
    );
    expect(configError({ runners, [option]: 2 ** 53 }).message).toMatch(new RegExp(`^${option} must be`));
  });

  it('throws naming maxStoredBytes when one result of maxResultBytes could not fit in it', async () => {
    expect(configError({ runners, maxStoredBytes: 0 }).message).toBe(
      'maxStoredBytes must be a positive integer, got 0',
    );
    expect(configError({ runners, maxResultBytes: 4096, maxStoredBytes: 5119 }).message).toBe(
      'maxStoredBytes must be at least maxResultBytes + 1024 (5120), or no detached call could ever be admitted, got 5119',
    );
    // The store made with that bound: composeGatewayConfig's spec (server.spec.ts).
    expect(resolveGatewayOptions({ runners, maxResultBytes: 4096, maxStoredBytes: 5120 }).maxStoredBytes).toBe(5120);
  });

  it('throws naming callTimeout and NaN when callTimeout is NaN', () => {
    expect(configError({ runners, callTimeout: Number.NaN }).message).toBe(
      'callTimeout must be a positive integer, got NaN',
    );
  });

  // Node clamps longer timers to 1 ms, which would time out every body read at once.
  it.each([
    'callTimeout',
    'bodyReadTimeout',
    'bodyIdleTimeout',
    'drainTimeout',
    'runnerConnectTimeout',
    'statusInterval',
  ])('throws naming %s when it is above 2147483647 ms', (option) => {
    expect(configError({ runners, [option]: 2 ** 31 }).message).toBe(
      `${option} must be at most 2147483647 ms, got 2147483648`,
    );
  });
});
