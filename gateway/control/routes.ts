/**
 * The operator API of deployments: GET /v1/deployments lists them, GET, PUT and DELETE
 * /v1/deployments/{model} read, set and remove one. The reads are the viewer scope's, the changes
 * the operator's, as the /v1/deployments* rows in gateway/access/scopes.ts say: the scope check
 * runs before these handlers. Each change is an audit line (gateway/access/audit.ts). Model names may
 * hold a slash (`org/name`), taken as they are or percent-encoded, as /v1/models/{id} takes them.
 *
 * Each deployment is answered with its status from the gateway's reconciler: this gateway's own
 * when it leads, the leader's as published when it follows (gateway/control/serverless.ts).
 */
import type { Context, Hono } from 'hono';
import {
  DeploymentInFileError,
  DeploymentNotFoundError,
  InvalidDeploymentError,
  InvalidJsonError,
  errorBody,
} from '../errors.ts';
import { changedFields } from '../access/index.ts';
import type { AuditLog, GatewayEnv } from '../access/index.ts';
import { DEFAULT_LAUNCH_POLICY } from '../../runner/protocol/index.ts';
import type { LaunchPolicy } from '../../runner/protocol/index.ts';
import { checkDeployment } from './deployments.ts';
import type { ReconcilerDeploymentStatus } from './reconciler-options.ts';
import type { DeploymentStore, StoredDeployment } from './store.ts';

/** A deployment's status: the reconciler's (reconciler-options.ts). */
export type DeploymentStatus = ReconcilerDeploymentStatus;

/** Where the routes read each deployment's status, and whom they tell of a change. */
export interface DeploymentStatusSource {
  status(model: string): Promise<DeploymentStatus>;
  /** A deployment was put or deleted: the reconciler reads the store now rather than at its period. */
  changed(model: string): void;
}

/** The status of a deployment no reconciler looks after (a store served without one): all zero. */
export const IDLE_STATUS: DeploymentStatus = Object.freeze({
  reconciler: 'following',
  wanted: 0,
  starting: 0,
  ready: 0,
  draining: 0,
  outdated: 0,
  replicas: Object.freeze([]),
  pending: Object.freeze([]),
  deadLettered: Object.freeze([]),
  events: Object.freeze([]),
});

/** What stands for an engine variable's value in answers: the value may be a credential (HF_TOKEN). */
export const HIDDEN_ENV_VALUE = '(hidden)';

/**
 * A stored deployment in the API's shape; environment values hidden. With `hideArgValues` (an
 * answer to a viewer, who reads without being trusted with credentials) the values among the
 * args are hidden too, options kept by name: `--api-key`'s value is a credential.
 */
export function deploymentAnswer(
  stored: StoredDeployment,
  status: DeploymentStatus = IDLE_STATUS,
  hideArgValues = false,
): Record<string, unknown> {
  const { deployment: d, source, updatedAt } = stored;
  const env = Object.fromEntries(Object.keys(d.profile.env).map((name) => [name, HIDDEN_ENV_VALUE]));
  const args = hideArgValues ? d.profile.args.map(optionOnly) : d.profile.args;
  return { object: 'deployment', id: d.model, ...d, profile: { ...d.profile, args, env }, source, updatedAt, status };
}

/** An argument with its value hidden: an option keeps its name (`--api-key=(hidden)`), a value goes. */
function optionOnly(arg: string): string {
  if (!arg.startsWith('-') || /^-[\d.]/.test(arg)) return HIDDEN_ENV_VALUE;
  const eq = arg.indexOf('=');
  return eq === -1 ? arg : `${arg.slice(0, eq)}=${HIDDEN_ENV_VALUE}`;
}

/** What the deployment routes check changes against and where they record them. */
export interface DeploymentRoutesOptions {
  /** What a deployment may launch; runners enforce their own too. @default DEFAULT_LAUNCH_POLICY */
  policy?: LaunchPolicy;
  /** Where each PUT and DELETE is recorded, with the caller's credential id and the fields changed. */
  audit?: AuditLog;
}

/**
 * Adds the /v1/deployments routes over `store`. GETs are the viewer scope's, PUT and DELETE the
 * operator's (gateway/access/scopes.ts).
 */
export function registerDeploymentRoutes(
  app: Hono<GatewayEnv>,
  store: DeploymentStore,
  source?: DeploymentStatusSource,
  options: DeploymentRoutesOptions = {},
): void {
  const { policy = DEFAULT_LAUNCH_POLICY, audit } = options;
  const answer = async (stored: StoredDeployment, c: Context<GatewayEnv>) =>
    deploymentAnswer(
      stored,
      source ? await source.status(stored.deployment.model) : IDLE_STATUS,
      c.get('caller')?.kind !== 'operator',
    );
  app.get('/v1/deployments', async (c) =>
    c.json({ object: 'list', data: await Promise.all((await store.list()).map((stored) => answer(stored, c))) }),
  );
  app.get('/v1/deployments/:model{.+}', async (c) => {
    const model = c.req.param('model');
    const stored = await store.get(model);
    if (!stored) throw notFound(model);
    return c.json(await answer(stored, c));
  });
  app.put('/v1/deployments/:model{.+}', async (c) => {
    const model = c.req.param('model');
    let body: unknown;
    try {
      body = await c.req.json();
    } catch (error) {
      throw new InvalidJsonError(`request body is not valid JSON: ${(error as Error).message}`);
    }
    const given =
      typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
    const checked = checkDeployment(given ? { ...given, model } : body, `deployment ${JSON.stringify(model)}`, policy);
    const problems = checked.kind === 'invalid' ? [...checked.problems] : [];
    if (given?.model !== undefined && given.model !== model) {
      problems.unshift(
        `deployment ${JSON.stringify(model)}: model ${JSON.stringify(given.model)} in the body differs from the path's; leave it out or make them equal`,
      );
    }
    if (problems.length > 0 || checked.kind === 'invalid') return invalid(c, new InvalidDeploymentError(problems));
    const before = await store.get(model);
    const put = await store.put(checked.deployment);
    if (put.kind === 'in-file') throw inFile(model);
    audit?.record(c.get('caller'), {
      action: 'deployment.put',
      target: model,
      fields: changedFields(before?.deployment, checked.deployment),
    });
    source?.changed(model);
    const stored = (await store.get(model))!;
    return c.json(await answer(stored, c), put.kind === 'created' ? 201 : 200);
  });
  app.delete('/v1/deployments/:model{.+}', async (c) => {
    const model = c.req.param('model');
    const deleted = await store.delete(model);
    if (deleted.kind === 'not-found') throw notFound(model);
    if (deleted.kind === 'in-file') throw inFile(model);
    audit?.record(c.get('caller'), { action: 'deployment.delete', target: model });
    source?.changed(model);
    return c.body(null, 204);
  });
}

/** 400 with every problem in the message and one per entry in `problems`. */
function invalid(c: Context<GatewayEnv>, error: InvalidDeploymentError): Response {
  return c.body(errorBody(error, { problems: error.problems }), 400, { 'content-type': 'application/json' });
}

const notFound = (model: string) =>
  new DeploymentNotFoundError(`no deployment of model ${JSON.stringify(model)}; GET /v1/deployments lists them`);
const inFile = (model: string) =>
  new DeploymentInFileError(
    `the deployment of model ${JSON.stringify(model)} comes from the deployments file, which the API does not change: edit the file and restart the gateway`,
  );
