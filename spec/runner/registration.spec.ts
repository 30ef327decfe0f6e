/**
 * Runners registering with gateways, over real sockets on 127.0.0.1: a fake gateway written
 * here records what arrives and answers 401/404/5xx/drain on demand; the runner is the real
 * one in front of an in-process simulated engine. Time is only compressed through injected
 * timers, never waited out.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startService } from '../../gateway/cli/entry.ts';
import { commandLine } from '../support/command-line.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { RunnerConfigError } from '../../runner/errors.ts';
import { BUSY_HEADER, REGISTER_PATH, heartbeatPath, runnerPath } from '../../runner/protocol/index.ts';
import type { RunnerHeartbeat, RunnerRegistration } from '../../runner/protocol/index.ts';
import { BACKOFF_CAP_MS, GatewayRegistration } from '../../runner/registration.ts';
import type { RegistrationTimers } from '../../runner/registration.ts';
import { createRunner } from '../../runner/server.ts';
import type { RunnerEnvironment, RunnerServer, RunnerStatus } from '../../runner/server.ts';
import type { RunnerOptions } from '../../runner/options.ts';
import { serversForEach } from '../support/servers.ts';
import { startTextServer } from '../support/text-server.ts';
import type { TextServer } from '../support/text-server.ts';
import { startSimEngine } from '../support/sim-runner.ts';

const TOKEN = 'sekret-token-0123456789';
const { cleanups } = serversForEach();

type Kind = 'register' | 'heartbeat' | 'delete';
interface Seen {
  kind: Kind;
  id: string;
  auth: string | undefined;
  body: any;
  status: number;
}

/** A gateway's registration endpoints, recording every request; `force` overrides an answer. */
class FakeGateway {
  readonly seen: Seen[] = [];
  readonly known = new Set<string>();
  token = TOKEN;
  drain = false;
  heartbeatInterval: number | undefined;
  force: (kind: Kind) => number | 'hang' | undefined = () => undefined;
  #server: TextServer | undefined;
  #waiters: Array<() => void> = [];

  static async start(port = 0): Promise<FakeGateway> {
    const gw = new FakeGateway();
    gw.#server = await startTextServer((req, res, text) => {
      const path = req.url ?? '';
      const kind: Kind = req.method === 'DELETE' ? 'delete' : path === REGISTER_PATH ? 'register' : 'heartbeat';
      const body = text ? JSON.parse(text) : undefined;
      const id = kind === 'register' ? body.id : decodeURIComponent(path.split('/')[3] ?? '');
      const forced = gw.force(kind);
      if (forced === 'hang') return;
      let status =
        forced ??
        (req.headers.authorization !== `Bearer ${gw.token}`
          ? 401
          : kind === 'register'
            ? 200
            : gw.known.has(id)
              ? kind === 'delete'
                ? 204
                : 200
              : 404);
      if (status === 200 && kind === 'heartbeat' && path !== heartbeatPath(id)) status = 400;
      if (status < 300 && kind === 'register') gw.known.add(id);
      if (status < 300 && kind === 'delete') gw.known.delete(id);
      gw.seen.push({ kind, id, auth: req.headers.authorization, body, status });
      const answer =
        kind === 'register'
          ? { gatewayId: 'gw-test', ...(gw.heartbeatInterval ? { heartbeatInterval: gw.heartbeatInterval } : {}) }
          : { drain: gw.drain };
      res
        .writeHead(status, { 'content-type': 'application/json' })
        .end(status === 200 ? JSON.stringify(answer) : undefined);
      for (const wake of gw.#waiters.splice(0)) wake();
    }, port);
    cleanups.push(() => gw.close());
    return gw;
  }

  get port(): number {
    return this.#server!.port;
  }

  get url(): string {
    return this.#server!.url;
  }

  /** Resolves with the first request, past or future, that `match` accepts. */
  async waitFor(match: (seen: Seen, index: number) => boolean): Promise<Seen> {
    for (;;) {
      const found = this.seen.find(match);
      if (found) return found;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  close(): Promise<void> {
    return this.#server!.close();
  }
}

/** Timers that record every delay asked for and fire after `scale(ms)` instead. */
function recordingTimers(scale: (ms: number) => number = (ms) => ms): { delays: number[]; timers: RegistrationTimers } {
  const delays: number[] = [];
  return {
    delays,
    timers: {
      setTimeout: (callback, ms) => {
        delays.push(ms);
        return setTimeout(callback, scale(ms));
      },
      clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
    },
  };
}

function startEngine(itlMs = 50): Promise<string> {
  return startSimEngine(cleanups, { ttftMs: 0, itlMs, outputTokens: 20 });
}

async function startRunner(
  options: Partial<RunnerOptions>,
  environment: RunnerEnvironment = {},
  host = '127.0.0.1',
): Promise<{ runner: RunnerServer; url: string }> {
  const runner = createRunner(
    {
      engine: await startEngine(),
      engineKind: 'sim',
      id: 'r-1',
      slots: 2,
      runnerToken: TOKEN,
      heartbeatInterval: 50,
      loadInterval: 50,
      ...options,
    },
    environment,
  );
  const { url } = await runner.listen(0, host);
  cleanups.push(() => runner.close({ drainTimeout: 0 }));
  return { runner, url };
}

function call(url: string) {
  const body = JSON.stringify({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] });
  return request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json' },
  });
}

const beats = (gw: FakeGateway): RunnerHeartbeat[] =>
  gw.seen.filter((s) => s.kind === 'heartbeat' && s.status === 200).map((s) => s.body);

describe('GatewayRegistration', () => {
  const status = (): RunnerStatus => ({
    id: 'r-x',
    version: 't',
    state: 'serving',
    ready: true,
    engines: [],
    models: [],
    gpus: { gpus: [], source: 'none', reason: 'test' },
    slots: { total: 1, inUse: 0 },
    capacity: { labels: {}, freeGpus: [], engineKinds: ['sim'] },
    calls: { served: 0, rejected: 0, failed: 0 },
  });

  it('returns to the base delay after a success and grows again, capped, under an injected random', async () => {
    const gw = await FakeGateway.start();
    gw.heartbeatInterval = 70;
    let registers = 0;
    gw.force = (kind) => (kind === 'register' ? (++registers <= 8 ? 500 : undefined) : 503);
    const { delays, timers } = recordingTimers(() => 0);
    const reg = new GatewayRegistration({
      gateway: new URL(gw.url),
      token: TOKEN,
      url: 'http://r',
      status,
      random: () => 0.5,
      timers,
    });
    cleanups.push(() => reg.deregister());
    reg.start();
    await expect.poll(() => delays.length, { timeout: 10_000, interval: 5 }).toBeGreaterThanOrEqual(12);
    await reg.stop();
    // start, eight refused registrations, the registration's interval, then failing heartbeats.
    expect(delays.slice(0, 12)).toEqual([0, 250, 500, 1000, 2000, 4000, 8000, 15_000, 15_000, 70, 250, 500]);
  });

  it('calls onDrainRequested once however many answers ask for a drain', async () => {
    const gw = await FakeGateway.start();
    gw.drain = true;
    let drains = 0;
    const { timers } = recordingTimers(() => 1);
    const reg = new GatewayRegistration({
      gateway: new URL(gw.url),
      token: TOKEN,
      url: 'http://r',
      status,
      timers,
      onDrainRequested: () => drains++,
    });
    cleanups.push(() => reg.deregister());
    reg.start();
    await gw.waitFor((s, i) => s.kind === 'heartbeat' && i >= 5);
    await reg.deregister();
    expect(drains).toBe(1);
    expect(gw.seen.at(-1)).toMatchObject({ kind: 'delete', id: 'r-x', status: 204 });
  });

  /** What every registration of these specs names: the gateway at `url`, this runner, its status. */
  const toGateway = (url: string) => ({ gateway: new URL(url), token: TOKEN, url: 'http://r', status });

  it.each([
    ['a gateway no longer listening', 'refused', [], ['gateway not running; nothing to leave']],
    ['a 500', 500, ['deregistration failed'], []],
  ] as const)('says at close, to %s, only what is news', async (_, fault, warned, noted) => {
    const gw = await FakeGateway.start();
    const warnings: string[] = [];
    const infos: string[] = [];
    const logger = createJsonLogger({
      level: 'info',
      write: (line) => {
        const { level, msg } = JSON.parse(line) as { level: string; msg: string };
        if (level === 'warn') warnings.push(msg);
        else if (msg.startsWith('gateway')) infos.push(msg);
      },
    });
    const reg = new GatewayRegistration({ ...toGateway(gw.url), timers: recordingTimers(() => 1).timers, logger });
    reg.start();
    await gw.waitFor((s) => s.kind === 'heartbeat');
    await reg.stop();
    if (fault === 'refused') await gw.close();
    else gw.force = () => fault;
    await reg.deregister();
    expect(warnings).toEqual(warned);
    expect(infos).toEqual(noted);
  });

  it.each([
    ['a refused connection', 'refused'],
    ['a 500', 500],
    ['a 503', 503],
    ['an answer slower than the request timeout', 'hang'],
  ] as const)('retries after %s with the first backoff step', async (_, fault) => {
    const gw = await FakeGateway.start();
    const url = gw.url;
    if (fault === 'refused') await gw.close();
    else gw.force = () => fault;
    const { delays, timers } = recordingTimers((ms) => (ms === 0 ? 0 : 60_000));
    const reg = new GatewayRegistration({
      gateway: new URL(url),
      token: TOKEN,
      url: 'http://r',
      status,
      random: () => 0.5,
      timers,
      requestTimeout: 100,
    });
    cleanups.push(() => reg.deregister());
    reg.start();
    await expect.poll(() => delays.length, { timeout: 5000, interval: 5 }).toBe(2);
    expect(delays).toEqual([0, 250]);
  });

  it.each([
    ['an object without methods', {}, 'got {}'],
    ['a logger without warn', { debug() {}, info() {}, error() {} }, 'got {}'],
    ['a string', 'console', 'got "console"'],
  ])('throws RunnerConfigError naming logger for %s', (_, logger, shown) => {
    const options = {
      gateway: new URL('http://127.0.0.1:1'),
      token: TOKEN,
      url: 'http://r',
      status,
      logger: logger as never,
    };
    expect(() => new GatewayRegistration(options)).toThrow(
      new RunnerConfigError(`logger must have debug, info, warn and error methods, ${shown}`),
    );
  });
});

describe('runner registration', () => {
  it('registers, then heartbeats at the interval the gateway asks for, with the bearer token and the load', async () => {
    const gw = await FakeGateway.start();
    gw.heartbeatInterval = 50;
    const { delays, timers } = recordingTimers();
    const { runner, url } = await startRunner({ gateways: [gw.url], heartbeatInterval: 5000 }, { timers });
    const reg = (await gw.waitFor((s) => s.kind === 'register')).body as RunnerRegistration;
    expect(reg).toMatchObject({ id: 'r-1', url, slots: 2, models: ['sim-small'], gpus: { source: 'none' } });
    expect(reg.engines).toEqual([expect.objectContaining({ kind: 'sim', models: ['sim-small'] })]);
    expect(reg.load).toMatchObject({ slotsInUse: 0, slots: 2 });
    // No GPU here (inventory none), so nothing is free; sim is always launchable.
    expect(reg.capacity).toEqual({ labels: {}, freeGpus: [], engineKinds: expect.arrayContaining(['sim']) });

    const inFlight = call(url);
    const busy = (
      await gw.waitFor(
        (s) => s.kind === 'heartbeat' && s.body.load.slotsInUse === 1 && s.body.load.models['sim-small']?.running === 1,
      )
    ).body as RunnerHeartbeat;
    await (await inFlight).body.dump();
    expect(busy).toMatchObject({
      ready: true,
      state: 'serving',
      models: ['sim-small'],
      load: { slots: 2, queue: 0, models: { 'sim-small': { running: 1, waiting: 0 } } },
    });
    expect(busy.load.kvCacheUsage).toBeGreaterThanOrEqual(0);
    expect(busy.capacity).toEqual(reg.capacity);
    expect(new Set(gw.seen.map((s) => s.auth))).toEqual(new Set([`Bearer ${TOKEN}`]));
    // After the first (start) timer, every wait is the interval the gateway answered.
    expect(new Set(delays.slice(1))).toEqual(new Set([50]));
    expect(runner.status().state).toBe('serving');
  });

  it('heartbeats at its own interval when the gateway names none', async () => {
    const gw = await FakeGateway.start();
    const { delays, timers } = recordingTimers();
    await startRunner({ gateways: [gw.url], heartbeatInterval: 40 }, { timers });
    await gw.waitFor((_, i) => i >= 3);
    expect(new Set(delays.slice(1))).toEqual(new Set([40]));
  });

  it('registers again at once after a 404 when its gateway restarted on the same port', async () => {
    const first = await FakeGateway.start();
    const { delays, timers } = recordingTimers();
    await startRunner({ gateways: [first.url] }, { timers, random: () => 0.1 });
    await first.waitFor((s) => s.kind === 'heartbeat');
    const port = first.port;
    await first.close();
    const second = await FakeGateway.start(port);
    await second.waitFor((s) => s.kind === 'heartbeat' && s.status === 200);
    // The new gateway first hears a heartbeat from a runner it does not know, then the registration.
    expect(second.seen.slice(0, 3).map((s) => `${s.kind} ${s.status}`)).toEqual([
      'heartbeat 404',
      'register 200',
      'heartbeat 200',
    ]);
    expect(delays.filter((d) => d === 0).length).toBeGreaterThanOrEqual(2);
  });

  it('logs a refused token without the token, retries at the cap, and registers once the gateway accepts it', async () => {
    const gw = await FakeGateway.start();
    gw.token = 'the-gateway-has-another';
    const lines: string[] = [];
    const logger = createJsonLogger({ level: 'debug', write: (line) => lines.push(line) });
    const { delays, timers } = recordingTimers((ms) => Math.min(ms, 5));
    await startRunner({ gateways: [gw.url], logger }, { timers, random: () => 0.5 });
    await gw.waitFor((s, i) => s.status === 401 && i >= 1);
    gw.token = TOKEN;
    await gw.waitFor((s) => s.kind === 'register' && s.status === 200);
    const refused = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'gateway refused the runner token');
    expect(refused.length).toBeGreaterThanOrEqual(2);
    expect(refused[0]).toMatchObject({ level: 'error', status: 401, gateway: gw.url, retryInMs: BACKOFF_CAP_MS / 2 });
    expect(delays).toContain(BACKOFF_CAP_MS / 2);
    expect(lines.join('\n')).not.toContain(TOKEN);
  });

  it('logs a 403 as its id refused under its token, not as a wrong token, and retries at the cap', async () => {
    const gw = await FakeGateway.start();
    let forbid = true;
    gw.force = (kind) => (forbid && kind === 'heartbeat' ? 403 : undefined);
    const lines: string[] = [];
    const logger = createJsonLogger({ level: 'debug', write: (line) => lines.push(line) });
    const { delays, timers } = recordingTimers((ms) => Math.min(ms, 5));
    await startRunner({ gateways: [gw.url], logger }, { timers, random: () => 0.5 });
    await gw.waitFor((s) => s.kind === 'heartbeat' && s.status === 403);
    forbid = false;
    await gw.waitFor((s) => s.kind === 'heartbeat' && s.status === 200);
    const refused = lines
      .map((l) => JSON.parse(l))
      .filter((l) => l.msg === 'gateway refused this runner id under its token');
    expect(refused[0]).toMatchObject({ level: 'error', status: 403, retryInMs: BACKOFF_CAP_MS / 2 });
    expect(lines.some((l) => l.includes('gateway refused the runner token'))).toBe(false);
    expect(delays).toContain(BACKOFF_CAP_MS / 2);
  });

  it('drains when the gateway asks: busy to new calls, the running call finishes, then DELETE and closed', async () => {
    const gw = await FakeGateway.start();
    const { runner, url } = await startRunner({ gateways: [gw.url] });
    await gw.waitFor((s) => s.kind === 'heartbeat');
    const inFlight = call(url);
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    gw.drain = true;
    await expect.poll(() => runner.status().state, { timeout: 5000, interval: 5 }).toBe('draining');
    const refused = await call(url);
    await refused.body.dump();
    expect(refused.statusCode).toBe(503);
    expect(refused.headers[BUSY_HEADER]).toBe('draining');
    const finished = await inFlight;
    expect(finished.statusCode).toBe(200);
    expect(((await finished.body.json()) as any).choices[0].message.content).not.toBe('');
    await runner.closed;
    const kinds = gw.seen.map((s) => s.kind);
    expect(kinds.filter((k) => k === 'delete')).toHaveLength(1);
    expect(kinds.at(-1)).toBe('delete');
    expect(gw.seen.at(-1)).toMatchObject({ id: 'r-1', status: 204 });
    expect(beats(gw).some((b) => b.state === 'draining' && !b.ready)).toBe(true);
  });

  it('heartbeats draining while calls finish on close(), then deregisters from every gateway', async () => {
    const gateways = [await FakeGateway.start(), await FakeGateway.start()];
    const { runner, url } = await startRunner({ gateways: gateways.map((g) => g.url) });
    await Promise.all(gateways.map((g) => g.waitFor((s) => s.kind === 'heartbeat')));
    const inFlight = call(url);
    await expect.poll(() => runner.status().slots.inUse, { timeout: 5000, interval: 5 }).toBe(1);
    const closing = runner.close();
    await Promise.all(gateways.map((g) => g.waitFor((s) => s.kind === 'heartbeat' && s.body.state === 'draining')));
    expect(gateways.every((g) => g.seen.every((s) => s.kind !== 'delete'))).toBe(true);
    expect((await inFlight).statusCode).toBe(200);
    await closing;
    await runner.closed;
    for (const g of gateways) {
      expect(g.seen.at(-1)).toMatchObject({ kind: 'delete', status: 204 });
      expect(g.known.size).toBe(0);
    }
  });

  it('refuses gateway settings with messages naming the option', async () => {
    const engine = 'http://127.0.0.1:1';
    const bad: Array<[Partial<RunnerOptions>, string]> = [
      [{ gateways: ['http://gw:8080'], runnerToken: undefined }, 'runnerToken is required with gateways'],
      [{ gateways: ['nope'] }, 'gateways[0] must be an http:// or https:// URL, got "nope"'],
      [{ gateways: ['http://gw:8080', 'http://gw:8080/'] }, 'gateways lists http://gw:8080 twice'],
      [
        { runnerToken: 'has a space but is long' },
        'runnerToken must be a string of at least 16 printable ASCII characters without spaces',
      ],
      // The gateway's rule too: a short token is refused at start, not by every gateway later.
      [
        { runnerToken: 'short-token' },
        'runnerToken must be a string of at least 16 printable ASCII characters without spaces',
      ],
      [{ advertiseUrl: 'ftp://x' }, 'advertiseUrl must be an http:// or https:// URL, got "ftp://x"'],
      [{ advertiseUrl: 'http://0.0.0.0:9000' }, 'advertiseUrl must name an address gateways can reach, not 0.0.0.0'],
      [{ heartbeatInterval: 0 }, 'heartbeatInterval must be a positive integer, got 0'],
    ];
    for (const [options, message] of bad) {
      const make = () => createRunner({ engine, runnerToken: TOKEN, ...options });
      expect(make).toThrow(RunnerConfigError);
      expect(make).toThrow(message);
    }
    expect(() => createRunner({ engine, runnerToken: 'has a space but is long' })).not.toThrow(/has a space/);
    expect(() => createRunner({ engine, runnerToken: 'short-token' })).not.toThrow(/short-token/);
    for (const host of ['0.0.0.0', '::']) {
      const runner = createRunner({ engine, gateways: ['http://gw:8080'], runnerToken: TOKEN });
      await expect(runner.listen(0, host)).rejects.toThrow(
        `advertiseUrl is required with gateways when listening on ${host}`,
      );
      await runner.close({ drainTimeout: 0 });
    }
    // Gateways refuse host names in a registered URL: refused here, before the engine starts.
    for (const [options, host, name] of [
      [{ advertiseUrl: 'http://gpu-node-1:9000' }, '0.0.0.0', 'gpu-node-1'],
      [{}, 'localhost', 'localhost'],
    ] as const) {
      const runner = createRunner({ engine, gateways: ['http://gw:8080'], runnerToken: TOKEN, ...options });
      await expect(runner.listen(0, host)).rejects.toThrow(
        `the URL advertised to gateways must name an IP address, not "${name}"`,
      );
      await runner.close({ drainTimeout: 0 });
    }
  });

  it('registers the advertised URL when listening on 0.0.0.0', async () => {
    const gw = await FakeGateway.start();
    await startRunner(
      { gateways: [gw.url], advertiseUrl: 'http://10.1.2.3:9000/', allowUnsignedCalls: true },
      {},
      '0.0.0.0',
    );
    expect((await gw.waitFor((s) => s.kind === 'register')).body.url).toBe('http://10.1.2.3:9000');
  });
});

describe('sluice runner --gateway', () => {
  it('exits 0 after a drain the gateway asked for, and never prints the token', async () => {
    const gw = await FakeGateway.start();
    const engine = await startEngine();
    const values = { engine, 'engine-kind': 'sim', id: 'r-cli', gateway: gw.url, 'heartbeat-interval': '50ms' };
    const child = await startService(commandLine('runner', { ...values, 'log-level': 'debug' }), {
      env: { ...process.env, SLUICE_RUNNER_TOKEN: TOKEN },
    });
    cleanups.push(() => child.stop('SIGKILL'));
    await gw.waitFor((s) => s.kind === 'heartbeat' && s.id === 'r-cli');
    const exited = new Promise<number | null>((resolve) => child.child.once('exit', (code) => resolve(code)));
    gw.drain = true;
    expect(await exited).toBe(0);
    expect(gw.seen.at(-1)).toMatchObject({ kind: 'delete', id: 'r-cli', status: 204 });
    expect(runnerPath('r-cli')).toBe('/v1/runners/r-cli');
    expect(child.output()).toContain('gateway asked this runner to drain');
    expect(child.output()).not.toContain(TOKEN);
  });
});
