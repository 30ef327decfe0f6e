/**
 * `sluice runner`: the runner's settings and their wiring into createRunner. The defaults --help
 * shows are read from runnerDefaults; a setting not given is left out, so the runner applies
 * the same default itself.
 */
import type { RunnerOptions } from '../../runner/options.ts';
import { runnerDefaults } from '../../runner/options.ts';
import type { Command } from './command.ts';
import { givenAs, givenValues, host, logFormat, logLevel, oneOf, port, settingsOf } from './command.ts';
import { lingerSettings, withSecretFile } from './settings.ts';
import { runnerDataPlaneOptions, runnerDataPlaneSettings } from './data-plane.ts';
import { reportListening } from '../../placer/kernel/index.ts';
import { SLUICE_BIN } from './entry.ts';
import { startTelemetry, tracesExporter } from './telemetry.ts';

/** Settings whose defaults are runnerDefaults'. */
const r = settingsOf(runnerDefaults);

/** The runner options that are settings of the same name. */
const RUNNER_KEYS = [
  'engine',
  'profile',
  'engineKind',
  'slots',
  'id',
  'engineConnectTimeout',
  'acceptWindow',
  'maxBodyBytes',
  'bodyReadTimeout',
  'bodyIdleTimeout',
  'engineProbeInterval',
  'loadInterval',
  'engineStopGrace',
  'engineRestartBackoff',
  'drainTimeout',
  'runnerToken',
  'advertiseUrl',
  'heartbeatInterval',
  'engineApiKey',
  'engineModels',
  'hashSeed',
  'cacheFeedInterval',
  'engineKvEvents',
  'engineBlockSize',
  'kvBlockKeys',
  'kvBlockSize',
] as const;

/** The lingering close's bounds (placer/kernel/linger.ts), runner options of the same name. */
const LINGER_KEYS = ['lingerTime', 'lingerIdleTimeout', 'lingerMaxBytes'] as const;

/** `sluice runner`. */
export const runner: Command = {
  summary:
    'Runs a runner in front of one OpenAI-compatible engine (vLLM, SGLang, llama.cpp, TGI, Ollama, sim): one already running (--engine), one it launches and supervises (--profile), or, with neither, the one its gateways order (an on-demand runner).',
  settings: [
    port(9000),
    host,
    {
      key: 'engine',
      type: 'string',
      description: 'base URL of an engine already running, e.g. http://127.0.0.1:8000',
      defaultText: 'none: without --engine and --profile the runner hosts the engines its gateways order',
    },
    {
      key: 'profile',
      type: 'json',
      description:
        'engine to launch and supervise: inline JSON or a JSON file, e.g. {"kind":"vllm","model":"...","gpus":[0],"port":8000}',
      defaultText: 'none: without --engine and --profile the runner hosts the engines its gateways order',
    },
    {
      key: 'engineKind',
      type: 'string',
      description: 'vllm, sglang, llamacpp, tgi, ollama, openai or sim: how to check health and read load',
      defaultText: "the profile's kind, else openai",
    },
    r('slots', 'integer', 'calls run at once; more are answered busy'),
    {
      key: 'id',
      type: 'string',
      description: 'runner id, sent in sluice-runner-id',
      defaultText: 'runner- and 6 random hex digits',
    },
    r('engineConnectTimeout', 'duration', 'how long connecting to the engine may take'),
    r(
      'acceptWindow',
      'duration',
      "how long a detached call waits for its engine's status line before the runner answers 202; a refusal inside it sends the call elsewhere",
    ),
    r('maxBodyBytes', 'integer', 'largest request body the runner reads, in bytes; larger is refused with 413'),
    r(
      'bodyReadTimeout',
      'duration',
      "longest time a call's body may take to arrive once the call holds a slot (408 after)",
    ),
    r('bodyIdleTimeout', 'duration', "longest silence before or between chunks of a call's body (408 after)"),
    r('engineProbeInterval', 'duration', 'how often engine health and models are checked'),
    r('loadInterval', 'duration', "how often the engine's metrics are read for its load"),
    r('engineStopGrace', 'duration', 'how long a launched engine gets after SIGTERM before SIGKILL'),
    r(
      'engineRestartBackoff',
      'duration',
      'first delay before relaunching a crashed engine (doubles per crash, max 60s, jittered)',
    ),
    r(
      'drainTimeout',
      'duration',
      'how long shutdown, a drain a gateway asks for, or the stop of an ordered engine waits for running calls',
    ),
    ...lingerSettings(
      r,
      "after an answer given before the call's body was read whole (busy, 401, 413), how long the rest may still be read and discarded before the connection closes",
    ),
    {
      key: 'gateway',
      type: 'list',
      description: 'gateway URLs to register with and heartbeat, comma-separated, e.g. http://gw1:8080,http://gw2:8080',
      defaultText: 'none: only gateways that list this runner call it',
    },
    ...withSecretFile(
      {
        key: 'runnerToken',
        type: 'string',
        secret: true,
        description:
          'shared token the gateways expect (16+ printable ASCII characters, no spaces); prefer --runner-token-file or the environment variable (never shown)',
        defaultText: 'none; required with --gateway',
      },
      "runner tokens, one a line, newest first (the gateways' file will do): the runner presents the first",
    ),
    {
      key: 'engineApiKey',
      type: 'string',
      secret: true,
      description:
        "the engine's own key (vLLM --api-key), sent to it as a bearer token on every call and probe; prefer the environment variable (never shown)",
      defaultText: 'none',
    },
    {
      key: 'engineModels',
      type: 'list',
      description:
        "the models the engine serves, comma-separated, e.g. llama-8b,llama-8b-lora: they win over the engine's /v1/models, which is then not read (for an engine whose list is broken or absent)",
      defaultText: "none: read from the engine's /v1/models",
    },
    {
      key: 'advertiseUrl',
      type: 'string',
      description: 'URL the gateways should call this runner on; required with --gateway when --host is 0.0.0.0 or ::',
      defaultText: 'the URL it listens on',
    },
    r(
      'heartbeatInterval',
      'duration',
      'how often to heartbeat each gateway, unless the gateway asks for another interval',
    ),
    r(
      'hashSeed',
      'string',
      'PYTHONHASHSEED of a launched vllm or sim engine, which seeds its block hashes, and the seed of the blocks the runner names with --kv-block-keys tokens; announced to gateways so they name blocks alike',
    ),
    r(
      'cacheFeedInterval',
      'duration',
      "how often the engine's stored and removed cache blocks are sent to each gateway when there are any",
    ),
    {
      key: 'engineKvEvents',
      type: 'string',
      description:
        'KV-event endpoint of the vllm, sglang or sim engine behind --engine, which binds it (its --kv-events-config endpoint, e.g. tcp://127.0.0.1:5557); for vLLM keys the engine runs with PYTHONHASHSEED = --hash-seed; the runner feeds its cache to gateways',
      defaultText: 'none',
    },
    r(
      'engineBlockSize',
      'integer',
      'tokens per block of the engine behind --engine (its --block-size), with --engine-kv-events',
    ),
    {
      key: 'kvBlockKeys',
      type: 'string',
      description:
        "how cached blocks are named to gateways: native (the engine's own hashes, vLLM's sha256_cbor) or tokens (named anew by the runner from their token ids, in blocks of --kv-block-size)",
      defaultText: 'tokens for sglang and for a sim engine with --kv-events-style sglang, native otherwise',
    },
    r('kvBlockSize', 'integer', 'tokens per block the runner names blocks in with --kv-block-keys tokens'),
    {
      key: 'engineBinary',
      type: 'list',
      repeatable: true,
      description:
        "executables engine orders may name besides each kind's usual entry point (vllm, python3 for sglang, llama-server, text-generation-launcher, ollama), kind=path, comma-separated or repeated, e.g. vllm=/opt/vllm/bin/vllm; any other is refused before launch",
      defaultText: "none: each kind's usual entry point only",
    },
    {
      key: 'engineEnvAllow',
      type: 'list',
      repeatable: true,
      description:
        "environment variables engine orders may set besides each kind's allow-list (docs/security.md), NAME or kind=NAME, comma-separated or repeated; LD_*, BASH_ENV, NODE_OPTIONS, PYTHON*, PATH and the like are never allowed",
      defaultText: "none: each kind's allow-list only",
    },
    {
      key: 'label',
      type: 'list',
      description:
        'labels advertised to gateways for selecting nodes, key=value, comma-separated, e.g. zone=a,gpu=h100 (Kubernetes label syntax)',
      defaultText: 'none',
    },
    ...runnerDataPlaneSettings,
    logLevel,
    logFormat,
  ],
  async run({ values, env, logger }) {
    // Traces, when OTEL_* variables ask for them (telemetry.ts); the runner's spans are children
    // of the gateway's. The runner exports nothing else, so without traces the SDK is not loaded.
    const telemetry =
      tracesExporter(env) === 'none'
        ? { shutdown: async () => {} }
        : await startTelemetry(env, {
            name: 'sluice-runner',
            ...(values.id === undefined ? {} : { instanceId: String(values.id) }),
          });
    const [{ createRunner }, { readSecretLines }] = await Promise.all([
      import('../../runner/server.ts'),
      import('../access/secrets.ts'),
    ]);
    const tokenFile = values.runnerTokenFile as string | undefined;
    oneOf(values, 'runnerToken', 'runnerTokenFile');
    const runner = createRunner({
      ...(givenValues(values, RUNNER_KEYS) as RunnerOptions),
      ...(givenValues(values, LINGER_KEYS) as RunnerOptions),
      // The newest token: every gateway that lists it accepts it.
      ...(tokenFile === undefined ? {} : { runnerToken: readSecretLines('runnerTokenFile', tokenFile)[0] }),
      ...(givenAs(values, {
        gateway: 'gateways',
        label: 'labels',
        engineBinary: 'engineBinaries',
        engineEnvAllow: 'engineEnvAllow',
      }) as RunnerOptions),
      ...runnerDataPlaneOptions(values),
      // A sim profile launches this same sluice entry point as `sluice sim-engine`.
      simCommand: [process.execPath, SLUICE_BIN],
      logger,
    });
    // The one place a launched engine is killed when the process dies without a graceful stop.
    process.once('exit', () => runner.killEngine());
    try {
      const { url } = await runner.listen(values.port as number, values.host as string);
      reportListening(url);
    } catch (error) {
      await runner.close({ drainTimeout: 0 });
      await telemetry.shutdown();
      throw error;
    }
    // A drain a gateway asked for ends the runner by itself: `done` tells main to exit then.
    const stop = async (): Promise<void> => {
      await runner.close();
      await telemetry.shutdown();
    };
    return Object.assign(stop, { done: runner.closed.then(() => telemetry.shutdown()) });
  },
};
