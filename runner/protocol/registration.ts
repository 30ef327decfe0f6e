/**
 * The registration wire: runners dial out to gateways (nodes sit behind firewalls), so a restarted
 * gateway gets its fleet back without touching any node.
 *
 *   POST {gateway}/v1/runners/register         body RunnerRegistration -> 200 RegistrationAccepted
 *   POST {gateway}/v1/runners/{id}/heartbeat   body RunnerHeartbeat    -> 200 HeartbeatAnswer,
 *                                                 404 when the gateway does not know the runner
 *                                                 (it restarted, or forgot it): register again
 *   DELETE {gateway}/v1/runners/{id}           -> 204, when the runner leaves after a drain
 *
 * Every request carries `authorization: Bearer <runner token>`; a wrong token is 401. The bodies
 * are checked here, beside their types: {@link parseRegistration} and {@link parseHeartbeat}.
 */

/**
 * What a runner id (and a gateway id) may be: 1 to 128 letters, digits or `._:-`. Ids travel in
 * URL paths and log fields, so nothing there needs escaping.
 */
export const WIRE_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
/** {@link WIRE_ID_PATTERN} in words, for error messages. */
export const WIRE_ID_RULE = '1-128 letters, digits or ._:- characters';

/** Path of the registration endpoint on a gateway. */
export const REGISTER_PATH = '/v1/runners/register';
/** Path of a runner's heartbeat endpoint on a gateway. */
export const heartbeatPath = (id: string): string => `/v1/runners/${encodeURIComponent(id)}/heartbeat`;
/** Path a runner DELETEs to leave a gateway's pool. */
export const runnerPath = (id: string): string => `/v1/runners/${encodeURIComponent(id)}`;

/** Load a runner reports, per engine model and in all. */
export interface ReportedLoad {
  /** Calls holding a slot now. */
  slotsInUse: number;
  slots: number;
  /** Requests waiting inside the engine (its own queue); the runner itself never queues. */
  queue: number;
  /** The engine's KV-cache use, 0..1, when it publishes it. */
  kvCacheUsage?: number;
  /** Running and waiting requests per model, from the engine's metrics. */
  models: Record<string, { running: number; waiting: number }>;
}

/** What a runner sends when it registers. */
export interface RunnerRegistration {
  id: string;
  /** Where the gateway should call this runner. */
  url: string;
  version: string;
  engines: Array<{ kind: string; url: string; models: readonly string[]; state: string }>;
  models: readonly string[];
  slots: number;
  gpus: unknown;
  /** False while the engine is starting: the gateway then knows the runner but places nothing on it. */
  ready: boolean;
  load: ReportedLoad;
}

/** What a gateway answers to a registration. */
export interface RegistrationAccepted {
  gatewayId: string;
  /** How often the gateway expects heartbeats, ms. */
  heartbeatInterval: number;
}

/** What a runner sends every heartbeat interval. */
export interface RunnerHeartbeat {
  ready: boolean;
  state: 'serving' | 'draining';
  models: readonly string[];
  load: ReportedLoad;
}

/** What a gateway answers to a heartbeat. */
export interface HeartbeatAnswer {
  /** True when an operator asked the gateway to drain this runner. */
  drain: boolean;
}

/**
 * A body checked against its wire type: the value, or why it is not one. Each side turns
 * `invalid` into its own error (the gateway answers 400 GW_INVALID_REGISTRATION).
 */
export type Parsed<T> = { kind: 'ok'; value: T } | { kind: 'invalid'; message: string };

const invalid = (message: string): { kind: 'invalid'; message: string } => ({ kind: 'invalid', message });

/**
 * Checks a registration body. Fields the gateway relies on are checked; `ready` defaults to true
 * and `version` to `unknown` for runners older than those fields.
 */
export function parseRegistration(body: unknown): Parsed<RunnerRegistration> {
  const b = body as Partial<RunnerRegistration> | null;
  if (!b || typeof b !== 'object') return invalid('registration body must be a JSON object');
  if (typeof b.id !== 'string' || !WIRE_ID_PATTERN.test(b.id)) return invalid(`registration id must be ${WIRE_ID_RULE}, got ${JSON.stringify(b.id)}`);
  let url: URL | undefined;
  try {
    url = typeof b.url === 'string' ? new URL(b.url) : undefined;
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) return invalid(`registration url must be an http(s) URL, got ${JSON.stringify(b.url)}`);
  if (!Array.isArray(b.models)) return invalid('registration models must be a list of model names');
  const load = loadProblem(b.load);
  if (load) return invalid(load);
  return { kind: 'ok', value: { ...(b as RunnerRegistration), ready: b.ready !== false, version: String(b.version ?? 'unknown') } };
}

/** Checks a heartbeat body; `ready` defaults to true and any state but `draining` reads `serving`. */
export function parseHeartbeat(body: unknown): Parsed<RunnerHeartbeat> {
  const b = body as Partial<RunnerHeartbeat> | null;
  if (!b || typeof b !== 'object') return invalid('heartbeat body must be a JSON object');
  if (!Array.isArray(b.models)) return invalid('heartbeat models must be a list of model names');
  const load = loadProblem(b.load);
  if (load) return invalid(load);
  return { kind: 'ok', value: { ready: b.ready !== false, state: b.state === 'draining' ? 'draining' : 'serving', models: b.models, load: b.load! } };
}

function loadProblem(load: unknown): string | undefined {
  const l = load as { slotsInUse?: unknown; slots?: unknown } | undefined;
  if (!l || typeof l.slotsInUse !== 'number' || typeof l.slots !== 'number') return 'load must carry numeric slotsInUse and slots';
  return undefined;
}
