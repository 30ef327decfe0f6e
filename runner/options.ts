/**
 * Runner options, their defaults, and the validation that turns a bad value into one line
 * naming the option.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../placer/log.ts';
import { silentLogger } from '../placer/log.ts';
import { checkInteger, checkMs } from '../placer/validate.ts';
import { RunnerConfigError } from './errors.ts';

/** How a runner is set up. Only `engine` is required. */
export interface RunnerOptions {
  /** Base URL of the OpenAI-compatible engine this runner fronts, e.g. `http://127.0.0.1:8000`. */
  engine: string;
  /**
   * Stable runner id, reported to gateways and in every committed response.
   * @default `runner-` followed by 6 random hex digits
   */
  id?: string;
  /**
   * Calls the runner runs at once. A call that finds none free is answered busy at once.
   * @default 4
   */
  slots?: number;
  /**
   * How long connecting to the engine may take, in ms. A refused or timed-out connect means
   * nothing ran, so the runner answers busy and the gateway tries elsewhere.
   * @default 2000
   */
  engineConnectTimeout?: number;
  /**
   * Execution limit for a call whose request carries no deadline header, in ms.
   * @default 600000
   */
  defaultCallTimeout?: number;
  /**
   * How often the engine's health and model list are checked once it is ready, in ms.
   * While the engine is starting it is checked ten times as often.
   * @default 5000
   */
  engineProbeInterval?: number;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/** Options after defaults and validation; frozen. */
export type RunnerConfig = Readonly<Required<RunnerOptions>> & { readonly engineUrl: URL };

/** Applies defaults and validates; throws {@link RunnerConfigError} naming the first bad option. */
export function resolveRunnerOptions(options: RunnerOptions): RunnerConfig {
  const {
    engine,
    id = `runner-${randomBytes(3).toString('hex')}`,
    slots = 4,
    engineConnectTimeout = 2000,
    defaultCallTimeout = 600_000,
    engineProbeInterval = 5000,
    logger = silentLogger,
  } = options;
  const engineUrl = parseHttpUrl('engine', engine);
  if (typeof id !== 'string' || !/^[A-Za-z0-9._:-]{1,128}$/.test(id)) {
    throw new RunnerConfigError(`id must be 1-128 letters, digits or ._:- characters, got ${JSON.stringify(id)}`);
  }
  const fail = (message: string) => new RunnerConfigError(message);
  checkInteger('slots', slots, { min: 1 }, fail);
  checkMs('engineConnectTimeout', engineConnectTimeout, 1, fail);
  checkMs('defaultCallTimeout', defaultCallTimeout, 1, fail);
  checkMs('engineProbeInterval', engineProbeInterval, 1, fail);
  return Object.freeze({
    engine,
    engineUrl,
    id,
    slots,
    engineConnectTimeout,
    defaultCallTimeout,
    engineProbeInterval,
    logger,
  });
}

/** Parses an absolute http(s) URL or throws naming the option. */
export function parseHttpUrl(option: string, value: unknown): URL {
  if (typeof value !== 'string' || value === '') {
    throw new RunnerConfigError(`${option} must be an http:// or https:// URL, got ${JSON.stringify(value)}`);
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new RunnerConfigError(`${option} must be an http:// or https:// URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new RunnerConfigError(`${option} must be an http:// or https:// URL, got ${JSON.stringify(value)}`);
  }
  return url;
}
