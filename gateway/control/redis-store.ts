/**
 * The deployments of the gateways sharing a Redis: API deployments in one hash
 * (`<keyPrefix>deploy:deployments`, model -> JSON `{ deployment, updatedAt }`), so a PUT at any
 * gateway is seen by all, and the reconciler's leader acts on the same set whichever gateway
 * leads. File deployments stay in each gateway's memory: the file is that gateway's own, read at
 * its start, and is listed over the hash (a model in the file shadows one put through the API),
 * so it stays read-only through the API as in the memory store.
 *
 * What is read back is checked again with checkDeployment: a JSON that no longer passes (written
 * by an older or newer gateway, or by hand) is skipped with a warning naming the model, never
 * thrown to a listing. A Redis that does not answer rejects with STORE_UNAVAILABLE (503).
 */
import type { Redis } from 'ioredis';
import { checksFor, silentLogger } from '../../placer/kernel/index.ts';
import type { Logger } from '../../placer/kernel/index.ts';
import { GatewayConfigError } from '../errors.ts';
import { StoreUnavailableError } from '../store/index.ts';
import { checkDeployment } from './deployments.ts';
import type { Deployment } from './deployments.ts';
import type { LaunchPolicy } from '../../runner/protocol/index.ts';
import { closeRedis, openRedis } from './redis-client.ts';
import type { RedisConnection, RedisConnectionOptions } from './redis-client.ts';
import { byModel } from './store.ts';
import type { DeploymentDelete, DeploymentPut, DeploymentStore, StoredDeployment } from './store.ts';

/** Options of {@link RedisDeploymentStore}: where Redis is (url or client), and this gateway's file. */
export interface RedisDeploymentStoreOptions extends RedisConnectionOptions {
  /** This gateway's deployments file: listed first, never replaced or deleted through the API. @default [] */
  fileDeployments?: readonly Deployment[];
  /** Time of `updatedAt`. @default Date.now */
  now?: () => number;
  /** Where a stored deployment that no longer passes its check is reported. @default silentLogger */
  logger?: Logger;
  /** The launch policy stored deployments are checked against again as they are read. @default DEFAULT_LAUNCH_POLICY */
  policy?: LaunchPolicy;
}

/** The deployment store shared by every gateway on one Redis. */
export class RedisDeploymentStore implements DeploymentStore {
  readonly #redis: RedisConnection;
  readonly #client: Redis;
  readonly #hash: string;
  readonly #file = new Map<string, StoredDeployment>();
  readonly #now: () => number;
  readonly #logger: Logger;
  readonly #policy: LaunchPolicy | undefined;
  #closing: Promise<void> | undefined;

  /** @throws GatewayConfigError for a bad option or url/client pair; StoreConfigError for a bad URL. */
  constructor(options: RedisDeploymentStoreOptions) {
    const check = checksFor(GatewayConfigError);
    this.#now = check.fn('now', options.now ?? Date.now);
    this.#logger = check.logger('logger', options.logger ?? silentLogger);
    this.#policy = options.policy;
    this.#redis = openRedis(options, 'redis deployment store');
    this.#client = this.#redis.client;
    this.#hash = `${this.#redis.prefix}deploy:deployments`;
    for (const deployment of options.fileDeployments ?? []) {
      this.#file.set(deployment.model, Object.freeze({ deployment, source: 'file', updatedAt: this.#now() }));
    }
  }

  async list(): Promise<readonly StoredDeployment[]> {
    const all = await this.#answer(this.#client.hgetall(this.#hash), 'list the deployments');
    const listed = [...this.#file.values()];
    for (const [model, json] of Object.entries(all)) {
      if (this.#file.has(model)) continue;
      const stored = this.#read(model, json);
      if (stored) listed.push(stored);
    }
    return listed.sort(byModel);
  }

  async get(model: string): Promise<StoredDeployment | undefined> {
    const filed = this.#file.get(model);
    if (filed) return filed;
    const json = await this.#answer(this.#client.hget(this.#hash, model), `read the deployment of ${model}`);
    return json === null ? undefined : this.#read(model, json);
  }

  async put(deployment: Deployment): Promise<DeploymentPut> {
    if (this.#file.has(deployment.model)) return { kind: 'in-file' };
    const json = JSON.stringify({ deployment, updatedAt: this.#now() });
    // HSET answers how many fields were new: one gateway's create and another's replace never both read "created".
    const added = await this.#answer(
      this.#client.hset(this.#hash, deployment.model, json),
      `keep the deployment of ${deployment.model}`,
    );
    return { kind: added === 1 ? 'created' : 'replaced' };
  }

  async delete(model: string): Promise<DeploymentDelete> {
    if (this.#file.has(model)) return { kind: 'in-file' };
    const removed = await this.#answer(this.#client.hdel(this.#hash, model), `delete the deployment of ${model}`);
    return { kind: removed === 1 ? 'deleted' : 'not-found' };
  }

  /** Closes the connection when this store made it; idempotent. */
  close(): Promise<void> {
    this.#closing ??= closeRedis(this.#redis);
    return this.#closing;
  }

  /** A stored JSON as a deployment, or undefined (warned) when it no longer passes its check. */
  #read(model: string, json: string): StoredDeployment | undefined {
    let parsed: { deployment?: unknown; updatedAt?: unknown };
    try {
      parsed = JSON.parse(json) as typeof parsed;
    } catch {
      this.#logger.warn('stored deployment skipped', { model, problems: ['not JSON'] });
      return undefined;
    }
    const checked = checkDeployment(parsed?.deployment, undefined, this.#policy);
    const problems = checked.kind === 'invalid' ? [...checked.problems] : [];
    if (checked.kind === 'valid' && checked.deployment.model !== model)
      problems.push(`stored under ${JSON.stringify(model)} but names ${JSON.stringify(checked.deployment.model)}`);
    if (!Number.isSafeInteger(parsed?.updatedAt)) problems.push('updatedAt must be ms since the epoch');
    if (checked.kind === 'invalid' || problems.length > 0) {
      this.#logger.warn('stored deployment skipped', { model, problems });
      return undefined;
    }
    return Object.freeze({ deployment: checked.deployment, source: 'api', updatedAt: parsed.updatedAt as number });
  }

  /** A Redis failure as STORE_UNAVAILABLE (503) naming the store, never its credentials. */
  async #answer<T>(command: Promise<T>, what: string): Promise<T> {
    try {
      return await command;
    } catch (error) {
      throw new StoreUnavailableError(
        `redis deployment store ${this.#redis.display} could not ${what}: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
}
