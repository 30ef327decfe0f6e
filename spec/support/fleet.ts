/**
 * Test fleets of real processes on 127.0.0.1: simulated engines, runners in front of them,
 * and a gateway, each started with `sluice <command> --port 0` through the same
 * startService the CLI's `up` uses. Every process is stopped in `stop()`.
 */
import { request } from 'undici';
import type { Dispatcher } from 'undici';
import { afterAll, beforeAll } from 'vitest';
import { startService } from '../../gateway/cli/entry.ts';
import { runnerArgs, simEngineArgs } from '../../placer/kernel/service-args.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';

/** One engine + runner pair. */
export interface Node {
  engine: ChildService;
  runner: ChildService;
}

/** A running fleet. */
export interface Fleet {
  nodes: Node[];
  gateway: ChildService;
  /** Stops everything still running; safe to call twice. */
  stop(): Promise<void>;
}

/** How to start a fleet. Arrays of extra flags are passed as they are. */
export interface FleetOptions {
  nodes?: number;
  engineArgs?: readonly string[] | ((index: number) => readonly string[]);
  runnerArgs?: readonly string[] | ((index: number) => readonly string[]);
  gatewayArgs?: readonly string[];
  /** The gateway's environment, when it needs more than this process's (a callback secret, say). */
  gatewayEnv?: NodeJS.ProcessEnv;
}

const quiet = ['--log-level', 'warn'];

/** The operator token of the gateways specs start (given through the environment, as advised). */
export const OPERATOR_TOKEN = 'spec-operator-token-0123456789';
/** The header of a request on an operator route. */
export const asOperator: Readonly<Record<string, string>> = Object.freeze({
  authorization: `Bearer ${OPERATOR_TOKEN}`,
});
/** The header of a request made with a client key's (or any bearer) token. */
export function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}
/** A gateway's environment with the specs' operator token. */
export function operatorEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...env, SLUICE_OPERATOR_TOKEN: OPERATOR_TOKEN };
}

/** Starts `nodes` engine + runner pairs and a gateway over them. */
export async function startFleet(options: FleetOptions = {}): Promise<Fleet> {
  const count = options.nodes ?? 2;
  const args = (value: FleetOptions['engineArgs'], i: number) =>
    typeof value === 'function' ? value(i) : (value ?? []);
  const started: ChildService[] = [];
  const stop = async () => {
    await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
  };
  try {
    const engines = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        startService(simEngineArgs({ id: `sim-${i + 1}` }, [...quiet, ...args(options.engineArgs, i)])),
      ),
    );
    started.push(...engines);
    const runners = await Promise.all(
      engines.map((e, i) =>
        startService(runnerArgs({ engine: e.url, id: `runner-${i + 1}` }, [...quiet, ...args(options.runnerArgs, i)])),
      ),
    );
    started.push(...runners);
    const gateway = await startService(
      [
        'gateway',
        '--port',
        '0',
        // Runners a spec registers listen on 127.0.0.1, which registration refuses unless allowed.
        '--runner-networks',
        '127.0.0.0/8',
        '--runners',
        runners.map((r) => r.url).join(','),
        ...quiet,
        ...(options.gatewayArgs ?? []),
      ],
      { env: operatorEnv(options.gatewayEnv) },
    );
    started.push(gateway);
    return { nodes: engines.map((engine, i) => ({ engine, runner: runners[i]! })), gateway, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A fleet started for the tests of one describe block; read it inside those tests only. */
export interface SuiteFleet {
  readonly fleet: Fleet;
  /** The gateway's URL. */
  readonly gw: string;
}

/**
 * Starts `start()` before the tests of the enclosing describe (or file) and hands what it
 * started to `stop` after them. The returned function reads it inside those tests, and throws
 * when read before the start, naming `what`.
 */
export function startedForSuite<T>(
  what: string,
  start: () => Promise<T>,
  stop: (started: T) => Promise<unknown>,
  timeout?: number,
): () => T {
  let started: { value: T } | undefined;
  beforeAll(async () => {
    started = { value: await start() };
  }, timeout);
  afterAll(async () => {
    if (started) await stop(started.value);
  });
  return () => {
    if (!started) throw new Error(`the suite's ${what} was read before it started`);
    return started.value;
  };
}

/**
 * A stand-in, made at describe time, for what `read` returns once the suite started: each of
 * `keys` is read through `read` when used (a method bound to what it belongs to), so using one
 * before the start throws as `read` does.
 */
export function fieldsWhenStarted<T extends object, K extends keyof T>(read: () => T, keys: readonly K[]): Pick<T, K> {
  const handle = {} as Pick<T, K>;
  for (const key of keys) {
    Object.defineProperty(handle, key, {
      enumerable: true,
      get: () => {
        const target = read();
        const value = target[key];
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  }
  return handle;
}

/** The handle of a fleet a suite starts: `fleet` reads it (throwing before the start), `gw` is its gateway's URL. */
export function suiteFleet(read: () => Fleet): SuiteFleet {
  return {
    get fleet() {
      return read();
    },
    get gw() {
      return read().gateway.url;
    },
  };
}

/**
 * A starter of `sluice <args>` services for the tests of the enclosing describe (or file): each
 * one it starts is stopped after those tests.
 */
export function servicesForSuite(): (args: readonly string[]) => Promise<ChildService> {
  const started: ChildService[] = [];
  afterAll(() => Promise.all(started.map((s) => s.stop('SIGTERM', 5000))));
  return async (args) => {
    const service = await startService(args);
    started.push(service);
    return service;
  };
}

/** A runner's /status page, parsed. */
export async function runnerStatus(runner: { url: string }): Promise<any> {
  return (await request(`${runner.url}/status`)).body.json();
}

/**
 * Starts a fleet with `options` before the tests of the enclosing describe (or file) and stops
 * it after them. The handle's fields throw when read before the fleet started.
 */
export function fleetForSuite(options: FleetOptions, timeout?: number): SuiteFleet {
  return suiteFleet(
    startedForSuite(
      'fleet',
      () => startFleet(options),
      (f) => f.stop(),
      timeout,
    ),
  );
}

/** A small chat body. */
export function chatBody(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hello there' }], ...extra });
}

/** What {@link postJson} and {@link getJson} return: status, headers and the parsed (or raw) body. */
export interface JsonAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: any;
  text: string;
}

/** POSTs `body` as JSON (through `dispatcher`, when given) and returns the response, its body unread. */
export function postRequest(
  url: string,
  body: string,
  headers: Record<string, string> = {},
  dispatcher?: Dispatcher,
): Promise<Dispatcher.ResponseData> {
  const json = { 'content-type': 'application/json', ...headers };
  return request(url, { method: 'POST', body, headers: json, ...(dispatcher ? { dispatcher } : {}) });
}

/** POSTs JSON (through `dispatcher`, when given) and returns status, headers and the parsed (or raw) body. */
export async function postJson(
  url: string,
  body: string,
  headers: Record<string, string> = {},
  dispatcher?: Dispatcher,
): Promise<JsonAnswer> {
  return jsonAnswer(await postRequest(url, body, headers, dispatcher));
}

/** GETs a URL and returns status, headers and the parsed (or raw) body. */
export async function getJson(url: string, headers: Record<string, string> = {}): Promise<JsonAnswer> {
  return jsonAnswer(await request(url, { headers }));
}

async function jsonAnswer(res: Dispatcher.ResponseData): Promise<JsonAnswer> {
  const text = await res.body.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, json, text };
}

/** Reads one sample (summed over label sets) from a Prometheus text page. */
export function metricValue(page: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of page.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const set = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => set.includes(`${k}="${v}"`))) sum += Number(m[3]);
  }
  return sum;
}

/**
 * GETs a service's /metrics page; the operator's header goes along, which a gateway needs and a
 * runner or engine ignores.
 */
export async function metrics(service: { url: string }): Promise<string> {
  const res = await request(`${service.url}/metrics`, { headers: asOperator });
  return res.body.text();
}

/** Polls `check` until it returns true or `timeout` ms pass; for state that settles asynchronously. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  timeout = 5000,
  what = 'condition',
): Promise<void> {
  const until = Date.now() + timeout;
  for (;;) {
    if (await check()) return;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
