/**
 * The pool's HTTP face: registration and heartbeats for runners that dial out, the runner list
 * for operators, and drain. Refusals are thrown and answered by the app's onError
 * (gateway/server.ts). Who may call which is the route table's (gateway/access/scopes.ts): the
 * access guard has admitted the caller before a handler here runs.
 */
import type { Context, Hono } from 'hono';
import type { Clock } from '../../placer/kernel/index.ts';
import { REGISTER_PATH } from '../../runner/protocol/index.ts';
import type { Capacity, HostedEngine } from '../../runner/protocol/index.ts';
import type { AuditLog, GatewayEnv } from '../access/index.ts';
import { BodyTooLargeError, InvalidDrainError, InvalidJsonError, RunnerNotFoundError } from '../errors.ts';
import type { FleetPool } from './pool.ts';
import type { RunnerEntry } from './runner-entry.ts';
import type { RunnerRegistry } from './registry.ts';

/**
 * Largest registration or heartbeat body read, in bytes. A registration at every limit of
 * REGISTRATION_LIMITS (256 names of 256 characters in the runner's models, in each of 16 engines'
 * and in its load) is about 1.2 MB; a real one, a few KiB.
 */
export const MAX_RUNNER_BODY_BYTES = 2 * 1024 * 1024;

/**
 * Largest cache feed update read, in bytes: about 390,000 packed block keys, a reset of a runner
 * whose engine holds 6 million tokens in blocks of 16. A keep-alive is under 100 bytes.
 */
export const MAX_CACHE_UPDATE_BYTES = 4 * 1024 * 1024;

/** The position of the runner token a request presented, as the access guard admitted it. */
function tokenOf(c: Context<GatewayEnv>): number {
  const caller = c.get('caller');
  // The route table makes these routes the runner scope's: nothing else reaches a handler here.
  if (caller?.kind !== 'runner')
    throw new Error(`a runner route was reached by a ${caller?.kind ?? 'unchecked'} caller`);
  return caller.token;
}

/**
 * What GET /v1/runners shows of one runner; `capacity` is what a registered runner last said it
 * could host, `hosted` the ordered engine it said it hosts (its state: starting, ready, ...).
 */
function runnerView(
  runner: RunnerEntry,
  now: number,
  capacity: Capacity | undefined,
  hosted?: HostedEngine,
): Record<string, unknown> {
  const reg = runner.registration;
  const state = reg
    ? reg.drainRequested
      ? 'drain-requested'
      : reg.draining
        ? 'draining'
        : reg.state
    : runner.health.reachable
      ? 'live'
      : 'unreachable';
  return {
    id: runner.id,
    url: runner.url.origin,
    source: reg ? 'registered' : 'static',
    state,
    ready: reg ? reg.ready : runner.health.models !== undefined,
    placeable: runner.placeable(),
    models: runner.health.models ?? [],
    inFlight: runner.inFlight,
    // The calls it can run at once, as it last reported (heartbeat or status probe); absent until then.
    slots: runner.load().slots,
    // What this gateway saw when it last called or probed the runner: `hung` when it took a
    // connection and said nothing (passed over until a probe gets an answer), `down` when it
    // refused one (passed over for a second).
    health: runner.health.hung ? 'hung' : runner.health.reachable ? 'ok' : 'down',
    breaker: runner.breaker.state,
    ...(reg
      ? {
          version: reg.version,
          lastHeartbeatAgeMs: Math.round(now - reg.lastSeen),
          load: reg.report?.load,
          loadAgeMs: reg.report ? Math.round(now - reg.report.at) : undefined,
          ...(capacity
            ? { labels: capacity.labels, freeGpus: capacity.freeGpus, engineKinds: capacity.engineKinds }
            : {}),
          ...(hosted ? { engine: { replica: hosted.replica, model: hosted.model, state: hosted.state } } : {}),
          ...(runner.health.reachable ? {} : { lastError: runner.health.lastError }),
        }
      : { lastError: runner.health.lastError }),
  };
}

/**
 * What GET /v1/runners shows of a runner's cache: what it announced, and its feed (`known` while
 * placement uses it); nothing for a runner that announced none.
 */
function feedView(pool: FleetPool, runner: RunnerEntry, now: number): Record<string, unknown> {
  const announced = runner.cacheAnnouncement;
  if (!announced) return {};
  const feed = pool.cacheTruth?.index.state(runner.id);
  return {
    cache: {
      tokenizer: announced.tokenizer,
      blockSize: announced.scheme.blockSize,
      events: announced.events,
      known: feed?.known ?? false,
      ...(feed
        ? {
            engineFeed: feed.engineFeed,
            lastUpdateAgeMs: Math.round(now - feed.heardAt),
            blocks: feed.blocks,
            pending: feed.pending,
          }
        : {}),
    },
  };
}

/** Adds the registration, heartbeat, cache feed, list and drain routes. */
export function registerRunnerRoutes(
  app: Hono<GatewayEnv>,
  pool: FleetPool,
  registry: RunnerRegistry,
  clock: Clock,
  audit?: AuditLog,
): void {
  const body = async (c: Context<GatewayEnv>): Promise<unknown> =>
    parseJson(await boundedText(c.req.raw, MAX_RUNNER_BODY_BYTES));

  app.post(REGISTER_PATH, async (c) => c.json(registry.register(await body(c), tokenOf(c))));
  app.post('/v1/runners/:id/heartbeat', async (c) => {
    const id = c.req.param('id');
    const answer = registry.heartbeat(id, await body(c), tokenOf(c));
    if (!answer) throw unknownRunner(id);
    return c.json(answer);
  });
  // The runner's cache feed (runner/protocol/cache-feed.ts): 204 once taken, 409 when the runner
  // must send a reset.
  app.post('/v1/runners/:id/cache', async (c) => {
    const id = c.req.param('id');
    const truth = pool.cacheTruth;
    if (!registry.registered(id, tokenOf(c)) || !truth) throw unknownRunner(id);
    const text = await boundedText(c.req.raw, MAX_CACHE_UPDATE_BYTES);
    const { load } = truth.update(id, parseJson(text), Buffer.byteLength(text));
    // The runner's load rides its feed: a fresh report, as a heartbeat's.
    if (load) pool.get(id)?.reported(load);
    return c.body(null, 204);
  });
  app.delete('/v1/runners/:id', (c) => {
    if (!registry.deregister(c.req.param('id'), tokenOf(c))) throw unknownRunner(c.req.param('id'));
    return c.body(null, 204);
  });
  app.post('/v1/runners/drain', (c) => {
    const raw = c.req.query('interval');
    const interval = raw === undefined ? 1000 : Number(raw);
    if (!Number.isSafeInteger(interval) || interval < 0 || interval > 600_000) {
      throw new InvalidDrainError(`interval must be 0 to 600000 ms, got ${JSON.stringify(raw)}`);
    }
    const runners = registry.drainAll(interval);
    audit?.record(c.get('caller'), { action: 'runners.drain', target: '*', fields: ['interval'] });
    return c.json({ runners, intervalMs: interval }, 202);
  });
  app.post('/v1/runners/:id/drain', (c) => {
    const id = c.req.param('id');
    if (!registry.requestDrain(id)) throw unknownRunner(id);
    audit?.record(c.get('caller'), { action: 'runner.drain', target: id });
    const runner = pool.get(id)!;
    const now = clock.now();
    return c.json(
      {
        ...runnerView(runner, now, registry.capacity(runner), registry.hosted(runner)),
        ...feedView(pool, runner, now),
      },
      202,
    );
  });
  app.get('/v1/runners', (c) => {
    const now = clock.now();
    return c.json({
      object: 'list',
      data: pool.runnerList.map((r) => ({
        ...runnerView(r, now, registry.capacity(r), registry.hosted(r)),
        ...feedView(pool, r, now),
      })),
    });
  });
}

/**
 * A request body as text, refused with GW_BODY_TOO_LARGE once it passes `limit` bytes, so that a
 * holder of the runner token cannot make the gateway buffer an unbounded body.
 */
async function boundedText(request: Request, limit: number): Promise<string> {
  const tooLarge = () => new BodyTooLargeError(`a runner request body may be at most ${limit} bytes`);
  const declared = Number(request.headers.get('content-length') ?? 0);
  if (declared > limit) throw tooLarge();
  if (!request.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
  }
}

function unknownRunner(id: string): RunnerNotFoundError {
  return new RunnerNotFoundError(`no registered runner ${JSON.stringify(id)}: register first`);
}
