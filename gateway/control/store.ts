/**
 * Where deployments are kept: in this gateway's memory here, or in Redis (redis-store.ts) so
 * that every gateway on one Redis sees one set. The interface is async and small for that reason.
 */
import type { Deployment } from './deployments.ts';

/** Where a deployment came from: the file is read-only through the API (docs/operations.md). */
export type DeploymentSource = 'file' | 'api';

/** A deployment as stored, with its source. */
export interface StoredDeployment {
  readonly deployment: Deployment;
  readonly source: DeploymentSource;
  /** When it was stored, ms since the epoch. */
  readonly updatedAt: number;
}

/** How a put went. */
export type DeploymentPut = { readonly kind: 'created' } | { readonly kind: 'replaced' } | { readonly kind: 'in-file' };
/** How a delete went. */
export type DeploymentDelete =
  | { readonly kind: 'deleted' }
  | { readonly kind: 'not-found' }
  | { readonly kind: 'in-file' };

/** Deployments by model. */
export interface DeploymentStore {
  /** Every deployment, by model name. */
  list(): Promise<readonly StoredDeployment[]>;
  /** One deployment, or undefined. */
  get(model: string): Promise<StoredDeployment | undefined>;
  /** Adds or replaces an API deployment; a file deployment is left as it is (`in-file`). */
  put(deployment: Deployment): Promise<DeploymentPut>;
  /** Removes an API deployment; a file deployment stays (`in-file`). */
  delete(model: string): Promise<DeploymentDelete>;
}

/** The order every store lists in: by model name, by code unit (not locale), so all gateways agree. */
export function byModel(a: StoredDeployment, b: StoredDeployment): number {
  return a.deployment.model < b.deployment.model ? -1 : a.deployment.model > b.deployment.model ? 1 : 0;
}

/** Options of {@link MemoryDeploymentStore}. */
export interface MemoryDeploymentStoreOptions {
  /** Deployments from the deployments file: listed, never replaced or deleted through the API. @default [] */
  fileDeployments?: readonly Deployment[];
  /** Time of `updatedAt`. @default Date.now */
  now?: () => number;
}

/** The store of one gateway: deployments live as long as the process. */
export class MemoryDeploymentStore implements DeploymentStore {
  readonly #byModel = new Map<string, StoredDeployment>();
  readonly #now: () => number;

  constructor(options: MemoryDeploymentStoreOptions = {}) {
    this.#now = options.now ?? Date.now;
    for (const deployment of options.fileDeployments ?? []) {
      this.#byModel.set(deployment.model, Object.freeze({ deployment, source: 'file', updatedAt: this.#now() }));
    }
  }

  async list(): Promise<readonly StoredDeployment[]> {
    return [...this.#byModel.values()].sort(byModel);
  }

  async get(model: string): Promise<StoredDeployment | undefined> {
    return this.#byModel.get(model);
  }

  async put(deployment: Deployment): Promise<DeploymentPut> {
    const before = this.#byModel.get(deployment.model);
    if (before?.source === 'file') return { kind: 'in-file' };
    this.#byModel.set(deployment.model, Object.freeze({ deployment, source: 'api', updatedAt: this.#now() }));
    return { kind: before ? 'replaced' : 'created' };
  }

  async delete(model: string): Promise<DeploymentDelete> {
    const before = this.#byModel.get(model);
    if (!before) return { kind: 'not-found' };
    if (before.source === 'file') return { kind: 'in-file' };
    this.#byModel.delete(model);
    return { kind: 'deleted' };
  }
}
