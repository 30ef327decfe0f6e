/**
 * The container image (docs/deploy/Dockerfile) as far as it can be checked without a container
 * runtime: the recipe's shape (stages, user, entry point, health check), and the CLI run as the
 * image runs it, with no flag: the command as its only argument, every setting from the image's
 * SLUICE_* variables and the orchestrator's, the tokens and secrets from mounted files. Processes
 * listen on 127.0.0.1 (the image's 0.0.0.0 is swapped for it) on ports the system picks.
 */
import { spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { gateway } from '../../gateway/cli/gateway-command.ts';
import { runner } from '../../gateway/cli/runner-command.ts';
import { up } from '../../gateway/cli/up.ts';
import { simEngine } from '../../gateway/cli/sim-command.ts';
import { envOf, resolveSettings } from '../../gateway/cli/settings.ts';
import { gatewayDataPlaneOptions } from '../../gateway/cli/data-plane.ts';
import { resolveDataPlane } from '../../gateway/fleet/data-plane.ts';
import { checkFrontListen } from '../../gateway/http/front-tls.ts';
import { GatewayConfigError } from '../../gateway/errors.ts';
import { startService } from '../../gateway/cli/entry.ts';
import type { ChildService } from '../../placer/kernel/processes.ts';
import { bearer, chatBody, eventually, getJson, postJson } from '../support/fleet.ts';
import { root as ROOT } from '../layers/sources.ts';

const DOCKERFILE = readFileSync(join(ROOT, 'docs/deploy/Dockerfile'), 'utf8');
const HEALTHCHECK = join(ROOT, 'docs/deploy/healthcheck.mjs');

/** The instructions of the Dockerfile, continuation lines joined, comments left out. */
const instructions = DOCKERFILE.replace(/\\\n\s*/g, ' ')
  .split('\n')
  .map((line) => line.trim())
  .filter((line) => line !== '' && !line.startsWith('#'));
const named = (word: string) => instructions.filter((line) => line.startsWith(`${word} `));

/** The variables the final stage sets with ENV. */
function imageEnv(): Record<string, string> {
  const last = instructions.findLastIndex((line) => line.startsWith('FROM '));
  const env: Record<string, string> = {};
  for (const line of instructions.slice(last).filter((l) => l.startsWith('ENV ')))
    for (const [, name, value] of line.slice(4).matchAll(/(\w+)=(\S+)/g)) env[name!] = value!;
  return env;
}

/** The test runner's environment without SLUICE_* and PORT, plus `env`: what a container gets. */
function containerEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env))
    if (!name.startsWith('SLUICE_') && name !== 'PORT' && name !== 'XDG_RUNTIME_DIR') clean[name] = value;
  return { ...clean, ...env };
}

const dir = mkdtempSync(join(tmpdir(), 'sluice-container-'));
const started: ChildService[] = [];
afterAll(async () => {
  await Promise.all(started.splice(0).map((s) => s.stop('SIGTERM', 5000)));
  rmSync(dir, { recursive: true, force: true });
});

/** A mounted secret file as Kubernetes writes one with defaultMode 0440: readable by owner and group. */
function secretFile(name: string, secret: string): string {
  const path = join(dir, name);
  writeFileSync(path, `${secret}\n`);
  chmodSync(path, 0o440);
  return path;
}

/** `sluice <command>`, no flag, the image's variables and `env`; the address swapped for loopback. */
async function runAsImage(command: string, env: Record<string, string>): Promise<ChildService> {
  const service = await startService([command], {
    env: containerEnv({ ...imageEnv(), SLUICE_HOST: '127.0.0.1', SLUICE_PORT: '0', ...env }),
  });
  started.push(service);
  return service;
}

/** Runs the image's health check against `port`; resolves with its exit code. */
function healthcheck(port: string): Promise<number | null> {
  const child = spawn(process.execPath, [HEALTHCHECK], { env: containerEnv({ SLUICE_PORT: port }), stdio: 'ignore' });
  return new Promise((resolve) => child.once('exit', resolve));
}

/** Runs `sluice <command>` as the image would, expecting it to stop at start; resolves with its exit code and stderr. */
function refused(command: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [join(ROOT, 'gateway/cli/tsx-sluice.mjs'), command], {
    env: containerEnv({ ...imageEnv(), ...env }),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stderr })));
}

describe('the container recipe', () => {
  it('builds with dev dependencies and runs with production ones, from one Node base image', () => {
    expect(named('ARG')).toContain('ARG NODE_IMAGE=docker.io/library/node:24-bookworm-slim');
    const stages = named('FROM');
    expect(stages.length).toBeGreaterThanOrEqual(3);
    for (const stage of stages) expect(stage).toMatch(/^FROM \$\{NODE_IMAGE\}/);
    expect(instructions).toContain('RUN npm run build');
    expect(named('RUN').some((line) => line.includes('npm ci --omit=dev'))).toBe(true);
    expect(named('COPY').filter((line) => line.includes('--from=build'))).toEqual(['COPY --from=build /src/dist dist']);
  });

  it('copies into the build stage, past .dockerignore, every source the build compiles', () => {
    const build = JSON.parse(readFileSync(join(ROOT, 'tsconfig.build.json'), 'utf8').replace(/^\/\/.*$/gm, '')) as {
      include: string[];
    };
    const buildStage = instructions.slice(
      instructions.findIndex((line) => line.endsWith(' AS build')),
      instructions.indexOf('RUN npm run build'),
    );
    const copied = buildStage
      .filter((line) => line.startsWith('COPY '))
      .flatMap((line) => line.split(/\s+/).slice(1, -1));
    const allowed = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('!'))
      .map((line) => line.slice(1));
    for (const source of [...build.include, 'tsconfig.build.json', 'gateway/cli/build.mjs']) {
      const covered = (paths: string[]) => paths.some((p) => source === p || source.startsWith(`${p}/`));
      expect(covered(copied), `${source} is copied`).toBe(true);
      expect(covered(allowed), `${source} passes .dockerignore`).toBe(true);
    }
  });

  it('runs as a numeric non-root user, sluice as PID 1 in exec form, with a health check', () => {
    expect(named('USER')).toEqual(['USER 10001:10001']);
    expect(named('ENTRYPOINT')).toEqual(['ENTRYPOINT ["sluice"]']);
    expect(named('HEALTHCHECK')[0]).toMatch(/CMD \["node", "\/app\/healthcheck\.mjs"\]$/);
  });

  it('sets only variables the image commands read as settings', () => {
    const env = Object.keys(imageEnv()).filter((name) => name.startsWith('SLUICE_'));
    expect(env).toEqual(['SLUICE_HOST', 'SLUICE_PORT']);
    for (const command of [gateway, runner, up, simEngine]) {
      const known = command.settings.map((s) => envOf(s.key));
      expect(known).toEqual(expect.arrayContaining(env));
    }
  });
});

describe('the behind-ingress switch, SLUICE_TLS_TERMINATED_UPSTREAM', () => {
  /** Whether a gateway given `env` (and the image's address) may listen there with plain http. */
  function listens(env: Record<string, string>): boolean {
    const { values } = resolveSettings(gateway.settings, [], { ...imageEnv(), ...env });
    const dataPlane = resolveDataPlane(gatewayDataPlaneOptions(values), (m) => new GatewayConfigError(m));
    try {
      checkFrontListen(dataPlane, values.host as string);
      return true;
    } catch (error) {
      expect(error).toBeInstanceOf(GatewayConfigError);
      return false;
    }
  }

  it("lets a gateway on the image's 0.0.0.0 listen with plain http only when set", () => {
    expect(listens({})).toBe(false);
    expect(listens({ SLUICE_TLS_TERMINATED_UPSTREAM: 'false' })).toBe(false);
    expect(listens({ SLUICE_TLS_TERMINATED_UPSTREAM: 'true' })).toBe(true);
    expect(listens({ SLUICE_HOST: '127.0.0.1' })).toBe(true);
  });

  it('is a setting of the commands that run a gateway, and of no other', () => {
    const has = (command: { settings: readonly { key: string }[] }) =>
      command.settings.some((s) => envOf(s.key) === 'SLUICE_TLS_TERMINATED_UPSTREAM');
    expect([gateway, up, runner, simEngine].map(has)).toEqual([true, true, false, false]);
  });
});

describe('sluice run as the image runs it: the command alone, settings from the environment and files', () => {
  const files = {
    operator: secretFile('operator-token', `op-${randomBytes(18).toString('base64url')}`),
    viewer: secretFile('viewer-token', `vw-${randomBytes(18).toString('base64url')}`),
    runnerToken: secretFile('runner-token', `rt-${randomBytes(18).toString('base64url')}`),
    callSecret: secretFile('call-secret', randomBytes(32).toString('base64url')),
  };
  const home = mkdtempSync(join(dir, 'home-'));

  it('serves a call through a gateway and a registered runner, and writes no token file', async () => {
    const engine = await runAsImage('sim-engine', {
      SLUICE_TTFT_MS: '0',
      SLUICE_ITL_MS: '0',
      SLUICE_OUTPUT_TOKENS: '2',
    });
    const gw = await runAsImage('gateway', {
      HOME: home,
      SLUICE_TLS_TERMINATED_UPSTREAM: 'true',
      SLUICE_OPERATOR_TOKEN_FILE: files.operator,
      SLUICE_VIEWER_TOKEN_FILE: files.viewer,
      SLUICE_RUNNER_TOKEN_FILE: files.runnerToken,
      SLUICE_CALL_SECRET_FILE: files.callSecret,
      SLUICE_RUNNER_NETWORKS: '127.0.0.0/8',
    });
    await runAsImage('runner', {
      HOME: home,
      SLUICE_ENGINE: engine.url,
      SLUICE_ENGINE_KIND: 'sim',
      SLUICE_GATEWAY: gw.url,
      SLUICE_ID: 'runner-in-a-pod',
      SLUICE_RUNNER_TOKEN_FILE: files.runnerToken,
      SLUICE_CALL_SECRET_FILE: files.callSecret,
    });
    const viewer = bearer(readFileSync(files.viewer, 'utf8').trim());
    await eventually(
      async () => (await getJson(`${gw.url}/v1/runners`, viewer)).json?.data?.[0]?.ready === true,
      20_000,
      'the runner to register, ready',
    );
    expect((await postJson(`${gw.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }))).status).toBe(200);
    expect((await getJson(`${gw.url}/v1/runners`)).status).toBe(401);
    // The tokens came from files: nothing was made, so nothing was written under the home folder.
    expect(readdirSync(home)).toEqual([]);
    expect(await healthcheck(new URL(gw.url).port)).toBe(0);
    expect(await healthcheck(new URL(engine.url).port)).toBe(0);
    expect(await gw.stop('SIGTERM')).toBe(0);
    expect(await healthcheck(new URL(gw.url).port)).toBe(1);
  }, 60_000);

  it('refuses plain http on every interface unless TLS terminates upstream, before listening', async () => {
    const env = {
      SLUICE_PORT: '0',
      SLUICE_RUNNER_TOKEN_FILE: files.runnerToken,
      SLUICE_OPERATOR_TOKEN_FILE: files.operator,
    };
    const { code, stderr } = await refused('gateway', { ...env, SLUICE_VIEWER_TOKEN_FILE: files.viewer });
    expect(code).toBe(2);
    expect(stderr).toMatch(/clear text on 0\.0\.0\.0: .*--tls-terminated-upstream/);
  }, 30_000);

  it('removes the token files it made when it stops', async () => {
    const made = mkdtempSync(join(dir, 'home-'));
    const gw = await runAsImage('gateway', { HOME: made, SLUICE_RUNNER_TOKEN_FILE: files.runnerToken });
    const port = new URL(gw.url).port;
    const operator = join(made, '.sluice', `operator-token-${port}`);
    const viewer = join(made, '.sluice', `viewer-token-${port}`);
    await eventually(() => existsSync(operator) && existsSync(viewer), 10_000, 'the token files');
    expect(statSync(operator).mode & 0o777).toBe(0o600);
    const token = readFileSync(operator, 'utf8').trim();
    expect((await getJson(`${gw.url}/v1/runners`, bearer(token))).status).toBe(200);
    expect(await gw.stop('SIGTERM')).toBe(0);
    expect(readdirSync(join(made, '.sluice'))).toEqual([]);
  }, 30_000);
});
