/**
 * The reconciler's lease (the {@link Lease} of fleet.ts): which one of the gateways sharing a
 * store orders engines. A memory lease is always held, since a memory store means one gateway.
 * A Redis lease is one key holding its holder's id with a time to live: taken with
 * `SET key id NX PX ttl`, renewed by a script that moves the expiry only while the value is
 * still ours, released by a script that deletes it only while it is ours. A holder that stops
 * renewing (dead, cut off from Redis, stalled) loses it when the key expires, and the next
 * gateway to ask takes it.
 *
 * Renewals and expiry run on Redis's clock, so the gateways' clocks need not agree. A holder
 * whose hold() said true at time t holds until at least t + ttl minus the round trip of the
 * renewal: the reconciler asks before each pass, and more often than its period (the lead's
 * wiring), so a pass never runs on a lease more than one renewal old.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { checksFor, show, silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { WIRE_ID_PATTERN, WIRE_ID_RULE } from '../../runner/protocol/index.ts';
import { GatewayConfigError } from '../errors.ts';
import { defineScripts, redisScript } from '../store/index.ts';
import type { Lease } from './fleet.ts';
import { OutageLog, closeRedis, openRedis } from './redis-client.ts';
import type { RedisConnection, RedisConnectionOptions } from './redis-client.ts';

/**
 * The defaults of a lease. ttl is three renewals at the 5 s the gateway renews at (more often
 * than the reconciler's 30 s pass): a holder keeps the lease through one missed renewal (a
 * stalled event loop, a Redis failover), is on the edge of losing it after two, and a dead
 * holder is replaced within 15 s, well inside one pass. A shorter ttl trades that slack for a
 * faster takeover; it must stay above the renewal period.
 */
export const leaseDefaults = Object.freeze({ ttl: 15_000 });

/** The lease of a gateway that shares nothing: always held. */
export class MemoryLease implements Lease {
  readonly ttl: number;

  constructor(options: { ttl?: number } = {}) {
    this.ttl = checksFor(GatewayConfigError).ms('ttl', options.ttl ?? leaseDefaults.ttl, 1);
  }

  async hold(): Promise<boolean> {
    return true;
  }

  async release(): Promise<void> {}
}

/** Options of {@link RedisLease}: where Redis is (url or client), and who asks. */
export interface RedisLeaseOptions extends RedisConnectionOptions {
  /** This gateway's id (`gatewayId`); the holder id is it plus a random part, new per lease. */
  gatewayId: string;
  /** How long the lease lasts without a renewal, ms; see {@link leaseDefaults}. @default 15000 */
  ttl?: number;
  /** Where the lease warns that Redis does not answer (once per outage). @default silentLogger */
  logger?: Logger;
}

/** KEYS: lease. ARGV: holder id, ttl ms. Moves the expiry when the lease is the holder's; 1 if it was, else 0. */
const RENEW = redisScript(
  'sluiceLeaseRenew',
  1,
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`,
);

/** KEYS: lease. ARGV: holder id. Deletes the lease when it is the holder's; 1 if it was, else 0. */
const RELEASE = redisScript(
  'sluiceLeaseRelease',
  1,
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`,
);

interface LeaseScripts {
  sluiceLeaseRenew(key: string, holder: string, ttl: number): Promise<number>;
  sluiceLeaseRelease(key: string, holder: string): Promise<number>;
}

/** The lease shared by the gateways on one Redis, under the key `<keyPrefix>deploy:lease`. */
export class RedisLease implements Lease {
  readonly ttl: number;
  /** Who this lease is in Redis: `<gatewayId>:<random hex>`, so two processes with one id never share it. */
  readonly holderId: string;
  readonly #redis: RedisConnection;
  readonly #client: Redis & LeaseScripts;
  readonly #key: string;
  readonly #outage: OutageLog;
  /** The hold in flight: callers that ask meanwhile share its answer instead of racing it. */
  #holding: Promise<boolean> | undefined;
  #closing: Promise<void> | undefined;

  /** @throws GatewayConfigError for a bad gatewayId, ttl, keyPrefix or url/client pair; StoreConfigError for a bad URL. */
  constructor(options: RedisLeaseOptions) {
    const { gatewayId, ttl = leaseDefaults.ttl, logger = silentLogger } = options;
    const check = checksFor(GatewayConfigError);
    if (typeof gatewayId !== 'string' || !WIRE_ID_PATTERN.test(gatewayId))
      throw check.fail(`gatewayId must be ${WIRE_ID_RULE}, got ${show(gatewayId)}`);
    this.ttl = check.ms('ttl', ttl, 1);
    check.logger('logger', logger);
    this.holderId = `${gatewayId}:${randomBytes(6).toString('hex')}`;
    this.#redis = openRedis(options, 'redis lease');
    this.#key = `${this.#redis.prefix}deploy:lease`;
    this.#outage = new OutageLog(
      logger,
      'reconciler lease unreachable, not reconciling',
      'reconciler lease reachable again',
      {
        store: this.#redis.display,
        holder: this.holderId,
      },
    );
    const client = this.#redis.client;
    this.#client = defineScripts<LeaseScripts>(client, [RENEW, RELEASE]);
  }

  /**
   * Renews the lease when it is ours, else tries to take it. Renewing first also catches a take
   * that timed out here but landed in Redis: the key is ours then, and is kept rather than left
   * to expire unused. Never rejects: a Redis failure, or no answer within ttl, reads false
   * (warned once per outage).
   */
  hold(): Promise<boolean> {
    this.#holding ??= this.#hold().finally(() => (this.#holding = undefined));
    return this.#holding;
  }

  async #hold(): Promise<boolean> {
    if (this.#closing) return false;
    let timer: NodeJS.Timeout | undefined;
    // A shared client may have no command timeout; and a yes that comes ttl after the ask may
    // describe a lease that has lapsed since. Either way the answer is no.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within the lease's ttl of ${this.ttl} ms`)), this.ttl);
      timer.unref();
    });
    try {
      const held = await Promise.race([this.#renewOrTake(), late]);
      this.#outage.succeeded();
      return held;
    } catch (error) {
      this.#outage.failed(error);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  async #renewOrTake(): Promise<boolean> {
    if ((await this.#client.sluiceLeaseRenew(this.#key, this.holderId, this.ttl)) === 1) return true;
    return (await this.#client.set(this.#key, this.holderId, 'PX', this.ttl, 'NX')) === 'OK';
  }

  /** Deletes the lease when it is ours, so another gateway takes it at its next hold(). Never rejects: unreleased, it expires after ttl. */
  async release(): Promise<void> {
    try {
      await this.#holding;
      await this.#client.sluiceLeaseRelease(this.#key, this.holderId);
      this.#outage.succeeded();
    } catch (error) {
      this.#outage.failed(error);
    }
  }

  /** The holder id in Redis now (this lease's or another's), undefined when nobody holds it. Rejects when Redis does not answer. */
  async holder(): Promise<string | undefined> {
    return (await this.#client.get(this.#key)) ?? undefined;
  }

  /** Releases the lease and closes the connection when this lease made it; idempotent. */
  close(): Promise<void> {
    this.#closing ??= this.release().then(() => closeRedis(this.#redis));
    return this.#closing;
  }
}
