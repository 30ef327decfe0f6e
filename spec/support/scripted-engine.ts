/**
 * A scripted engine for the fault specs: a real HTTP server on 127.0.0.1 port 0 that lists its
 * models and answers every other request as the spec scripts it, and the runner and gateway put
 * in front of it (as child processes, or in this process where a spec reads their state).
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startService } from '../../gateway/cli/entry.ts';
import { runnerArgs } from '../../placer/kernel/service-args.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { createGateway } from '../../gateway/server.ts';
import type { Gateway } from '../../gateway/server.ts';
import { createRunner } from '../../runner/server.ts';
import type { RunnerServer } from '../../runner/server.ts';
import { eventually, fieldsWhenStarted, startedForSuite } from './fleet.ts';

/** A running scripted engine. */
export interface ScriptedEngine {
  /** Where it listens, `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** How many requests reached the script (model lists and health checks are not counted). */
  calls(): number;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Starts an engine that answers `GET /v1/models` with `models` and `GET /health` with 200 itself,
 * and hands every other request to `answer`, counting it.
 */
export async function startScriptedEngine(
  models: readonly string[],
  answer: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<ScriptedEngine> {
  let calls = 0;
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') return res.end();
    if (req.method === 'GET' && req.url === '/v1/models')
      return res.end(JSON.stringify({ object: 'list', data: models.map((id) => ({ id })) }));
    calls++;
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls: () => calls,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** An engine the fronts below own: where it listens, and how to stop it. */
export interface OwnedEngine {
  readonly url: string;
  close(): Promise<unknown>;
}

/** A runner and a gateway started as child processes in front of one engine, which they own. */
export interface ChildFront<E extends OwnedEngine = ScriptedEngine> {
  readonly engine: E;
  readonly runner: ChildService;
  readonly gateway: ChildService;
  /** Stops the gateway and the runner, then closes the engine. */
  stop(): Promise<void>;
}

/**
 * Starts `sluice runner` (engine kind openai) over `engine` and `sluice gateway` over that runner;
 * on failure closes what did start, the engine included, and rethrows.
 */
export async function startChildFront<E extends OwnedEngine>(engine: E): Promise<ChildFront<E>> {
  const started: ChildService[] = [];
  const stop = async () => {
    await Promise.all(started.map((s) => s.stop()));
    await engine.close();
  };
  try {
    const runner = await startService(runnerArgs({ engine: engine.url, kind: 'openai' }, ['--log-level', 'error']));
    started.push(runner);
    const gateway = await startService(['gateway', '--port', '0', '--runners', runner.url, '--log-level', 'error']);
    started.push(gateway);
    return { engine, runner, gateway, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Starts a child front over `startEngine()` before the tests of the enclosing describe and stops
 * it after them. The handle's fields throw when read before the front started.
 */
export function childFrontForSuite(startEngine: () => Promise<ScriptedEngine>, timeout = 60_000): ChildFront {
  const front = startedForSuite(
    'front',
    async () => startChildFront(await startEngine()),
    (f) => f.stop(),
    timeout,
  );
  return fieldsWhenStarted(front, ['engine', 'runner', 'gateway', 'stop']);
}

/** A runner and a gateway built in this process in front of one engine, which they own. */
export interface InProcessFront<E extends OwnedEngine = ScriptedEngine> {
  readonly engine: E;
  readonly runner: RunnerServer;
  readonly gateway: Gateway;
  /** The gateway's URL. */
  readonly url: string;
  /** Closes the gateway, then the runner without draining, then the engine. */
  close(): Promise<void>;
}

/**
 * Builds a runner over `engine` and a gateway over it, and waits until the gateway knows the
 * engine's models; on failure closes all three and rethrows.
 */
export async function startInProcessFront<E extends OwnedEngine>(engine: E): Promise<InProcessFront<E>> {
  const runner = createRunner({ engine: engine.url });
  const r = await runner.listen();
  const gateway = createGateway({ runners: [r.url] });
  const { url } = await gateway.listen();
  const close = async () => {
    await gateway.close();
    await runner.close({ drainTimeout: 0 });
    await engine.close();
  };
  try {
    await eventually(() => gateway.pool.models().length > 0, 10_000, 'the gateway to learn the models');
  } catch (error) {
    await close();
    throw error;
  }
  return { engine, runner, gateway, url, close };
}
