/**
 * A traced fleet for the specs: an OTLP/HTTP (JSON) receiver on 127.0.0.1 port 0 that keeps every
 * trace export it gets, and a sim engine, a runner and a gateway started as `sluice` commands
 * whose runner and gateway export to it through the standard OTEL_* variables. The engine's call
 * log (it records each call's `traceparent`) is in a directory of its own, removed at the end.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { runnerArgs, simEngineArgs } from '../../placer/kernel/service-args.ts';
import { operatorEnv } from './fleet.ts';

/** How to start a traced fleet. */
export interface TracedFleetOptions {
  /** The runner's and the gateway's `--log-level`. @default 'warn' */
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
  /** Gets everything the runner and the gateway write. */
  onOutput?: (text: string) => void;
}

/** A running traced fleet. */
export interface TracedFleet {
  /** The gateway's URL. */
  readonly gw: string;
  /** The body of every OTLP/JSON trace export so far, as received, in order of arrival. */
  readonly exports: readonly string[];
  /** The engine's call log. */
  readonly callLog: string;
  /** Stops the processes and the receiver, and removes the call log's directory. */
  stop(): Promise<void>;
}

/**
 * Starts the receiver, then the engine, the runner and the gateway. The receiver answers a JSON
 * POST to /v1/traces 200 and anything else 415, so an exporter speaking another protocol shows.
 */
export async function startTracedFleet(options: TracedFleetOptions = {}): Promise<TracedFleet> {
  const exports: string[] = [];
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces' && String(req.headers['content-type']).includes('json')) {
        exports.push(Buffer.concat(chunks).toString('utf8'));
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end('{}');
      }
      res.writeHead(415);
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    // Spans leave within a tenth of a second instead of the default five.
    OTEL_BSP_SCHEDULE_DELAY: '100',
  };
  const dir = mkdtempSync(join(tmpdir(), 'sluice-traced-'));
  const callLog = join(dir, 'calls.log');
  const started: ChildService[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(started.map((s) => s.stop('SIGTERM', 5000)));
    await new Promise((r) => receiver.close(r));
    rmSync(dir, { recursive: true, force: true });
  };
  const logLevel = ['--log-level', options.logLevel ?? 'warn'];
  const output = options.onOutput ? { onOutput: options.onOutput } : {};
  try {
    const engine = await startService(simEngineArgs({}, ['--call-log', callLog, '--log-level', 'warn']));
    started.push(engine);
    const runner = await startService(runnerArgs({ engine: engine.url, id: 'runner-1' }, logLevel), {
      env: { ...process.env, ...otel },
      ...output,
    });
    started.push(runner);
    const gateway = await startService(
      ['gateway', '--port', '0', '--runner-networks', '127.0.0.0/8', '--runners', runner.url, ...logLevel],
      {
        env: operatorEnv({ ...process.env, ...otel }),
        ...output,
      },
    );
    started.push(gateway);
    return { gw: gateway.url, exports, callLog, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
