/**
 * Two small boards that let gateways which do not reconcile take part in it:
 * - the demand board: every gateway notes how many of its calls wait for a replica of a model,
 *   and the leader's reconciler reads the sum, so a cold start is ordered for calls waiting at
 *   any gateway, not only at the leader;
 * - the status board: the leader publishes each deployment's status every pass, and any gateway
 *   answers GET /v1/deployments with it.
 * Each has a memory version (one gateway: its own notes, a map) and a Redis version. A note or
 * a status lives for a TTL, so one left by a gateway that died, or a leader that lost its lease,
 * fades instead of steering the fleet forever.
 *
 * Redis layout, under keyPrefix: the demand hash `deploy:demand`, field `<gatewayId>|<model>`
 * (a gateway id never holds `|`), value `<count>:<expiry>`, expiry in ms of the writing
 * gateway's clock; a status per model in the key `deploy:status:<model>`, JSON, expiring on
 * Redis's clock. Gateways whose clocks differ by d ms see each other's notes live d ms longer
 * or shorter, which is nothing beside a 5 s TTL.
 */
import type { Redis } from 'ioredis';
import { checksFor, show, silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { WIRE_ID_PATTERN, WIRE_ID_RULE } from '../../runner/protocol/index.ts';
import { GatewayConfigError } from '../errors.ts';
import { StoreUnavailableError, defineScripts, redisScript } from '../store/index.ts';
import { OutageLog, closeRedis, openRedis } from './redis-client.ts';
import type { RedisConnection, RedisConnectionOptions } from './redis-client.ts';

/** The defaults of the boards. */
export const boardDefaults = Object.freeze({
  /** How long a demand note counts without being noted again, ms: a few of the sampler's beats. */
  demandTtl: 5_000,
  /** The reconciler's pass period, ms, of which a status lives three (two missed passes and it is kept). */
  periodMs: 30_000,
});

/** Calls waiting for a replica, per model, summed over the gateways. */
export interface DemandBoard {
  /**
   * Notes that `waiting` of this gateway's calls wait for a replica of `model` (0 clears).
   * Note every sample, unchanged values too: a note not renewed for the TTL stops counting.
   * Never rejects for a store failure (logged once per outage); rejects with GW_INVALID_OPTION
   * for a `waiting` that is not a whole number from 0, a caller's bug.
   */
  note(model: string, waiting: number): Promise<void>;
  /** Calls waiting for `model` at every gateway whose note is live, this one's included; sync, from the last refresh(). */
  total(model: string): number;
  /** Reads the other gateways' notes for total(); call before each sample. Never rejects: on failure the last read stays, each note until its own expiry. */
  refresh(): Promise<void>;
}

/** The demand board of one gateway: its own notes. */
export class MemoryDemandBoard implements DemandBoard {
  readonly #notes = new Map<string, number>();

  async note(model: string, waiting: number): Promise<void> {
    checkWaiting(waiting);
    if (waiting === 0) this.#notes.delete(model);
    else this.#notes.set(model, waiting);
  }

  total(model: string): number {
    return this.#notes.get(model) ?? 0;
  }

  async refresh(): Promise<void> {}
}

/** Options of {@link RedisDemandBoard}. */
export interface RedisDemandBoardOptions extends RedisConnectionOptions {
  /** This gateway's id (`gatewayId`): whose notes these are. */
  gatewayId: string;
  /** How long a note counts without being noted again, ms. @default 5000 */
  ttl?: number;
  /** The clock of the notes' expiry. @default Date.now */
  now?: () => number;
  /** Where a store failure is warned about, once per outage. @default silentLogger */
  logger?: Logger;
}

/**
 * KEYS: demand hash. ARGV: field, count, expiry, now, ttl. Drops the notes whose expiry has
 * passed, then sets this one (or deletes it for 0), and keeps the hash as long as its newest note.
 */
const NOTE = redisScript(
  'sluiceDemandNote',
  1,
  `
local all = redis.call('HGETALL', KEYS[1])
local now = tonumber(ARGV[4])
for i = 1, #all, 2 do
  local expiry = tonumber(string.match(all[i + 1], ':(%d+)$'))
  if expiry == nil or expiry <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
`,
);

interface DemandScripts {
  sluiceDemandNote(
    hash: string,
    field: string,
    count: number,
    expiry: number,
    now: number,
    ttl: number,
  ): Promise<number>;
}

/** One note read from another gateway. */
interface Note {
  readonly count: number;
  readonly expiry: number;
}

/** The demand board of the gateways on one Redis. */
export class RedisDemandBoard implements DemandBoard {
  readonly #redis: RedisConnection;
  readonly #client: Redis & DemandScripts;
  readonly #hash: string;
  readonly #gatewayId: string;
  readonly #ttl: number;
  readonly #now: () => number;
  readonly #outage: OutageLog;
  /** This gateway's notes, as last noted: counted as they are, fresher than any read. */
  readonly #own = new Map<string, number>();
  /** When each of this gateway's notes last reached Redis, so an unchanged one is written again only as it nears expiry. */
  readonly #written = new Map<string, { count: number; at: number }>();
  /** The other gateways' notes, by model, from the last refresh(). */
  #others = new Map<string, Note[]>();
  #closing: Promise<void> | undefined;

  /** @throws GatewayConfigError for a bad option or url/client pair; StoreConfigError for a bad URL. */
  constructor(options: RedisDemandBoardOptions) {
    const check = checksFor(GatewayConfigError);
    const { gatewayId, ttl = boardDefaults.demandTtl } = options;
    if (typeof gatewayId !== 'string' || !WIRE_ID_PATTERN.test(gatewayId))
      throw check.fail(`gatewayId must be ${WIRE_ID_RULE}, got ${show(gatewayId)}`);
    this.#gatewayId = gatewayId;
    this.#ttl = check.ms('ttl', ttl, 1);
    this.#now = check.fn('now', options.now ?? Date.now);
    const logger = check.logger('logger', options.logger ?? silentLogger);
    this.#redis = openRedis(options, 'redis demand board');
    this.#hash = `${this.#redis.prefix}deploy:demand`;
    this.#outage = new OutageLog(logger, 'demand board unreachable', 'demand board reachable again', {
      store: this.#redis.display,
    });
    this.#client = defineScripts<DemandScripts>(this.#redis.client, [NOTE]);
  }

  async note(model: string, waiting: number): Promise<void> {
    checkWaiting(waiting);
    if (waiting === 0) this.#own.delete(model);
    else this.#own.set(model, waiting);
    const now = Math.floor(this.#now());
    const last = this.#written.get(model);
    // Unchanged and not near expiry: nothing to tell. A 0 never written needs no clearing.
    if (last ? last.count === waiting && (waiting === 0 || now - last.at < this.#ttl / 2) : waiting === 0) return;
    this.#written.delete(model);
    try {
      await this.#client.sluiceDemandNote(
        this.#hash,
        `${this.#gatewayId}|${model}`,
        waiting,
        now + this.#ttl,
        now,
        this.#ttl,
      );
      this.#outage.succeeded();
      if (waiting === 0) this.#written.delete(model);
      else this.#written.set(model, { count: waiting, at: now });
    } catch (error) {
      this.#outage.failed(error);
    }
  }

  total(model: string): number {
    const now = this.#now();
    let sum = this.#own.get(model) ?? 0;
    for (const note of this.#others.get(model) ?? []) if (note.expiry > now) sum += note.count;
    return sum;
  }

  async refresh(): Promise<void> {
    let all: Record<string, string>;
    try {
      all = await this.#client.hgetall(this.#hash);
      this.#outage.succeeded();
    } catch (error) {
      this.#outage.failed(error);
      return;
    }
    const others = new Map<string, Note[]>();
    for (const [field, value] of Object.entries(all)) {
      const bar = field.indexOf('|');
      if (bar < 0 || field.slice(0, bar) === this.#gatewayId) continue;
      const match = /^(\d+):(\d+)$/.exec(value);
      if (!match) continue;
      const model = field.slice(bar + 1);
      const notes = others.get(model) ?? [];
      notes.push({ count: Number(match[1]), expiry: Number(match[2]) });
      others.set(model, notes);
    }
    this.#others = others;
  }

  /** Closes the connection when this board made it; idempotent. Its notes expire after the TTL. */
  close(): Promise<void> {
    this.#closing ??= closeRedis(this.#redis);
    return this.#closing;
  }
}

/** Each deployment's status as the leader last published it. `S` is the status's type: plain JSON. */
export interface StatusBoard<S = unknown> {
  /** Publishes `model`'s status (the leader, every pass). Never rejects: a failure is logged once per outage, and the last one fades by its TTL. */
  publish(model: string, status: S): Promise<void>;
  /** The status last published for `model`, undefined when none is, or it is older than the TTL. Rejects with STORE_UNAVAILABLE when the store does not answer. */
  read(model: string): Promise<S | undefined>;
  /** Forgets `model`'s status (its deployment was deleted). Never rejects, as publish. */
  remove(model: string): Promise<void>;
}

/** Options of the status boards. */
export interface StatusBoardOptions {
  /** The reconciler's pass period, ms: the TTL defaults to three of them. @default 30000 */
  periodMs?: number;
  /** How long a status stays readable without being published again, ms. @default 3 x periodMs */
  ttl?: number;
}

/** Options of {@link MemoryStatusBoard}. */
export interface MemoryStatusBoardOptions extends StatusBoardOptions {
  /** The clock of the TTL. @default Date.now */
  now?: () => number;
}

/** The status board of one gateway: a map. */
export class MemoryStatusBoard<S = unknown> implements StatusBoard<S> {
  /** How long a status stays readable, ms. */
  readonly ttl: number;
  readonly #now: () => number;
  readonly #statuses = new Map<string, { status: S; at: number }>();

  /** @throws GatewayConfigError for a bad periodMs, ttl or now. */
  constructor(options: MemoryStatusBoardOptions = {}) {
    this.ttl = statusTtl(options);
    this.#now = checksFor(GatewayConfigError).fn('now', options.now ?? Date.now);
  }

  async publish(model: string, status: S): Promise<void> {
    this.#statuses.set(model, { status, at: this.#now() });
  }

  async read(model: string): Promise<S | undefined> {
    const kept = this.#statuses.get(model);
    if (!kept) return undefined;
    if (this.#now() - kept.at < this.ttl) return kept.status;
    this.#statuses.delete(model);
    return undefined;
  }

  async remove(model: string): Promise<void> {
    this.#statuses.delete(model);
  }
}

/** Options of {@link RedisStatusBoard}. */
export interface RedisStatusBoardOptions extends StatusBoardOptions, RedisConnectionOptions {
  /** Where a store failure is warned about, once per outage. @default silentLogger */
  logger?: Logger;
}

/** The status board of the gateways on one Redis: a key per model, expiring after the TTL on Redis's clock. */
export class RedisStatusBoard<S = unknown> implements StatusBoard<S> {
  /** How long a status stays readable, ms. */
  readonly ttl: number;
  readonly #redis: RedisConnection;
  readonly #client: Redis;
  readonly #logger: Logger;
  readonly #outage: OutageLog;
  #closing: Promise<void> | undefined;

  /** @throws GatewayConfigError for a bad option or url/client pair; StoreConfigError for a bad URL. */
  constructor(options: RedisStatusBoardOptions) {
    this.ttl = statusTtl(options);
    this.#logger = checksFor(GatewayConfigError).logger('logger', options.logger ?? silentLogger);
    this.#redis = openRedis(options, 'redis status board');
    this.#client = this.#redis.client;
    this.#outage = new OutageLog(
      this.#logger,
      'status board unreachable, deployment status not published',
      'status board reachable again',
      {
        store: this.#redis.display,
      },
    );
  }

  async publish(model: string, status: S): Promise<void> {
    await this.#write(() => this.#client.set(this.#key(model), JSON.stringify(status), 'PX', this.ttl));
  }

  async read(model: string): Promise<S | undefined> {
    let json: string | null;
    try {
      json = await this.#client.get(this.#key(model));
    } catch (error) {
      throw new StoreUnavailableError(
        `redis status board ${this.#redis.display} could not read the status of ${model}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    if (json === null) return undefined;
    try {
      return JSON.parse(json) as S;
    } catch {
      this.#logger.warn('published deployment status unreadable', { model });
      return undefined;
    }
  }

  async remove(model: string): Promise<void> {
    await this.#write(() => this.#client.del(this.#key(model)));
  }

  /** Closes the connection when this board made it; idempotent. */
  close(): Promise<void> {
    this.#closing ??= closeRedis(this.#redis);
    return this.#closing;
  }

  async #write(command: () => Promise<unknown>): Promise<void> {
    try {
      await command();
      this.#outage.succeeded();
    } catch (error) {
      this.#outage.failed(error);
    }
  }

  #key(model: string): string {
    return `${this.#redis.prefix}deploy:status:${model}`;
  }
}

/** The status TTL of `options`: `ttl`, else three pass periods. */
function statusTtl(options: StatusBoardOptions): number {
  const check = checksFor(GatewayConfigError);
  const periodMs = check.ms('periodMs', options.periodMs ?? boardDefaults.periodMs, 1);
  return check.ms('ttl', options.ttl ?? 3 * periodMs, 1);
}

function checkWaiting(waiting: number): void {
  if (!Number.isSafeInteger(waiting) || waiting < 0)
    throw new GatewayConfigError(`demand board: waiting must be a whole number from 0, got ${show(waiting)}`);
}
