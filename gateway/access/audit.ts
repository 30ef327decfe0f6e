/**
 * The audit log: one line for every change an operator makes to deployments, client keys and
 * drains, saying who (the credential's id, never its token), what (the action, its target and
 * the names of the fields it changed, never their values: args and env carry an engine's
 * credentials) and when. Lines go to the gateway's logger as `msg: "audit"` with `audit: true`,
 * so a log shipper can route them on their own (docs/operations.md, "Audit log").
 */
import type { Clock, Logger } from '../../placer/kernel/index.ts';
import type { Caller } from './scopes.ts';

/** What was changed. */
export type AuditAction =
  | 'deployment.put'
  | 'deployment.delete'
  | 'key.create'
  | 'key.delete'
  | 'runner.drain'
  | 'runners.drain';

/** One change, as the route that made it describes it. */
export interface AuditEntry {
  readonly action: AuditAction;
  /** What it was done to: a model, a key id, a runner id, or `*` for every runner. */
  readonly target: string;
  /** Names of the fields that changed (`maxReplicas`, `profile.env.HF_TOKEN`); never values. */
  readonly fields?: readonly string[];
}

/** Writes audit lines; one per gateway, handed to the routes that change things. */
export class AuditLog {
  readonly #logger: Logger;
  readonly #clock: Clock;

  constructor(logger: Logger, clock: Clock) {
    this.#logger = logger;
    this.#clock = clock;
  }

  /** Logs `entry` as done by `caller`. */
  record(caller: Caller | undefined, entry: AuditEntry): void {
    this.#logger.info('audit', {
      audit: true,
      credential: credentialOf(caller),
      action: entry.action,
      target: entry.target,
      ...(entry.fields === undefined ? {} : { fields: [...entry.fields] }),
      at: new Date(this.#clock.now()).toISOString(),
    });
  }
}

/** The caller's credential id for an audit line: never a token. */
function credentialOf(caller: Caller | undefined): string {
  switch (caller?.kind) {
    case 'operator':
    case 'viewer':
      return caller.id;
    case 'client':
      return `client:${caller.key.id}`;
    case 'runner':
      return `runner-token:${caller.token}`;
    default:
      return 'anonymous';
  }
}

/**
 * The names of the fields that differ between two plain values (a deployment before and after a
 * PUT), as dotted paths; objects are compared key by key, and a list or any other value as a
 * whole. `profile.args` is named whole; `profile.env.X` per variable. Every field of `after` when
 * there was no `before`.
 */
export function changedFields(before: unknown, after: unknown, path = ''): string[] {
  const isObject = (v: unknown): v is Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v);
  if (isObject(before) && isObject(after)) {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    return keys.flatMap((key) => changedFields(before[key], after[key], path === '' ? key : `${path}.${key}`));
  }
  if (before === undefined && isObject(after)) return changedFields({}, after, path);
  if (isObject(before) && after === undefined) return changedFields(before, {}, path);
  return JSON.stringify(before) === JSON.stringify(after) ? [] : [path];
}
