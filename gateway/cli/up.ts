/**
 * `sluice up`, the embedded default: simulated engines and runners as child processes, and a
 * gateway in this one in front of them.
 */
import { randomBytes } from 'node:crypto';
import { simEngineDefaults } from '../../runner/engines/sim/options.ts';
import type { ChildService } from './processes.ts';
import { reportListening, startService } from './processes.ts';
import type { Command } from './command.ts';
import { host, logLevel, port } from './command.ts';
import { frontSettings, gatewayDataPlaneSettings } from './data-plane.ts';
import { accessSettings, detachedSettings, gatewayIdOf, gatewayOptions, gatewaySettings } from './gateway-command.ts';
import { runner } from './runner-command.ts';
import { SettingsError, flagOf } from './settings.ts';
import { simSettings } from './sim-command.ts';
import { startTelemetry } from './telemetry.ts';
import { keepOperatorToken } from './operator-token.ts';
import { deploymentSettings } from './deployments.ts';

const slots = runner.settings.find((s) => s.key === 'slots')!;

/** `sluice up`. */
export const up: Command = {
  summary: 'The embedded default: a gateway on --port with --runners runners, each in front of its own simulated engine process.',
  settings: [
    port(8080),
    host,
    // How many pairs to start is this command's own choice, so it keeps its default here.
    { key: 'runners', type: 'integer', default: 2, description: 'how many runner + simulated engine pairs to start' },
    { ...slots, description: 'slots per runner' },
    ...simSettings,
    ...gatewaySettings,
    ...detachedSettings,
    ...accessSettings,
    ...deploymentSettings,
    // The runners are its own children on loopback: the call secret, not runner TLS.
    ...gatewayDataPlaneSettings.filter((s) => s.key === 'callSecret' || s.key === 'callSecretFile'),
    ...frontSettings,
    logLevel,
  ],
  async run({ values, env, logger, redact }) {
    const count = values.runners as number;
    if (!Number.isSafeInteger(count) || count < 1 || count > 64) {
      throw new SettingsError(`invalid --runners ${JSON.stringify(count)}: expected 1 to 64`);
    }
    const children: ChildService[] = [];
    const stopChildren = () => Promise.all(children.reverse().map((c) => c.stop('SIGTERM')));
    const level = String(values.logLevel);
    // The engines and runners get the settings given here as flags, and their own defaults for the rest.
    const flags = (keys: readonly string[]) =>
      keys.flatMap((key) => {
        const value = values[key];
        if (value === undefined) return [];
        return [flagOf(key), Array.isArray(value) ? value.join(',') : String(value)];
      });
    try {
      const simArgs = flags(simSettings.map((setting) => setting.key));
      const engines = await Promise.all(
        Array.from({ length: count }, (_, i) =>
          startService(['sim-engine', '--port', '0', '--engine-id', `sim-${i + 1}`, '--log-level', level, ...simArgs], { stdio: 'inherit', env: childEnv(env) }),
        ),
      );
      children.push(...engines);
      const options = await gatewayOptions(values, logger);
      // The runners take calls from this gateway only: signed with the secret given, else a fresh
      // one, handed to them in their environment (never argv, which any local user can read).
      const callSecret = options.callSecret ?? randomBytes(32).toString('base64url');
      const runnerEnv = { ...childEnv(env), SLUICE_CALL_SECRET: callSecret };
      const runners = await Promise.all(
        engines.map((e, i) =>
          startService(['runner', '--port', '0', '--engine', e.url, '--engine-kind', 'sim', '--id', `runner-${i + 1}`, ...flags(['slots']), '--log-level', level], { stdio: 'inherit', env: runnerEnv }),
        ),
      );
      children.push(...runners);
      const gatewayId = await gatewayIdOf(values);
      const telemetry = await startTelemetry(env, { name: 'sluice-gateway', instanceId: gatewayId });
      const { createGateway } = await import('../server.ts');
      const gw = createGateway({ ...options, callSecret, gatewayId, runners: runners.map((r) => r.url), renderMetrics: telemetry.render });
      const { url, port } = await gw.listen(values.port as number, values.host as string);
      const tokenFile = await keepOperatorToken(gw.config, port, env, logger);
      reportListening(url);
      const model = ((values.model as string[] | undefined) ?? simEngineDefaults.models)[0];
      const banner =
        `\nsluice is up at ${url} with ${count} runners (placer ${gw.config.placer.name}). Try:\n` +
        `  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${model}","messages":[{"role":"user","content":"hi"}]}'\n` +
        (tokenFile ? `  curl -s ${url}/v1/runners -H "authorization: Bearer $(cat ${tokenFile})"\n` : '') +
        'Ctrl-C stops everything.\n\n';
      process.stdout.write(redact(banner));
      return async () => {
        await gw.close();
        await stopChildren();
        await telemetry.shutdown();
      };
    } catch (error) {
      await stopChildren();
      throw error;
    }
  },
};

/**
 * Children of `up` get the settings given to `up` as flags, and their own defaults for the rest;
 * the parent's SLUICE_* variables (meant for the gateway, where SLUICE_RUNNERS is a count) and
 * PORT must not reach them.
 */
function childEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const copy = { ...env };
  for (const name of Object.keys(copy)) if (name.startsWith('SLUICE_') || name === 'PORT') delete copy[name];
  return copy;
}
