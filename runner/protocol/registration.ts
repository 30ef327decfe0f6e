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
 * Every request carries `authorization: Bearer <runner token>`; a wrong token is 401, and a token
 * other than the one the runner's id is bound to is 403 (docs/runners.md, "Registration rules").
 * The bodies are checked here, beside their types: {@link parseRegistration} and
 * {@link parseHeartbeat}; the gateway's address policy for the URL is its own (gateway/fleet/registration-policy.ts).
 */
import { BLOCK_HASH_ALGORITHMS } from './block-hash.ts';
import type { CacheAnnouncement } from './cache-feed.ts';

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

/**
 * What a gateway's answer to a registration, heartbeat or DELETE says, read from its status:
 * - `accepted`: a 2xx;
 * - `unknown-runner`: 404, the gateway does not know the runner (it restarted, or forgot it): a
 *   heartbeat's runner registers again, a leaving runner is gone already;
 * - `token-refused`: 401, the runner token is not one the gateway takes;
 * - `id-refused`: 403, the token is known, but the runner's id is bound to another one (a
 *   duplicate id, or an older token);
 * - `failed`: any other status, or no answer at all (status 0).
 */
export type GatewayAnswerKind = 'accepted' | 'unknown-runner' | 'token-refused' | 'id-refused' | 'failed';

/** The statuses with a meaning of their own on the registration wire; see {@link GatewayAnswerKind}. */
const GATEWAY_REFUSALS: ReadonlyMap<number, GatewayAnswerKind> = new Map([
  [404, 'unknown-runner'],
  [401, 'token-refused'],
  [403, 'id-refused'],
]);

/** What a gateway's answer with this status says; `status` 0 when no answer came. */
export function gatewayAnswerKind(status: number): GatewayAnswerKind {
  if (status >= 200 && status < 300) return 'accepted';
  return GATEWAY_REFUSALS.get(status) ?? 'failed';
}

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
  /** What the runner could host besides what runs; absent from runners older than this field. */
  capacity?: Capacity;
  /** The ordered engine this runner hosts; absent when it hosts none. */
  hosted?: HostedEngine;
  /** How gateways name its engine's cache blocks (cache-feed.ts); absent when they cannot. */
  cache?: CacheAnnouncement;
}

/**
 * What a runner can host, not only what it runs: its labels, the GPUs no engine of its holds,
 * and the engine kinds it can launch. Sent at registration and in every heartbeat (free GPUs
 * change as engines come and go); a gateway keeps the last one it got.
 */
export interface Capacity {
  /** Labels an operator gave the runner (`--label zone=a`), for selecting nodes; see {@link LABEL_RULE}. */
  labels: Readonly<Record<string, string>>;
  /** Indices (nvidia-smi's) of this node's GPUs that no engine of this runner holds. */
  freeGpus: readonly number[];
  /** Engine kinds this runner can launch: those whose binary it found on its PATH at start, and `sim`. */
  engineKinds: readonly string[];
  /**
   * True when the runner takes engine orders (see {@link EngineOrder}): it was started without
   * an engine of its own and hosts what a gateway's reconciler asks for. Absent reads false.
   */
  orders?: boolean;
}

/**
 * The engine profile a gateway orders a runner to launch: a deployment's profile
 * (gateway/control/deployments.ts). The runner fills in what only it knows: a free port when
 * `port` is absent, and free GPUs when `gpus` is a count.
 */
export interface OrderedProfile {
  /** The engine kind (runner/engines/argv.ts's profile kinds). */
  readonly kind: string;
  /** What the engine loads: a Hugging Face id, a local path, an ollama tag. */
  readonly model: string;
  /** GPU indices on the runner, or how many of its free GPUs to take. */
  readonly gpus: readonly number[] | number;
  /** Port the engine listens on; absent, the runner picks a free one. */
  readonly port?: number;
  /** Executable; absent, the kind's default on the runner's PATH. */
  readonly binary?: string;
  /** Extra engine arguments, after the ones the runner sets. */
  readonly args: readonly string[];
  /** Environment variables set over the runner's own. */
  readonly env: Readonly<Record<string, string>>;
  /** ms the engine may take to become ready; absent, the kind's default (runner/engines/argv.ts). */
  readonly startTimeout?: number;
}

/**
 * An engine order: host this replica of a deployment. A runner that takes orders
 * hosts at most one ordered engine; an order with another `replica` id than the one it hosts
 * means: drain and stop that one, then launch this one.
 */
export interface EngineOrder {
  /** The replica's id, new for every start the reconciler orders ({@link WIRE_ID_PATTERN}). */
  readonly replica: string;
  /** The model clients call the replica by: the deployment's model. */
  readonly model: string;
  readonly profile: OrderedProfile;
  /**
   * The deployment's revision the replica is ordered at ({@link WIRE_ID_PATTERN}): the runner
   * reports it back in {@link HostedEngine}, so any reconciler (a new leader too) tells a replica
   * of an older profile from a current one. Absent from gateways older than this field.
   */
  readonly revision?: string;
}

/** Where an ordered engine stands, as its runner reports it. */
export type HostedState = 'starting' | 'ready' | 'draining' | 'stopped' | 'failed';

/**
 * The ordered engine a runner hosts, in its registration and every heartbeat, so that any
 * gateway (a new reconciler leader too) learns the fleet's replicas from the runners alone.
 */
export interface HostedEngine {
  readonly replica: string;
  readonly model: string;
  /** The order's revision, as it came; absent when the order had none. */
  readonly revision?: string;
  readonly state: HostedState;
  /** When the state last changed, ms since the epoch by the runner's clock. */
  readonly since: number;
  /** With `failed`: why, in one line (the exit code or signal, a start timeout, a profile refused on this node). */
  readonly reason?: string;
  /** With `failed`: the engine's last output lines (at most {@link REGISTRATION_LIMITS}.outputLines). */
  readonly output?: readonly string[];
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
  /** As at registration; absent from runners older than this field. */
  capacity?: Capacity;
  /** The ordered engine this runner hosts, as at registration; absent when it hosts none. */
  hosted?: HostedEngine;
  /** As at registration: an engine launched on order brings its announcement with it. */
  cache?: CacheAnnouncement;
}

/** What a gateway answers to a heartbeat. */
export interface HeartbeatAnswer {
  /** True when an operator asked the gateway to drain this runner. */
  drain: boolean;
  /**
   * The engine the gateway's reconciler wants this runner to host: an order, `null` for none
   * (drain and stop the ordered engine), absent for no word (a gateway that does not lead the
   * reconciling, or a runner that takes no orders): the runner keeps what it hosts.
   */
  host?: EngineOrder | null;
}

/**
 * A body checked against its wire type: the value, or why it is not one. Each side turns
 * `invalid` into its own error (the gateway answers 400 GW_INVALID_REGISTRATION).
 */
export type Parsed<T> = { kind: 'ok'; value: T } | { kind: 'invalid'; message: string };

/**
 * Bounds on what a registration or heartbeat may carry. A runner sends what its engine serves,
 * so real figures are far below these; they exist so that one body cannot make the gateway keep
 * (and print in GET /v1/runners) megabytes for a runner, or log a field that spans lines.
 */
export const REGISTRATION_LIMITS = Object.freeze({
  /** Models one runner (and one of its engines) may serve. */
  models: 256,
  /** Characters of a model name (Hugging Face ids are at most 96; adapters and tags add some). */
  modelName: 256,
  /** Engines behind one runner. */
  engines: 16,
  /** Slots of one runner; a runner refuses more at start-up. */
  slots: 65_536,
  /** GPUs listed in one runner's inventory. */
  gpus: 256,
  /** Characters of the runner's URL and of each engine's. */
  url: 2048,
  /** Characters of a version, an engine kind or an engine state. */
  label: 64,
  /** Labels of one runner. */
  labels: 64,
  /** Engine kinds one runner may say it can launch. */
  engineKinds: 16,
  /** Largest GPU index a runner may list as free. */
  gpuIndex: 4095,
  /** Engine output lines in a failed hosted engine's report. */
  outputLines: 20,
  /** Characters of one such line, and of a failure's reason. */
  outputLine: 512,
});

// Kubernetes' label syntax: a name of 1-63 alphanumerics with -_. inside, and a key may lead
// with a DNS-subdomain prefix and a slash (example.com/zone). Values are a name or empty.
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The label rule in words, for error messages. */
export const LABEL_RULE =
  'a key of 1-63 letters, digits or -_. starting and ending with a letter or digit, optionally after a lowercase DNS prefix and a slash (example.com/zone), and a value of the same characters, at most 63, or empty (Kubernetes label syntax)';

/** Why `key`=`value` is not a label, or undefined when it is one. */
export function labelPairProblem(key: unknown, value: unknown): string | undefined {
  if (typeof key !== 'string') return `label key must be a string, got ${show(key)}`;
  const slash = key.lastIndexOf('/');
  const prefix = slash === -1 ? undefined : key.slice(0, slash);
  const name = slash === -1 ? key : key.slice(slash + 1);
  if (!LABEL_NAME.test(name) || (prefix !== undefined && (prefix.length > 253 || !LABEL_PREFIX.test(prefix)))) {
    return `label key ${show(key)} must be ${LABEL_RULE}`;
  }
  if (typeof value !== 'string' || (value !== '' && !LABEL_NAME.test(value)))
    return `label ${key} value ${show(value)} must be ${LABEL_RULE}`;
  return undefined;
}

const invalid = (message: string): { kind: 'invalid'; message: string } => ({ kind: 'invalid', message });

// Printable text on one line: a control character in a name would forge log lines and break the runner list.
const ONE_LINE = /^[^\x00-\x1f\x7f]*$/;
// An engine kind on the wire: not held to today's kinds, since a newer runner may launch one this gateway does not know.
const ENGINE_KIND = /^[a-z0-9-]{1,32}$/;

/** Why `value` is not a list of model names, or undefined when it is one. */
function modelsProblem(field: string, value: unknown): string | undefined {
  const { models: max, modelName } = REGISTRATION_LIMITS;
  if (!Array.isArray(value)) return `${field} must be a list of model names`;
  if (value.length > max) return `${field} must list at most ${max} models, got ${value.length}`;
  const bad = value.findIndex(
    (m) => typeof m !== 'string' || m.length === 0 || m.length > modelName || !ONE_LINE.test(m),
  );
  if (bad >= 0)
    return `${field}[${bad}] must be a model name of 1 to ${modelName} characters on one line, got ${show(value[bad])}`;
  return undefined;
}

/** Why `value` is not one line of at most `max` characters, or undefined when it is one. */
function oneLineProblem(field: string, value: unknown, max: number): string | undefined {
  if (typeof value !== 'string' || value.length > max || !ONE_LINE.test(value))
    return `${field} must be a string of at most ${max} characters on one line, got ${show(value)}`;
  return undefined;
}

/** Why `value` is not a short one-line string, or undefined when it is one. */
function labelProblem(field: string, value: unknown): string | undefined {
  return oneLineProblem(field, value, REGISTRATION_LIMITS.label);
}

/**
 * Why `value` is not a URL a gateway may be told to call, or undefined: http(s), at most
 * {@link REGISTRATION_LIMITS}.url characters, without credentials (they would be sent with every
 * call and shown in logs), a query or a fragment (a runner is called at paths of its own).
 */
function urlProblem(field: string, value: unknown): string | undefined {
  const bad = `${field} must be an http(s) URL, got ${show(value)}`;
  if (typeof value !== 'string') return bad;
  if (value.length > REGISTRATION_LIMITS.url)
    return `${field} must be at most ${REGISTRATION_LIMITS.url} characters, got ${value.length}`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return bad;
  }
  // Named without the URL: its userinfo may be a secret.
  if (url.username || url.password) return `${field} must not carry credentials`;
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return bad;
  // The parser drops an empty "?" or "#": read the text too.
  if (url.search || url.hash || /[?#]/.test(value))
    return `${field} must not have a query or fragment, got ${show(value)}`;
  return undefined;
}

/** Why a number is not a whole count from 0 to `max`, or undefined. */
function countProblem(field: string, value: unknown, min: number, max: number): string | undefined {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max)
    return `${field} must be a whole number from ${min} to ${max}, got ${show(value)}`;
  return undefined;
}

/** A value for a message: JSON, cut short, so a hostile body cannot fill a log line. */
function show(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 80)}...` : text;
}

function enginesProblem(value: unknown): string | undefined {
  const max = REGISTRATION_LIMITS.engines;
  if (!Array.isArray(value)) return 'registration engines must be a list';
  if (value.length > max) return `registration engines must list at most ${max} engines, got ${value.length}`;
  for (const [i, e] of value.entries()) {
    if (!e || typeof e !== 'object') return `registration engines[${i}] must be an object`;
    const engine = e as Record<string, unknown>;
    const problem =
      labelProblem(`registration engines[${i}].kind`, engine.kind) ??
      urlProblem(`registration engines[${i}].url`, engine.url) ??
      modelsProblem(`registration engines[${i}].models`, engine.models) ??
      labelProblem(`registration engines[${i}].state`, engine.state);
    if (problem) return problem;
  }
  return undefined;
}

/** Why `value` is not a runner's capacity, or undefined; absent is fine (an older runner). */
function capacityProblem(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return `${field} must be an object, got ${show(value)}`;
  const c = value as Partial<Record<keyof Capacity, unknown>>;
  const { labels: maxLabels, engineKinds: maxKinds, gpus: maxGpus, gpuIndex } = REGISTRATION_LIMITS;
  if (!c.labels || typeof c.labels !== 'object' || Array.isArray(c.labels))
    return `${field}.labels must be an object of label keys and values, got ${show(c.labels)}`;
  const labels = Object.entries(c.labels as Record<string, unknown>);
  if (labels.length > maxLabels) return `${field}.labels must hold at most ${maxLabels} labels, got ${labels.length}`;
  for (const [k, v] of labels) {
    const problem = labelPairProblem(k, v);
    if (problem) return `${field}.labels: ${problem}`;
  }
  if (!Array.isArray(c.freeGpus) || c.freeGpus.length > maxGpus)
    return `${field}.freeGpus must be a list of at most ${maxGpus} GPU indices, got ${show(c.freeGpus)}`;
  const seen = new Set<unknown>();
  for (const [i, gpu] of c.freeGpus.entries()) {
    const problem = countProblem(`${field}.freeGpus[${i}]`, gpu, 0, gpuIndex);
    if (problem) return problem;
    if (seen.has(gpu)) return `${field}.freeGpus lists GPU ${String(gpu)} twice`;
    seen.add(gpu);
  }
  if (!Array.isArray(c.engineKinds) || c.engineKinds.length > maxKinds)
    return `${field}.engineKinds must be a list of at most ${maxKinds} engine kinds, got ${show(c.engineKinds)}`;
  for (const [i, kind] of c.engineKinds.entries()) {
    // Not held to today's kinds: a newer runner may launch one this gateway does not know.
    if (typeof kind !== 'string' || !ENGINE_KIND.test(kind))
      return `${field}.engineKinds[${i}] must be 1-32 lowercase letters, digits or -, got ${show(kind)}`;
  }
  if (c.orders !== undefined && typeof c.orders !== 'boolean')
    return `${field}.orders must be true or false, got ${show(c.orders)}`;
  return undefined;
}

/** A checked capacity as a fresh object of its known fields only. */
function capacityOf(value: unknown): Capacity | undefined {
  if (value === undefined) return undefined;
  const c = value as Capacity;
  return {
    labels: { ...c.labels },
    freeGpus: [...c.freeGpus],
    engineKinds: [...c.engineKinds],
    ...(c.orders === undefined ? {} : { orders: c.orders }),
  };
}

function gpusProblem(value: unknown): string | undefined {
  // Null or absent: a runner that has not read its inventory yet.
  if (value === null || value === undefined) return undefined;
  if (typeof value !== 'object' || Array.isArray(value))
    return `registration gpus must be an inventory object, got ${show(value)}`;
  const list = (value as { gpus?: unknown }).gpus;
  if (list === undefined) return undefined;
  if (!Array.isArray(list) || list.length > REGISTRATION_LIMITS.gpus)
    return `registration gpus.gpus must be a list of at most ${REGISTRATION_LIMITS.gpus} GPUs`;
  return undefined;
}

/** What a registration and a heartbeat both report of the runner's state now. */
type RunnerState = Pick<RunnerHeartbeat, 'load' | 'capacity' | 'hosted' | 'cache'>;

/** Why the state fields of a `body` (registration or heartbeat) are not what the wire says, or undefined. */
function stateProblem(body: string, b: Partial<RunnerState>): string | undefined {
  return (
    loadProblem(b.load) ??
    capacityProblem(`${body} capacity`, b.capacity) ??
    hostedProblem(`${body} hosted`, b.hosted) ??
    cacheProblem(`${body} cache`, b.cache)
  );
}

/** A fresh copy of the state fields of a body {@link stateProblem} found fine. */
function stateOf(b: Partial<RunnerState>): RunnerState {
  const capacity = capacityOf(b.capacity);
  const cache = cacheOf(b.cache);
  return {
    load: b.load!,
    ...(capacity ? { capacity } : {}),
    ...(b.hosted === undefined ? {} : { hosted: hostedOf(b.hosted) }),
    ...(cache ? { cache } : {}),
  };
}

/**
 * Checks a registration body, every field of it against {@link REGISTRATION_LIMITS}. `ready`
 * defaults to true and `version` to `unknown` for runners older than those fields. The value is
 * a fresh object of the known fields only.
 */
export function parseRegistration(body: unknown): Parsed<RunnerRegistration> {
  const b = body as Partial<RunnerRegistration> | null;
  if (!b || typeof b !== 'object' || Array.isArray(b)) return invalid('registration body must be a JSON object');
  if (typeof b.id !== 'string' || !WIRE_ID_PATTERN.test(b.id))
    return invalid(`registration id must be ${WIRE_ID_RULE}, got ${show(b.id)}`);
  const problem =
    urlProblem('registration url', b.url) ??
    (b.version === undefined ? undefined : labelProblem('registration version', b.version)) ??
    (b.ready === undefined || typeof b.ready === 'boolean'
      ? undefined
      : `registration ready must be true or false, got ${show(b.ready)}`) ??
    modelsProblem('registration models', b.models) ??
    enginesProblem(b.engines ?? []) ??
    countProblem('registration slots', b.slots, 1, REGISTRATION_LIMITS.slots) ??
    gpusProblem(b.gpus) ??
    stateProblem('registration', b);
  if (problem) return invalid(problem);
  return {
    kind: 'ok',
    value: {
      id: b.id,
      url: b.url!,
      version: b.version ?? 'unknown',
      engines: b.engines ?? [],
      models: b.models!,
      slots: b.slots!,
      gpus: b.gpus,
      ready: b.ready !== false,
      ...stateOf(b),
    },
  };
}

/** Checks a heartbeat body; `ready` defaults to true and any state but `draining` reads `serving`. */
export function parseHeartbeat(body: unknown): Parsed<RunnerHeartbeat> {
  const b = body as Partial<RunnerHeartbeat> | null;
  if (!b || typeof b !== 'object' || Array.isArray(b)) return invalid('heartbeat body must be a JSON object');
  const problem =
    (b.ready === undefined || typeof b.ready === 'boolean'
      ? undefined
      : `heartbeat ready must be true or false, got ${show(b.ready)}`) ??
    modelsProblem('heartbeat models', b.models) ??
    stateProblem('heartbeat', b);
  if (problem) return invalid(problem);
  return {
    kind: 'ok',
    value: {
      ready: b.ready !== false,
      state: b.state === 'draining' ? 'draining' : 'serving',
      models: b.models!,
      ...stateOf(b),
    },
  };
}

/** Longest tokenizer name or hash seed announced. */
const MAX_ANNOUNCED_TEXT = 256;
/** Largest block size announced: engines use 16 to 256 tokens a block. */
const MAX_BLOCK_SIZE = 4096;

/**
 * Why `value` is not a cache announcement, or undefined; absent is fine (the runner's engine
 * tells nothing of its cache). An algorithm this side does not know is not a problem: such an
 * announcement is dropped by {@link cacheOf}, so a newer runner still registers.
 */
function cacheProblem(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return `${field} must be an object with tokenizer, scheme and events`;
  const { tokenizer, scheme, events } = value as Record<string, unknown>;
  if (typeof tokenizer !== 'string' || tokenizer === '' || tokenizer.length > MAX_ANNOUNCED_TEXT)
    return `${field}.tokenizer must be a name of 1 to ${MAX_ANNOUNCED_TEXT} characters, got ${show(tokenizer)}`;
  if (typeof events !== 'boolean') return `${field}.events must be true or false, got ${show(events)}`;
  if (!scheme || typeof scheme !== 'object' || Array.isArray(scheme))
    return `${field}.scheme must be an object with algorithm, seed and blockSize`;
  const { algorithm, seed, blockSize } = scheme as Record<string, unknown>;
  if (typeof algorithm !== 'string') return `${field}.scheme.algorithm must be a name, got ${show(algorithm)}`;
  if (typeof seed !== 'string' || seed.length > MAX_ANNOUNCED_TEXT)
    return `${field}.scheme.seed must be a string of at most ${MAX_ANNOUNCED_TEXT} characters, got ${show(seed)}`;
  return countProblem(`${field}.scheme.blockSize`, blockSize, 1, MAX_BLOCK_SIZE);
}

/** A checked announcement as a fresh object of its known fields; undefined for none or an unknown algorithm. */
function cacheOf(value: unknown): CacheAnnouncement | undefined {
  if (value === undefined) return undefined;
  const { tokenizer, scheme, events } = value as CacheAnnouncement;
  if (!(BLOCK_HASH_ALGORITHMS as readonly string[]).includes(scheme.algorithm)) return undefined;
  return { tokenizer, events, scheme: { algorithm: scheme.algorithm, seed: scheme.seed, blockSize: scheme.blockSize } };
}

/** Why a reported load is not one, or undefined: counts in range, the KV-cache use a fraction, at most the model limit. */
function loadProblem(load: unknown): string | undefined {
  const l = load as Partial<Record<keyof ReportedLoad, unknown>> | undefined;
  if (!l || typeof l.slotsInUse !== 'number' || typeof l.slots !== 'number')
    return 'load must carry numeric slotsInUse and slots';
  const max = REGISTRATION_LIMITS.slots;
  const problem =
    countProblem('load.slotsInUse', l.slotsInUse, 0, max) ??
    countProblem('load.slots', l.slots, 0, max) ??
    (l.queue === undefined || (typeof l.queue === 'number' && Number.isFinite(l.queue) && l.queue >= 0)
      ? undefined
      : `load.queue must be a number of 0 or more, got ${show(l.queue)}`) ??
    (l.kvCacheUsage === undefined || (typeof l.kvCacheUsage === 'number' && l.kvCacheUsage >= 0 && l.kvCacheUsage <= 1)
      ? undefined
      : `load.kvCacheUsage must be a fraction from 0 to 1, got ${show(l.kvCacheUsage)}`);
  if (problem) return problem;
  if (l.models === undefined) return undefined;
  if (!l.models || typeof l.models !== 'object' || Array.isArray(l.models))
    return 'load.models must be an object of per-model counts';
  const entries = Object.entries(l.models as Record<string, unknown>);
  if (entries.length > REGISTRATION_LIMITS.models)
    return `load.models must hold at most ${REGISTRATION_LIMITS.models} models, got ${entries.length}`;
  for (const [name, counts] of entries) {
    const c = counts as { running?: unknown; waiting?: unknown } | null;
    const fine = (n: unknown) => typeof n === 'number' && Number.isFinite(n) && n >= 0;
    if (!c || typeof c !== 'object' || !fine(c.running) || !fine(c.waiting))
      return `load.models[${show(name)}] must carry running and waiting counts of 0 or more`;
  }
  return modelsProblem('load.models', Object.keys(l.models));
}

/** Every {@link HostedState}, for checking a report. */
export const HOSTED_STATES: readonly HostedState[] = Object.freeze([
  'starting',
  'ready',
  'draining',
  'stopped',
  'failed',
]);

/** Why `value` is not one line of at most {@link REGISTRATION_LIMITS}.outputLine characters, or undefined. */
function outputLineProblem(field: string, value: unknown): string | undefined {
  return oneLineProblem(field, value, REGISTRATION_LIMITS.outputLine);
}

/** Why `value` is not a hosted engine's report, or undefined; absent is fine (it hosts none). */
function hostedProblem(field: string, value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return `${field} must be an object, got ${show(value)}`;
  const h = value as Partial<Record<keyof HostedEngine, unknown>>;
  if (typeof h.replica !== 'string' || !WIRE_ID_PATTERN.test(h.replica))
    return `${field}.replica must be ${WIRE_ID_RULE}, got ${show(h.replica)}`;
  const model = modelsProblem(`${field}.model`, [h.model]);
  if (model)
    return `${field}.model must be a model name of 1 to ${REGISTRATION_LIMITS.modelName} characters on one line, got ${show(h.model)}`;
  if (h.revision !== undefined && (typeof h.revision !== 'string' || !WIRE_ID_PATTERN.test(h.revision)))
    return `${field}.revision must be ${WIRE_ID_RULE}, got ${show(h.revision)}`;
  if (!HOSTED_STATES.includes(h.state as HostedState))
    return `${field}.state must be one of ${HOSTED_STATES.join(', ')}, got ${show(h.state)}`;
  const problem =
    countProblem(`${field}.since`, h.since, 0, Number.MAX_SAFE_INTEGER) ??
    (h.reason === undefined ? undefined : outputLineProblem(`${field}.reason`, h.reason));
  if (problem) return problem;
  if (h.output === undefined) return undefined;
  const max = REGISTRATION_LIMITS.outputLines;
  if (!Array.isArray(h.output) || h.output.length > max)
    return `${field}.output must be a list of at most ${max} lines, got ${show(h.output)}`;
  for (const [i, line] of h.output.entries()) {
    const bad = outputLineProblem(`${field}.output[${i}]`, line);
    if (bad) return bad;
  }
  return undefined;
}

/** A checked hosted report as a fresh object of its known fields only. */
function hostedOf(value: unknown): HostedEngine {
  const h = value as HostedEngine;
  return {
    replica: h.replica,
    model: h.model,
    ...(h.revision === undefined ? {} : { revision: h.revision }),
    state: h.state,
    since: h.since,
    ...(h.reason === undefined ? {} : { reason: h.reason }),
    ...(h.output === undefined ? {} : { output: [...h.output] }),
  };
}

/**
 * Bounds on an engine order's profile. The reconciler sends what a deployment says, so real
 * orders are far below these; they exist so one answer cannot make a runner spawn a command line
 * or an environment of megabytes.
 */
export const ORDER_LIMITS = Object.freeze({
  /** Arguments of an ordered profile. */
  args: 1024,
  /** Environment variables of an ordered profile. */
  env: 1024,
  /** Characters of one argument, one variable's name or value, and the binary. */
  text: 16_384,
  /** GPUs an order may name, or count. */
  gpus: 256,
  /** The longest start an order may allow, ms (a day: GPU engines load for minutes, not days). */
  startTimeout: 86_400_000,
});

const ORDER_FIELDS = ['kind', 'model', 'gpus', 'port', 'binary', 'args', 'env', 'startTimeout'];

/** Why `value` is a string with a NUL byte or past {@link ORDER_LIMITS}.text, or not a string; undefined when fine. */
function textProblem(field: string, value: unknown): string | undefined {
  if (typeof value !== 'string' || value.includes('\0') || value.length > ORDER_LIMITS.text)
    return `${field} must be a string of at most ${ORDER_LIMITS.text} characters without NUL bytes`;
  return undefined;
}

/** Why `value` is not an ordered profile, or undefined. Values of args and env are never quoted: they may hold secrets. */
function orderedProfileProblem(value: unknown): string | undefined {
  const field = 'host.profile';
  if (!value || typeof value !== 'object' || Array.isArray(value)) return `${field} must be an object`;
  const p = value as Partial<Record<keyof OrderedProfile, unknown>>;
  const unknownField = Object.keys(p).find((key) => !ORDER_FIELDS.includes(key));
  if (unknownField !== undefined) return `${field} has an unknown field ${show(unknownField)}`;
  if (typeof p.kind !== 'string' || !ENGINE_KIND.test(p.kind))
    return `${field}.kind must be 1-32 lowercase letters, digits or -, got ${show(p.kind)}`;
  if (modelsProblem(`${field}.model`, [p.model]))
    return `${field}.model must be a model name of 1 to ${REGISTRATION_LIMITS.modelName} characters on one line, got ${show(p.model)}`;
  const { gpus: maxGpus, args: maxArgs, env: maxEnv, startTimeout } = ORDER_LIMITS;
  if (Array.isArray(p.gpus)) {
    if (p.gpus.length > maxGpus) return `${field}.gpus must list at most ${maxGpus} GPUs, got ${p.gpus.length}`;
    const seen = new Set<unknown>();
    for (const [i, gpu] of p.gpus.entries()) {
      const problem = countProblem(`${field}.gpus[${i}]`, gpu, 0, REGISTRATION_LIMITS.gpuIndex);
      if (problem) return problem;
      if (seen.has(gpu)) return `${field}.gpus lists GPU ${String(gpu)} twice`;
      seen.add(gpu);
    }
  } else if (countProblem(`${field}.gpus`, p.gpus, 0, maxGpus)) {
    return `${field}.gpus must be a list of GPU indices or a count from 0 to ${maxGpus}, got ${show(p.gpus)}`;
  }
  const problem =
    (p.port === undefined ? undefined : countProblem(`${field}.port`, p.port, 1, 65_535)) ??
    (p.binary === undefined ? undefined : textProblem(`${field}.binary`, p.binary)) ??
    (p.startTimeout === undefined ? undefined : countProblem(`${field}.startTimeout`, p.startTimeout, 1, startTimeout));
  if (problem) return problem;
  // Absent args and env read empty: nothing is lost, and a gateway that leaves empty ones out is understood.
  const args = p.args ?? [];
  if (!Array.isArray(args) || args.length > maxArgs)
    return `${field}.args must be a list of at most ${maxArgs} strings`;
  for (const [i, arg] of args.entries()) {
    const bad = textProblem(`${field}.args[${i}]`, arg);
    if (bad) return bad;
  }
  const vars = p.env ?? {};
  if (!vars || typeof vars !== 'object' || Array.isArray(vars))
    return `${field}.env must be an object of string values`;
  const env = Object.entries(vars);
  if (env.length > maxEnv) return `${field}.env must hold at most ${maxEnv} variables, got ${env.length}`;
  for (const [name, v] of env) {
    if (name === '' || name.includes('=') || textProblem('', name))
      return `${field}.env has an invalid variable name ${show(name)}`;
    const bad = textProblem(`${field}.env.${name}`, v);
    if (bad) return bad;
  }
  return undefined;
}

/**
 * Checks the `host` of a heartbeat answer: an {@link EngineOrder}, or null for none. The runner
 * reads it (absent means no word and is not passed here); the deep checks of the profile against
 * the node (binary, GPUs, port, the kind's arguments) are the runner's profile validation, at launch.
 * The value is a fresh object of the known fields only.
 */
export function parseEngineOrder(value: unknown): Parsed<EngineOrder | null> {
  if (value === null) return { kind: 'ok', value: null };
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return invalid(`host must be an engine order or null, got ${show(value)}`);
  const o = value as Partial<Record<keyof EngineOrder, unknown>>;
  if (typeof o.replica !== 'string' || !WIRE_ID_PATTERN.test(o.replica))
    return invalid(`host.replica must be ${WIRE_ID_RULE}, got ${show(o.replica)}`);
  if (modelsProblem('host.model', [o.model]))
    return invalid(
      `host.model must be a model name of 1 to ${REGISTRATION_LIMITS.modelName} characters on one line, got ${show(o.model)}`,
    );
  if (o.revision !== undefined && (typeof o.revision !== 'string' || !WIRE_ID_PATTERN.test(o.revision)))
    return invalid(`host.revision must be ${WIRE_ID_RULE}, got ${show(o.revision)}`);
  const problem = orderedProfileProblem(o.profile);
  if (problem) return invalid(problem);
  const p = o.profile as OrderedProfile;
  const profile: OrderedProfile = {
    kind: p.kind,
    model: p.model,
    gpus: Array.isArray(p.gpus) ? [...(p.gpus as readonly number[])] : p.gpus,
    ...(p.port === undefined ? {} : { port: p.port }),
    ...(p.binary === undefined ? {} : { binary: p.binary }),
    args: [...(p.args ?? [])],
    env: { ...(p.env ?? {}) },
    ...(p.startTimeout === undefined ? {} : { startTimeout: p.startTimeout }),
  };
  return {
    kind: 'ok',
    value: {
      replica: o.replica,
      model: o.model as string,
      profile,
      ...(o.revision === undefined ? {} : { revision: o.revision as string }),
    },
  };
}
