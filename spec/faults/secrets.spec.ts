/**
 * Fault: secrets given to sluice were published. The OpenTelemetry resource carried the whole
 * command line (`--runner-token`, `--callback-secret`, a password in `--store redis://...`) on
 * the unauthenticated /metrics page, beside the owner and host name, and settings errors could
 * echo a secret back. Here every process gets every secret-bearing setting, by flag and by
 * SLUICE_* variable, does real work with them (a runner registers with the token, a detached call
 * is kept in a password-protected Redis and its callback is signed), and then every route, error
 * body and line of output is searched for each secret.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateWebhookSecret, verifyWebhook } from '../../gateway/callbacks/index.ts';
import { SLUICE_BIN, startService } from '../../gateway/cli/entry.ts';
import { processTreeCommandLines } from '../support/process-tree.ts';
import type { ChildService, StartOptions } from '../../placer/kernel/processes.ts';
import { chatBody, eventually, metricValue, postJson } from '../support/fleet.ts';
import { startRedis } from '../support/redis.ts';
import type { RedisServer } from '../support/redis.ts';

const RUNNER_TOKEN = `rt-${randomBytes(16).toString('hex')}`;
const CALLBACK_SECRET = generateWebhookSecret();
const REDIS_PASSWORD = `pw-${randomBytes(12).toString('hex')}`;
const CALL_SECRET = `cs-${randomBytes(24).toString('hex')}`;
const ENGINE_API_KEY = `ek-${randomBytes(16).toString('hex')}`;
const OPERATOR_TOKEN = `op-${randomBytes(16).toString('hex')}`;
const asOperator = { authorization: `Bearer ${OPERATOR_TOKEN}` };
/** The secrets being rotated out, given beside the new ones in the secret files. */
const OLD_RUNNER_TOKEN = `rt-old-${randomBytes(16).toString('hex')}`;
const OLD_CALLBACK_SECRET = generateWebhookSecret();
/** Each secret, and the parts of one that could be printed alone (the key after `whsec_`). */
const SECRETS = [
  RUNNER_TOKEN,
  CALLBACK_SECRET,
  CALLBACK_SECRET.slice('whsec_'.length),
  REDIS_PASSWORD,
  OLD_RUNNER_TOKEN,
  OLD_CALLBACK_SECRET,
  OLD_CALLBACK_SECRET.slice('whsec_'.length),
  OPERATOR_TOKEN,
  CALL_SECRET,
  ENGINE_API_KEY,
];
const secretDir = mkdtempSync(join(tmpdir(), 'sluice-secret-files-'));
/** A secret file as an operator would write it: a comment, the new secret, the old one, mode 600. */
function secretFile(name: string, lines: readonly string[], mode = 0o600): string {
  const path = join(secretDir, name);
  writeFileSync(path, `# ${name}: newest first\n${lines.join('\n')}\n`);
  chmodSync(path, mode);
  return path;
}

/** Fails naming where a secret (of SECRETS, or `more`) showed up, without printing the text around it twice. */
function expectNoSecret(where: string, text: string, more: readonly string[] = []): void {
  for (const secret of [...SECRETS, ...more]) {
    const at = text.indexOf(secret);
    expect(at, `${where} holds a secret: ...${text.slice(Math.max(0, at - 80), at + 20)}...`).toBe(-1);
  }
}

async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await request(url, { headers });
  return { status: res.statusCode, text: await res.body.text() };
}

/** A callback receiver on 127.0.0.1 that keeps every delivery. */
async function startReceiver(): Promise<{
  url: string;
  deliveries: { headers: Record<string, unknown>; body: string }[];
  server: Server;
}> {
  const deliveries: { headers: Record<string, unknown>; body: string }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, deliveries, server };
}

/** The environment of a child: this one's, minus any SLUICE_* variable a developer has set. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env))
    if (!name.startsWith('SLUICE_') && !name.startsWith('OTEL_')) env[name] = value;
  return { ...env, ...extra };
}

/** Every process of one case, with all it wrote. */
class Processes {
  readonly #started: ChildService[] = [];
  #output = '';

  async start(args: readonly string[], env: NodeJS.ProcessEnv): Promise<ChildService> {
    const options: StartOptions = { env, onOutput: (text) => (this.#output += text) };
    const service = await startService(args, options);
    this.#started.push(service);
    return service;
  }

  /** Stops everything (shutdown lines count too) and returns all the output. */
  async stop(): Promise<string> {
    await Promise.all(
      this.#started
        .splice(0)
        .reverse()
        .map((s) => s.stop('SIGTERM', 5000)),
    );
    return this.#output;
  }
}

/** The resource attributes on target_info, by name. */
function targetInfo(page: string): Record<string, string> {
  const line = page.split('\n').find((l) => l.startsWith('target_info{'));
  expect(line, 'target_info on /metrics').toBeDefined();
  const attributes: Record<string, string> = {};
  for (const m of line!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) attributes[m[1]!] = m[2]!;
  return attributes;
}

describe('fault: secrets given to sluice never appear in its output', () => {
  let redis: RedisServer;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let storeUrl: string;
  const secretDir = mkdtempSync(join(tmpdir(), 'sluice-secrets-files-'));
  const callSecretFile = join(secretDir, 'call-secret');
  writeFileSync(callSecretFile, `${CALL_SECRET}\n`, { mode: 0o600 });

  beforeAll(async () => {
    redis = await startRedis({ password: REDIS_PASSWORD });
    storeUrl = `redis://default:${REDIS_PASSWORD}@127.0.0.1:${redis.port}/0`;
    receiver = await startReceiver();
  });
  afterAll(async () => {
    receiver?.server.close();
    await redis?.stop();
    rmSync(secretDir, { recursive: true, force: true });
  });

  /**
   * A sim engine, a gateway and a runner that registers with it, all at debug level, each secret
   * given as `how` says; exercises the secrets, then reads every route and error body.
   */
  async function runFleet(
    how: 'flags' | 'env' | 'files',
  ): Promise<{ pages: Record<string, string>; output: string; gatewayId: string }> {
    const processes = new Processes();
    const pages: Record<string, string> = {};
    const gatewayId = how === 'flags' ? 'gw-secrets' : undefined;
    const tokenFile = secretFile('runner-tokens', [RUNNER_TOKEN, OLD_RUNNER_TOKEN]);
    let output: string;
    try {
      const engine = await processes.start(['sim-engine', '--port', '0', '--log-level', 'debug'], cleanEnv());
      const gateway = await processes.start(
        [
          'gateway',
          '--port',
          '0',
          '--log-level',
          'debug',
          '--callback-allow',
          receiver.url,
          '--callback-allow-private',
          '--runner-networks',
          '127.0.0.0/8',
          ...(gatewayId ? ['--gateway-id', gatewayId] : []),
          ...(how === 'flags'
            ? [
                '--runner-token',
                RUNNER_TOKEN,
                '--callback-secret',
                CALLBACK_SECRET,
                '--store',
                storeUrl,
                '--operator-token',
                OPERATOR_TOKEN,
                '--call-secret',
                CALL_SECRET,
              ]
            : []),
          // Both tokens accepted, both secrets signing: a rotation under way.
          ...(how === 'files'
            ? [
                '--runner-token-file',
                tokenFile,
                '--callback-secret-file',
                secretFile('callback-secrets', [CALLBACK_SECRET, OLD_CALLBACK_SECRET]),
                '--operator-token-file',
                secretFile('operator-tokens', [OPERATOR_TOKEN]),
                '--call-secret-file',
                callSecretFile,
              ]
            : []),
        ],
        cleanEnv(
          how === 'env'
            ? {
                SLUICE_RUNNER_TOKEN: RUNNER_TOKEN,
                SLUICE_CALL_SECRET: CALL_SECRET,
                SLUICE_CALLBACK_SECRET: CALLBACK_SECRET,
                SLUICE_STORE: storeUrl,
                SLUICE_OPERATOR_TOKEN: OPERATOR_TOKEN,
                // The SDK's env detector would add these to the resource; sluice sets its resource itself.
                OTEL_RESOURCE_ATTRIBUTES: 'host.name=leaky-host,deployment.environment=leaky',
              }
            : how === 'files'
              ? { SLUICE_STORE: storeUrl }
              : {},
        ),
      );
      const runner = await processes.start(
        [
          'runner',
          '--port',
          '0',
          '--log-level',
          'debug',
          '--engine',
          engine.url,
          '--engine-kind',
          'sim',
          '--id',
          'runner-secrets',
          '--gateway',
          gateway.url,
          // The runner reads the call secret from a file in the flags case: the third way to give it.
          ...(how === 'flags'
            ? ['--runner-token', RUNNER_TOKEN, '--call-secret-file', callSecretFile, '--engine-api-key', ENGINE_API_KEY]
            : []),
          // The gateways' own file: the runner presents its first token.
          ...(how === 'files' ? ['--runner-token-file', tokenFile, '--call-secret-file', callSecretFile] : []),
        ],
        cleanEnv(
          how === 'env'
            ? {
                SLUICE_RUNNER_TOKEN: RUNNER_TOKEN,
                SLUICE_CALL_SECRET: CALL_SECRET,
                SLUICE_ENGINE_API_KEY: ENGINE_API_KEY,
              }
            : {},
        ),
      );
      const gw = gateway.url;
      // The call secret works: the runner refuses a call that does not come through the gateway.
      const unsigned = await postJson(`${runner.url}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
      expect(unsigned.status).toBe(401);
      pages['runner refusing an unsigned call'] = unsigned.text;

      // The token works: the runner registered and takes calls.
      await eventually(
        async () =>
          JSON.parse((await get(`${gw}/v1/runners`, asOperator)).text).data?.some(
            (r: { placeable: boolean }) => r.placeable,
          ) === true,
        15_000,
        'the runner to register',
      );
      const sync = await postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
      expect(sync.status).toBe(200);
      expect(sync.json.object).toBe('chat.completion');

      // The Redis password works (the call is kept in the store) and the callback is signed with the secret.
      const before = receiver.deliveries.length;
      const detached = await postJson(`${gw}/v1/chat/completions`, chatBody({ max_tokens: 3 }), {
        prefer: 'respond-async',
        'sluice-callback-url': `${receiver.url}/hook`,
      });
      expect(detached.status).toBe(202);
      const id = detached.json.id as string;
      await eventually(
        async () => JSON.parse((await get(`${gw}/v1/calls/${id}`)).text).status === 'succeeded',
        15_000,
        'the detached call to succeed',
      );
      await eventually(() => receiver.deliveries.length > before, 15_000, 'the callback');
      const delivery = receiver.deliveries[before]!;
      expect(
        verifyWebhook({
          headers: delivery.headers as Record<string, string>,
          body: delivery.body,
          secret: CALLBACK_SECRET,
        }).kind,
      ).toBe('verified');
      // A receiver still on the old secret verifies too, while the file lists both.
      if (how === 'files')
        expect(
          verifyWebhook({
            headers: delivery.headers as Record<string, string>,
            body: delivery.body,
            secret: OLD_CALLBACK_SECRET,
          }).kind,
        ).toBe('verified');
      pages['GET /v1/calls/:id'] = (await get(`${gw}/v1/calls/${id}`)).text;
      pages['callback delivery'] = JSON.stringify(delivery);

      // Each call ran once on the engine: nothing lost, nothing repeated.
      const enginePage = (await get(`${engine.url}/metrics`)).text;
      expect(metricValue(enginePage, 'sluice_sim_requests_completed_total')).toBe(2);

      for (const path of ['/metrics', '/healthz', '/readyz', '/v1/runners', '/v1/models', '/v1/queue'])
        pages[`gateway GET ${path}`] = (await get(`${gw}${path}`, asOperator)).text;
      // A near miss of the operator token is refused and echoed nowhere.
      const wrongOperator = await get(`${gw}/v1/runners`, { authorization: `Bearer ${OPERATOR_TOKEN.slice(0, -1)}x` });
      expect(wrongOperator.status).toBe(401);
      pages['wrong operator token'] = wrongOperator.text;
      for (const path of ['/status', '/healthz', '/readyz'])
        pages[`runner GET ${path}`] = (await get(`${runner.url}${path}`)).text;
      pages['engine GET /metrics'] = enginePage;

      const badJson = await postJson(`${gw}/v1/chat/completions`, '{"model": ');
      expect(badJson.status).toBe(400);
      pages['bad JSON'] = badJson.text;
      const unknownModel = await postJson(`${gw}/v1/chat/completions`, chatBody({ model: 'no-such-model' }));
      expect(unknownModel.status).toBeGreaterThanOrEqual(400);
      pages['unknown model'] = unknownModel.text;
      // A near miss of the real token: an answer or log echoing what was presented would show most of it.
      const wrongToken = await postJson(`${gw}/v1/runners/register`, '{}', {
        authorization: `Bearer ${RUNNER_TOKEN.slice(0, -1)}x`,
      });
      expect(wrongToken.status).toBe(401);
      pages['wrong runner token'] = wrongToken.text;
      // The token being rotated out is accepted too, but not for an id bound to the new one.
      const oldToken = await postJson(
        `${gw}/v1/runners/runner-secrets/heartbeat`,
        '{"models": [], "load": {"slotsInUse": 0, "slots": 4}}',
        { authorization: `Bearer ${OLD_RUNNER_TOKEN}` },
      );
      expect(oldToken.status).toBe(how === 'files' ? 403 : 401);
      pages['runner id bound to another token'] = oldToken.text;
      const badRegistration = await postJson(`${gw}/v1/runners/register`, '{"id": 1}', {
        authorization: `Bearer ${RUNNER_TOKEN}`,
      });
      expect(badRegistration.status).toBe(400);
      pages['bad registration'] = badRegistration.text;
      const badCallback = await postJson(`${gw}/v1/chat/completions`, chatBody(), {
        prefer: 'respond-async',
        'sluice-callback-url': 'https://elsewhere.example.com/hook',
      });
      expect(badCallback.status).toBe(400);
      pages['callback refused'] = badCallback.text;
      const unknownCall = await get(`${gw}/v1/calls/nope`);
      expect(unknownCall.status).toBe(404);
      pages['unknown call'] = unknownCall.text;
    } finally {
      output = await processes.stop();
    }
    return { pages, output, gatewayId: gatewayId ?? '' };
  }

  for (const how of ['flags', 'env', 'files'] as const) {
    const given = {
      flags: 'flag',
      env: 'SLUICE_* variable',
      files: 'secret file (two of each, a rotation under way) and the store URL by variable',
    }[how];
    it(`keeps every secret given by ${given} out of every route, error body and log line`, async () => {
      const { pages, output, gatewayId } = await runFleet(how);
      for (const [where, text] of Object.entries(pages)) expectNoSecret(where, text);
      expectNoSecret('process output', output);

      // The resource is what an operator needs and nothing more: no command line, owner, host or pid.
      const resource = targetInfo(pages['gateway GET /metrics']!);
      expect(Object.keys(resource).sort()).toEqual(['service_instance_id', 'service_name', 'service_version']);
      expect(resource.service_name).toBe('sluice-gateway');
      expect(resource.service_version).toMatch(/^\d+\.\d+\.\d+/);
      if (gatewayId) expect(resource.service_instance_id).toBe(gatewayId);
      else expect(resource.service_instance_id).toMatch(/^gw-[0-9a-f]{6}$/);
    }, 90_000);
  }

  it('keeps the secrets of `sluice up` out of its routes, banner and logs, its own operator token included', async () => {
    const processes = new Processes();
    const pages: Record<string, string> = {};
    const runtime = mkdtempSync(join(tmpdir(), 'sluice-secrets-runtime-'));
    let output: string;
    let made = '';
    try {
      const up = await processes.start(
        [
          'up',
          '--port',
          '0',
          '--runners',
          '1',
          '--log-level',
          'debug',
          '--callback-secret',
          CALLBACK_SECRET,
          '--store',
          storeUrl,
          '--callback-allow',
          receiver.url,
          '--callback-allow-private',
        ],
        cleanEnv({ XDG_RUNTIME_DIR: runtime }),
      );
      const sync = await postJson(`${up.url}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
      expect(sync.status).toBe(200);
      // No --operator-token: the gateway made one and put it where only its user can read it.
      const file = join(runtime, 'sluice', `operator-token-${new URL(up.url).port}`);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      made = readFileSync(file, 'utf8').trim();
      expect(made).toMatch(/^sluice-op-[\w-]{43}$/);
      expect((await get(`${up.url}/v1/runners`)).status).toBe(401);
      const operator = { authorization: `Bearer ${made}` };
      for (const path of ['/metrics', '/healthz', '/readyz', '/v1/runners', '/v1/models'])
        pages[`GET ${path}`] = (await get(`${up.url}${path}`, operator)).text;
      // up's runners got a call secret, and not on their command line, which any local user can read.
      const runnerUrl = JSON.parse(pages['GET /v1/runners']!).data[0].url as string;
      const unsigned = await postJson(`${runnerUrl}/v1/chat/completions`, chatBody({ max_tokens: 3 }));
      expect(unsigned.status).toBe(401);
      expect(unsigned.json.error.code).toBe('RUNNER_UNAUTHORIZED');
      const commandLines = processTreeCommandLines(up.child.pid!).join('\n');
      expect(commandLines).toContain(' runner --port 0 --engine ');
      expect(commandLines).not.toMatch(/call-secret/i);
    } finally {
      output = await processes.stop();
      rmSync(runtime, { recursive: true, force: true });
    }
    for (const [where, text] of Object.entries(pages)) expectNoSecret(where, text, [made]);
    expect(output).toContain('sluice is up at');
    // The banner says where the token is, never what it is.
    expect(output).toContain('operator-token-');
    expectNoSecret('sluice up output', output, [made]);
    expect(Object.keys(targetInfo(pages['GET /metrics']!)).sort()).toEqual([
      'service_instance_id',
      'service_name',
      'service_version',
    ]);
  }, 90_000);

  describe('when a secret setting is bad, the error names it without echoing it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-secrets-spec-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    /** Runs a command that must refuse to start; returns its stderr and stdout together. */
    function refused(args: readonly string[], env: Record<string, string> = {}): string {
      const run = spawnSync(process.execPath, [SLUICE_BIN, ...args], {
        env: cleanEnv(env),
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(run.status, `sluice ${args[0]} should refuse to start:\n${run.stdout}${run.stderr}`).toBe(2);
      return run.stderr + run.stdout;
    }

    const short = RUNNER_TOKEN.slice(0, 15);
    const pw = REDIS_PASSWORD;
    it.each([
      [
        'a runner token too short, by flag',
        ['gateway', '--runner-token', short],
        {},
        /runnerToken|runner-token/,
        short,
      ],
      [
        'a runner token too short, by variable',
        ['gateway'],
        { SLUICE_RUNNER_TOKEN: short },
        /runnerToken|runner-token/,
        short,
      ],
      [
        'a runner token with a space',
        ['runner', '--engine', 'http://127.0.0.1:1', '--runner-token', `${RUNNER_TOKEN} x`],
        {},
        /runnerToken|runner-token/,
        RUNNER_TOKEN,
      ],
      [
        'a malformed callback secret',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--callback-secret', `whsec_${RUNNER_TOKEN}!`],
        {},
        /secret/,
        RUNNER_TOKEN,
      ],
      [
        'a store URL with a password but no port',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--store', `redis://default:${pw}@127.0.0.1`],
        {},
        /store/,
        pw,
      ],
      [
        'a store URL with a password but no port, by variable',
        ['gateway', '--runners', 'http://127.0.0.1:1'],
        { SLUICE_STORE: `redis://default:${pw}@127.0.0.1` },
        /store/,
        pw,
      ],
      [
        'a store URL with only a password as userinfo',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--store', `redis://${pw}@127.0.0.1`],
        {},
        /store/,
        pw,
      ],
      [
        'a store URL missing a slash',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--store', `redis:/default:${pw}@127.0.0.1:6379`],
        {},
        /store/,
        pw,
      ],
      [
        'a store URL with a TLS scheme',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--store', `rediss://default:${pw}@127.0.0.1:6379`],
        {},
        /store/,
        pw,
      ],
      [
        'a call secret too short, by flag',
        ['gateway', '--runners', 'http://127.0.0.1:1', '--call-secret', CALL_SECRET.slice(0, 31)],
        {},
        /callSecret/,
        CALL_SECRET.slice(0, 31),
      ],
      [
        'a runner call secret with a space, by flag',
        ['runner', '--engine', 'http://127.0.0.1:1', '--call-secret', `${CALL_SECRET} x`],
        {},
        /callSecret/,
        CALL_SECRET,
      ],
      [
        'a runner call secret too short, by variable',
        ['runner', '--engine', 'http://127.0.0.1:1'],
        { SLUICE_CALL_SECRET: CALL_SECRET.slice(0, 20) },
        /callSecret/,
        CALL_SECRET.slice(0, 20),
      ],
    ] as const)('refuses %s', (_name, args, env, names, secret) => {
      const text = refused(args, env);
      expect(text).toMatch(names);
      expect(text).not.toContain(secret);
    });

    it.each([
      ['gateway --runner-token-file', 'gateway', ['--runner-token-file']],
      ['gateway --callback-secret-file', 'gateway', ['--callback-secret-file']],
      [
        'runner --runner-token-file',
        'runner',
        ['--engine', 'http://127.0.0.1:1', '--gateway', 'http://127.0.0.1:2', '--runner-token-file'],
      ],
    ] as const)(
      'refuses a secret file any user may read, naming the file and not its content: %s',
      (_name, command, args) => {
        const path = secretFile(
          `world-readable-${args.at(-1)!.slice(2)}-${command}`,
          [RUNNER_TOKEN, CALLBACK_SECRET],
          0o644,
        );
        const text = refused([
          command,
          ...(command === 'gateway' ? ['--runners', 'http://127.0.0.1:1'] : []),
          ...args,
          path,
        ]);
        expect(text).toContain(path);
        expect(text).toMatch(/may be read by any user of this machine \(mode 644\)/);
        expect(text).not.toContain(RUNNER_TOKEN);
        expect(text).not.toContain(CALLBACK_SECRET);
      },
    );

    it('refuses an empty secret file and a token given both ways', () => {
      const empty = secretFile('empty', []);
      expect(refused(['gateway', '--runner-token-file', empty])).toMatch(/runnerTokenFile ".*empty" holds no secret/);
      const file = secretFile('both-ways', [RUNNER_TOKEN]);
      const both = refused(['gateway', '--runner-token', OLD_RUNNER_TOKEN, '--runner-token-file', file]);
      expect(both).toMatch(/give --runner-token or --runner-token-file, not both/);
      expect(both).not.toContain(RUNNER_TOKEN);
      expect(both).not.toContain(OLD_RUNNER_TOKEN);
    });

    it('refuses a token in a secret file that breaks the token rule, without echoing it', () => {
      const short = secretFile('short-token', [RUNNER_TOKEN, RUNNER_TOKEN.slice(0, 15)]);
      const text = refused(['gateway', '--runner-token-file', short]);
      expect(text).toMatch(/runnerTokens\[1\] must be a string of at least 16/);
      expect(text).not.toContain(RUNNER_TOKEN.slice(0, 15));
    });

    it('refuses to start without echoing the password when Redis refuses it', () => {
      const wrong = `wrong-${pw}`;
      const text = refused([
        'gateway',
        '--runners',
        'http://127.0.0.1:1',
        '--store',
        `redis://default:${wrong}@127.0.0.1:${redis.port}/0`,
      ]);
      expect(text).toMatch(/STORE|store/);
      expect(text).not.toContain(wrong);
    });

    it('refuses a secret of the wrong type in the --config file without echoing it', () => {
      const path = join(dir, 'config.json');
      writeFileSync(path, JSON.stringify({ runnerToken: [RUNNER_TOKEN], runners: ['http://127.0.0.1:1'] }));
      const text = refused(['gateway', '--config', path]);
      expect(text).toMatch(/runnerToken/);
      expect(text).not.toContain(RUNNER_TOKEN);
    });

    it('shows --help without the secrets set in the environment', () => {
      const run = spawnSync(process.execPath, [SLUICE_BIN, 'gateway', '--help'], {
        env: cleanEnv({
          SLUICE_RUNNER_TOKEN: RUNNER_TOKEN,
          SLUICE_CALLBACK_SECRET: CALLBACK_SECRET,
          SLUICE_STORE: storeUrl,
          SLUICE_CALL_SECRET: CALL_SECRET,
        }),
        encoding: 'utf8',
      });
      expect(run.status).toBe(0);
      expect(run.stdout).toContain('--runner-token');
      expect(run.stdout).toContain('--call-secret');
      expectNoSecret('gateway --help', run.stdout + run.stderr);
    });
  });
});
