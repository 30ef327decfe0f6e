/**
 * An in-process gateway in front of one real runner and simulated engine, for the client-key
 * fault specs, and a logger that keeps every line so a spec can count what was logged.
 */
import { parseKeysFile } from '../../gateway/access/keys-file.ts';
import { KeyRing, hashToken } from '../../gateway/access/keys.ts';
import type { GatewayOptions } from '../../gateway/options.ts';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import type { LogFields, Logger } from '../../placer/kernel/index.ts';
import type { SimEngineOptions } from '../../runner/engines/sim/options.ts';
import { createSimEngine } from '../../runner/engines/sim/server.ts';
import { createRunner } from '../../runner/server.ts';
import { eventually, getJson } from './fleet.ts';

/** The operator token of {@link startKeyedGateway}'s gateways. */
export const KEYED_OPERATOR = 'operator-token-0123456789abcdef';
/** Headers of an operator request. */
export const asKeyedOperator = Object.freeze({ authorization: `Bearer ${KEYED_OPERATOR}` });

/** A logged line: its level, message and fields. */
export interface LoggedLine extends LogFields {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
}

/** A logger that appends every line to `lines`. */
export function recordingLogger(lines: LoggedLine[]): Logger {
  const at = (level: LoggedLine['level']) => (msg: string, fields?: LogFields) =>
    void lines.push({ ...fields, level, msg });
  const logger: Logger = {
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    child: () => logger,
  };
  return logger;
}

/** A running gateway and its URL. */
export interface KeyedGateway {
  readonly gw: Gateway;
  readonly url: string;
}

/**
 * Starts a sim engine (no delays unless `engine` says), a runner in front of it and a gateway
 * with `options` over that runner, and waits until the gateway has seen the runner's models.
 * Everything is closed by `cleanups`, last first.
 */
export async function startKeyedGateway(
  cleanups: Array<() => Promise<unknown>>,
  options: Partial<GatewayOptions>,
  engine: Partial<SimEngineOptions> = {},
): Promise<KeyedGateway> {
  const sim = createSimEngine({ ttftMs: 0, itlMs: 0, ...engine });
  const { url: engineUrl } = await sim.listen();
  cleanups.push(() => sim.close());
  const runner = createRunner({ engine: engineUrl, engineKind: 'sim', id: 'r1' });
  const { url: runnerUrl } = await runner.listen();
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  const gw = createGateway({ runners: [runnerUrl], operatorTokens: [KEYED_OPERATOR], placerTimeout: 2000, ...options });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  const models = engine.models ?? ['sim-small'];
  await eventually(
    () => models.every((m) => gw.pool.models().includes(m)),
    10_000,
    "the gateway to know the engine's models",
  );
  return { gw, url };
}

/** The `/readyz` reasons of a gateway. */
export async function readyReasons(url: string): Promise<string[]> {
  return (await getJson(`${url}/readyz`)).json.reasons as string[];
}

/** A client key for {@link keyRingOf}: its token and what the keys file would say of it. */
export interface SpecKey {
  readonly name: string;
  readonly token: string;
  readonly models?: readonly string[];
  readonly limits?: Record<string, number>;
}

/** The text of a keys file listing `keys`, each by its token's hash. */
export function keysFileText(keys: readonly SpecKey[]): string {
  return JSON.stringify(keys.map(({ token, ...key }) => ({ ...key, hash: `sha256:${hashToken(token)}` })));
}

/** A key ring holding `keys`, as a keys file listing them would make it. */
export function keyRingOf(keys: readonly SpecKey[]): KeyRing {
  const ring = new KeyRing();
  ring.setFileKeys(parseKeysFile(keysFileText(keys), 'keys.json'));
  return ring;
}
