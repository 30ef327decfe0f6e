/**
 * What the `sluice sim-engine` command runs once its entry point has parsed flags and the
 * environment. Kept free of `process` so that tests and `sluice up` can start engines in-process.
 */
import { attachCallLog } from './call-log.ts';
import { createSimEngine, type SimEngine } from './server.ts';
import type { SimEngineOptions } from './options.ts';

/**
 * Options of {@link runSimEngineCommand}: every {@link SimEngineOptions} field (profile, timing,
 * capacity, cache and fault knobs, each validated by the engine), plus where to listen. The entry
 * point supplies `onCrash` (e.g. `() => process.exit(70)`); this function never touches `process`.
 */
export interface SimEngineCommandOptions extends SimEngineOptions {
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Interface to listen on, e.g. `127.0.0.1`. */
  host: string;
  /**
   * A file to append every call's `sluice-call-id` to (call-log.ts), so that calls run twice can
   * be counted across engines and restarts. @default none: nothing is written
   */
  callLog?: string;
}

/**
 * Creates an engine, starts it listening, and logs one JSON line saying where.
 * @param log receives whole lines of JSON; the caller decides where they go.
 * @throws {SimOptionError} when an option is out of range or the call log cannot be opened;
 * listen errors (EADDRINUSE) pass through.
 */
export async function runSimEngineCommand(
  options: SimEngineCommandOptions,
  log: (line: string) => void,
): Promise<SimEngine> {
  const { port, host, callLog, ...engineOptions } = options;
  const engine = createSimEngine(engineOptions);
  if (callLog !== undefined) attachCallLog(engine.server, callLog);
  const address = await engine.listen(port, host);
  log(
    JSON.stringify({
      msg: 'sim engine listening',
      url: address.url,
      port: address.port,
      engineId: engine.options.engineId,
      models: engine.options.models,
      profile: engine.options.profile,
    }),
  );
  return engine;
}
