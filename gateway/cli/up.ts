/**
 * `sluice up`, the embedded default: simulated engines and runners as child processes, and a
 * gateway in this one in front of them.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { Gateway } from '../server.ts';
import { simEngineDefaults } from '../../runner/engines/sim/options.ts';
import type { ChildService, KvEventSockets } from '../../placer/kernel/index.ts';
import { KV_HASH_SEED, kvEventSockets, reportListening, runnerArgs, simEngineArgs } from '../../placer/kernel/index.ts';
import type { Command } from './command.ts';
import { host, logFormat, logLevel, port } from './command.ts';
import { frontSettings, gatewayDataPlaneSettings } from './data-plane.ts';
import {
  accessSettings,
  cacheTruthSettings,
  cliGateway,
  detachedSettings,
  gatewayOptions,
  gatewaySettings,
} from './gateway-command.ts';
import { startService } from './entry.ts';
import { runner } from './runner-command.ts';
import { SettingsError, flagOf } from './settings.ts';
import { simSettings } from './sim-command.ts';
import { keepOperatorToken, keepViewerToken } from './operator-token.ts';
import { deploymentSettings } from './deployments.ts';

const slots = runner.settings.find((s) => s.key === 'slots')!;

/** `sluice up`. */
export const up: Command = {
  summary:
    'The embedded default: a gateway on --port with --runners runners, each in front of its own simulated engine process.',
  settings: [
    port(8080),
    host,
    // How many pairs to start is this command's own choice, so it keeps its default here.
    // A count, where the gateway's SLUICE_RUNNERS is a URL list: its own variable.
    {
      key: 'runners',
      type: 'integer',
      default: 2,
      description: 'how many runner + simulated engine pairs to start',
      env: 'SLUICE_UP_RUNNERS',
    },
    { ...slots, description: 'slots per runner' },
    {
      key: 'serverless',
      type: 'boolean',
      default: false,
      description:
        'start the runners with no engine and deploy the simulated model at 0 to --runners replicas: the first call waits while an engine starts (a cold start), a burst scales it out, and idle it goes back to zero (docs/operations.md, "Deployments")',
    },
    ...simSettings,
    ...gatewaySettings,
    ...cacheTruthSettings,
    ...detachedSettings,
    ...accessSettings,
    ...deploymentSettings,
    // The runners are its own children on loopback: the call secret, not runner TLS.
    ...gatewayDataPlaneSettings.filter((s) => s.key === 'callSecret' || s.key === 'callSecretFile'),
    ...frontSettings,
    logLevel,
    logFormat,
  ],
  async run({ values, env, logger, redact }) {
    const count = values.runners as number;
    if (!Number.isSafeInteger(count) || count < 1 || count > 64) {
      throw new SettingsError(`invalid --runners ${JSON.stringify(count)}: expected 1 to 64`);
    }
    const children: ChildService[] = [];
    // Folders of this run's (the engines' event sockets), removed once the children are gone.
    const scratch: KvEventSockets[] = [];
    const stopChildren = async () => {
      await Promise.all(children.reverse().map((c) => c.stop('SIGTERM')));
      await Promise.all(scratch.map((sockets) => sockets.remove()));
    };
    const level = String(values.logLevel);
    // The children log as `up` does (main settled the format): pretty on a terminal, one format.
    const logFlags = ['--log-level', level, '--log-format', String(values.logFormat ?? 'json')];
    // The engines and runners get the settings given here as flags, and their own defaults for the rest.
    const flags = (keys: readonly string[]) =>
      keys.flatMap((key) => {
        const value = values[key];
        if (value === undefined) return [];
        return [flagOf(key), Array.isArray(value) ? value.join(',') : String(value)];
      });
    try {
      if (values.serverless === true)
        return await upServerless(values, env, logger, redact, children, stopChildren, logFlags, flags);
      const simArgs = flags(simSettings.map((setting) => setting.key));
      // Each engine publishes its KV-cache events on a socket of its own for its runner, which
      // carries them to the gateway: placement then knows what every engine's cache holds.
      const sockets = await kvEventSockets('sluice-up-');
      scratch.push(sockets);
      const kvEvents = (i: number) => sockets.endpoint(`engine-${i + 1}`);
      const engineEnv = { ...childEnv(env), PYTHONHASHSEED: KV_HASH_SEED };
      const engines = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          startService(simEngineArgs({ id: `sim-${i + 1}`, kvEvents: kvEvents(i) }, [...logFlags, ...simArgs]), {
            stdio: 'inherit',
            env: engineEnv,
          }),
        ),
      );
      children.push(...engines);
      const options = await gatewayOptions(values, logger);
      // The runners register with this gateway (so they can feed it their engines' caches) with a
      // token of this run's, and take calls signed with the secret given, else a fresh one: both in
      // their environment, never argv, which any local user can read.
      const runnerToken = randomBytes(24).toString('base64url');
      const callSecret = options.callSecret ?? randomBytes(32).toString('base64url');
      const { gw, telemetry } = await cliGateway(env, {
        ...options,
        callSecret,
        runnerTokens: [runnerToken, ...(options.runnerTokens ?? [])],
        runnerNetworks: ['127.0.0.0/8', ...(options.runnerNetworks ?? [])],
      });
      const listening = gw.listen(values.port as number, values.host as string);
      const { url: gatewayUrl } = await listening;
      const runnerEnv = { ...childEnv(env), SLUICE_CALL_SECRET: callSecret, SLUICE_RUNNER_TOKEN: runnerToken };
      // The runners announce the engines' block size, so gateways name blocks as the engines do.
      const blockSize = values.blockSize === undefined ? [] : ['--engine-block-size', String(values.blockSize)];
      const runnerFlags = [...flags(['slots']), ...blockSize, ...logFlags];
      const runners = await Promise.all(
        engines.map((e, i) =>
          startService(
            runnerArgs(
              { engine: e.url, id: `runner-${i + 1}`, gateway: gatewayUrl, kvEvents: kvEvents(i) },
              runnerFlags,
            ),
            { stdio: 'inherit', env: runnerEnv },
          ),
        ),
      );
      children.push(...runners);
      await joined(gw, ((values.model as string[] | undefined) ?? simEngineDefaults.models)[0]!);
      const { url, port } = await listening;
      await keepOperatorToken(gw.config, port, env, logger);
      // Reading needs only the viewer token; the operator's is for changes.
      const viewerFile = await keepViewerToken(gw.config, port, env, logger);
      reportListening(url);
      const model = ((values.model as string[] | undefined) ?? simEngineDefaults.models)[0];
      const banner =
        `\nsluice is up at ${url} with ${count} runners (placer ${gw.config.placer.name}). Try:\n` +
        `  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${model}","messages":[{"role":"user","content":"hi"}]}'\n` +
        (viewerFile ? `  curl -s ${url}/v1/runners -H "authorization: Bearer $(cat ${viewerFile})"\n` : '') +
        'Ctrl-C stops everything.\n\n';
      process.stdout.write(redact(banner));
      return stopAll(gw, stopChildren, telemetry);
    } catch (error) {
      await stopChildren();
      throw error;
    }
  },
};

/**
 * Children of `up` get the settings given to `up` as flags, and their own defaults for the rest;
 * the parent's SLUICE_* variables (meant for `up` and its gateway: SLUICE_PORT, say) and PORT
 * must not reach them.
 */
function childEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const name of Object.keys(copy)) if (name.startsWith('SLUICE_') || name === 'PORT') delete copy[name];
  return copy;
}

/** Longest wait for the runners to register before `up` says it is up anyway, ms. */
const JOIN_TIMEOUT_MS = 30_000;

/**
 * Resolves once a runner has registered with `gw` and serves `model`, so the first call after
 * "sluice is up" finds one (the others join within milliseconds, and a call that finds them all
 * busy waits for the rest in the queue, as any call does); after {@link JOIN_TIMEOUT_MS} it
 * resolves regardless.
 */
async function joined(gw: Gateway, model: string): Promise<void> {
  const until = Date.now() + JOIN_TIMEOUT_MS;
  while (Date.now() < until && gw.pool.serves(model) !== 'yes') await delay(20);
}

/** How a `sluice up --serverless` deployment scales: back to zero a minute after its last call. */
const SERVERLESS_DEPLOYMENT = Object.freeze({ targetConcurrency: 4, scaleDownDelay: 60_000 });

/**
 * `sluice up --serverless`: the gateway first, with registration on loopback and a deployment of
 * the simulated model (unless --deployments already has one), then runners with no engine that
 * register with it and wait for the reconciler's orders.
 */
async function upServerless(
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
  logger: Parameters<Command['run']>[0]['logger'],
  redact: (text: string) => string,
  children: ChildService[],
  stopChildren: () => Promise<unknown>,
  logFlags: readonly string[],
  flags: (keys: readonly string[]) => string[],
): Promise<() => Promise<void>> {
  const count = values.runners as number;
  const model = ((values.model as string[] | undefined) ?? simEngineDefaults.models)[0]!;
  const options = await gatewayOptions(values, logger);
  const { MemoryDeploymentStore, checkDeployment } = await import('../control/index.ts');
  const deployments = options.deployments ?? new MemoryDeploymentStore();
  if (!(await deployments.get(model))) {
    // The engine flags given to up go to every engine the reconciler starts; --model names the deployment.
    const args = flags(simSettings.map((setting) => setting.key).filter((key) => key !== 'model'));
    const checked = checkDeployment({
      model,
      profile: { kind: 'sim', args },
      minReplicas: 0,
      maxReplicas: count,
      ...SERVERLESS_DEPLOYMENT,
    });
    if (checked.kind === 'invalid') throw new SettingsError(checked.problems.join('; '));
    await deployments.put(checked.deployment);
  }
  // The runners are this process's children on loopback: a token and a call secret of this run's,
  // in their environment (never argv, which any local user can read).
  const runnerToken = randomBytes(24).toString('base64url');
  const callSecret = options.callSecret ?? randomBytes(32).toString('base64url');
  const { gw, telemetry } = await cliGateway(env, {
    ...options,
    deployments,
    callSecret,
    runnerTokens: [runnerToken, ...(options.runnerTokens ?? [])],
    runnerNetworks: ['127.0.0.0/8', ...(options.runnerNetworks ?? [])],
  });
  const { url, port } = await gw.listen(values.port as number, values.host as string);
  const runnerEnv = { ...childEnv(env), SLUICE_CALL_SECRET: callSecret, SLUICE_RUNNER_TOKEN: runnerToken };
  const runners = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      startService(runnerArgs({ gateway: url, id: `runner-${i + 1}` }, [...flags(['slots']), ...logFlags]), {
        stdio: 'inherit',
        env: runnerEnv,
      }),
    ),
  );
  children.push(...runners);
  await keepOperatorToken(gw.config, port, env, logger);
  const viewerFile = await keepViewerToken(gw.config, port, env, logger);
  reportListening(url);
  const auth = viewerFile ? ` -H "authorization: Bearer $(cat ${viewerFile})"` : '';
  const banner =
    `\nsluice is up at ${url}, serverless: ${count} runners with no engine, and ${model} deployed at 0 to ${count} replicas.\n` +
    `The first call starts an engine (a cold start, in the sluice-cold-start header); a minute after the last one it stops. Try:\n` +
    `  curl -si ${url}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${model}","messages":[{"role":"user","content":"hi"}]}'\n` +
    (auth ? `  curl -s ${url}/v1/deployments/${encodeURIComponent(model)}${auth}\n` : '') +
    'Ctrl-C stops everything.\n\n';
  process.stdout.write(redact(banner));
  return stopAll(gw, stopChildren, telemetry);
}

/** How `up` stops: the gateway first (it drains), then its children, then telemetry. */
function stopAll(
  gw: { close(): Promise<void> },
  stopChildren: () => Promise<unknown>,
  telemetry: { shutdown(): Promise<void> },
): () => Promise<void> {
  return async () => {
    await gw.close();
    await stopChildren();
    await telemetry.shutdown();
  };
}
