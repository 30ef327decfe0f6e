/**
 * The placement workload: chat sessions that share a few long system prompts and come back for
 * several turns, each turn resending the whole conversation so far, as a chat client does. It is
 * the traffic where placement decides how fast tokens come back: an engine that served a
 * session's last turn still holds that conversation in its prefix cache and prefills only the
 * new message, while any other engine prefills the whole history again.
 *
 * A trace is a pure function of its parameters and seed, so the live placement scenario and the
 * virtual-clock simulator replay the very same calls, and two runs of either are comparable.
 * Words are plain lowercase words: the simulated engine counts each as one token, so the token
 * structure of every prompt is known without tokenizing it.
 */
import { seededRandom } from '../../placer/index.ts';
import { BLOCK_SIZE } from '../../runner/index.ts';

/** The shape of the sessions; see {@link PLACEMENT_WORKLOAD} for the values the scenario uses. */
export interface WorkloadShape {
  /** Model name sent in every call. */
  readonly model: string;
  /** Distinct system prompts; each session uses one, drawn uniformly. */
  readonly systemPrompts: number;
  /** Words (tokens) in each system prompt. */
  readonly systemWords: number;
  /** Turns in every session. */
  readonly turns: number;
  /** Words in each user message. */
  readonly userWords: number;
  /** Tokens each call asks for (`max_tokens` with `ignore_eos`), and words in each assistant reply resent later. */
  readonly outputTokens: number;
  /** Time between a session's turns, ms: a user reading the answer and typing the next message. */
  readonly thinkMs: number;
}

/**
 * The scenario's sessions. A 1,000-token system prompt, 150-token user messages and 64-token
 * answers: by the fourth turn a prompt is about 1,800 tokens, of which about 800 are the session's
 * own history, so an engine without that history cached spends about 200 ms more on prefill at
 * the H100 profile's 0.25 ms per token. Eight system prompts, so every engine sees every one of
 * them often and keeps them cached whatever the placer does: what placement changes is only
 * where each session's history is cached.
 */
export const PLACEMENT_WORKLOAD: WorkloadShape = Object.freeze({
  model: 'sim-8b',
  systemPrompts: 8,
  systemWords: 1_000,
  turns: 4,
  userWords: 150,
  outputTokens: 64,
  thinkMs: 3_000,
});

/** The cache-pressure workload's defaults; see {@link cachePressureWorkload}. */
export const CACHE_PRESSURE: Readonly<{
  contextTokens: number;
  queryTokens: number;
  demand: number;
  outputTokens: number;
}> = Object.freeze({
  /** Tokens of each tenant's shared context (its system message). */
  contextTokens: 6_000,
  /** Tokens of each query (its user message). */
  queryTokens: 1_200,
  /** Tenants' contexts over the fleet's prefix cache. */
  demand: 0.73,
  /** Tokens each call asks for, as the placement workload's. */
  outputTokens: 64,
});

/**
 * The cache-pressure workload, shaped like llm-d's prefix-cache benchmark: many tenants, each with
 * a long shared context, and queries from their users on top of it, each query new (a single-turn
 * session: only the context can be reused). Tenants are as many as make their contexts `demand` of
 * the fleet's prefix cache (`engines` x `cacheBlocks` blocks), so no engine can hold every
 * context and placement decides which are held where.
 * @throws {RangeError} for a demand outside (0, 10] or a fleet without cache.
 */
export function cachePressureWorkload(
  engines: number,
  cacheBlocks: number,
  demand = CACHE_PRESSURE.demand,
): WorkloadShape {
  if (!(demand > 0 && demand <= 10)) throw new RangeError(`demand must be above 0 and at most 10, got ${demand}`);
  if (!(engines >= 1 && cacheBlocks >= 1))
    throw new RangeError(`the fleet needs engines and cache blocks, got ${engines} x ${cacheBlocks}`);
  const contextBlocks = Math.floor(CACHE_PRESSURE.contextTokens / BLOCK_SIZE);
  return Object.freeze({
    model: 'sim-8b',
    systemPrompts: Math.max(1, Math.round((demand * engines * cacheBlocks) / contextBlocks)),
    // Each message is `role: content`: two tokens beside its words.
    systemWords: CACHE_PRESSURE.contextTokens - 2,
    turns: 1,
    userWords: CACHE_PRESSURE.queryTokens - 2,
    outputTokens: CACHE_PRESSURE.outputTokens,
    thinkMs: 3_000,
  });
}

/** The share of a fleet's prefix cache (`engines` x `cacheBlocks`) that `shape`'s system prompts fill. */
export function cacheDemandOf(shape: WorkloadShape, engines: number, cacheBlocks: number): number {
  const contextBlocks = Math.floor(promptTokensOf(shape, 1).shared / BLOCK_SIZE);
  return (shape.systemPrompts * contextBlocks) / (engines * cacheBlocks);
}

/** One call of a trace. */
export interface TraceCall {
  /** When the call is due, ms from the start of the trace. */
  readonly at: number;
  /** Session number, unique within the trace (and across traces with another seed). */
  readonly session: number;
  /** Turn within the session, from 1. */
  readonly turn: number;
  /** Which system prompt the session uses. */
  readonly system: number;
}

/** What a trace covers. */
export interface TraceOptions {
  /** Calls per second, on average, once sessions of every age are running. */
  readonly rate: number;
  /** Length of the trace, ms: calls due in [0, durationMs). */
  readonly durationMs: number;
  /** Seeds session arrivals and their words; another seed gives other sessions. */
  readonly seed: number;
  /** Most calls in the trace, whatever the rate says (a bound for the live driver). @default Infinity */
  readonly maxCalls?: number;
  /**
   * Number of the trace's first session; session numbers pick the words of every message. Two
   * traces with one seed and different `firstSession` have the same arrivals and system prompts
   * but conversations no engine has seen, so contenders run one after another on the same engines
   * get equal traffic without inheriting each other's cached histories. @default seed x 1,000,000
   */
  readonly firstSession?: number;
}

/**
 * The calls of a trace, in due order. Sessions start as a Poisson process at `rate / turns` per
 * second, from `(turns - 1) x thinkMs` before the trace begins so that every turn number is
 * present from its first second; turn k of a session is due `(k - 1) x thinkMs` after its start,
 * and only calls due inside the trace are kept. A session that started before the trace therefore
 * appears from a later turn, whose history no engine holds: the first `(turns - 1) x thinkMs` of
 * a trace are its warm-up.
 *
 * Pending calls wait in one queue per turn number (turn k of a later session is never due before
 * turn k of an earlier one) and the earliest head goes next: linear in the calls, where one sorted
 * array was quadratic at the thousands of calls a second a simulated 1,000-runner fleet takes.
 */
export function* traceCalls(shape: WorkloadShape, options: TraceOptions): Generator<TraceCall, void, undefined> {
  const sessionRate = options.rate / shape.turns / 1000;
  const lead = (shape.turns - 1) * shape.thinkMs;
  const random = seededRandom(options.seed);
  const maxCalls = options.maxCalls ?? Infinity;
  const pending = new TurnQueues(shape.turns);
  let emitted = 0;
  let session = (options.firstSession ?? (options.seed >>> 0) * 1_000_000) - 1;
  let start = -lead;
  while (emitted < maxCalls) {
    start += -Math.log(1 - random()) / sessionRate;
    // Sessions start in order, so nothing yet to start can be due before `start`.
    for (
      let next = pending.earliest();
      next !== undefined && next.at <= start && emitted < maxCalls;
      next = pending.earliest()
    ) {
      yield pending.take();
      emitted++;
    }
    if (start >= options.durationMs) break;
    const system = Math.floor(random() * shape.systemPrompts);
    session++;
    for (let turn = 1; turn <= shape.turns; turn++) {
      const at = start + (turn - 1) * shape.thinkMs;
      if (at >= 0 && at < options.durationMs) pending.add({ at, session, turn, system });
    }
  }
  while (pending.earliest() !== undefined && emitted < maxCalls) {
    yield pending.take();
    emitted++;
  }
}

/**
 * One first-in first-out queue per turn number. Calls of one turn arrive in due order, so the
 * earliest pending call is the earliest head; equal times go to the lower session, then the lower
 * turn, which is the order `traceCalls` inserts them in.
 */
class TurnQueues {
  readonly #queues: TraceCall[][];
  readonly #heads: number[];

  constructor(turns: number) {
    this.#queues = Array.from({ length: turns }, () => []);
    this.#heads = new Array<number>(turns).fill(0);
  }

  add(call: TraceCall): void {
    this.#queues[call.turn - 1]!.push(call);
  }

  /** The call {@link take} would return, without taking it. */
  earliest(): TraceCall | undefined {
    const i = this.#earliestQueue();
    return i < 0 ? undefined : this.#queues[i]![this.#heads[i]!];
  }

  /** Removes and returns the earliest call; only after {@link earliest} said there is one. */
  take(): TraceCall {
    const i = this.#earliestQueue();
    const queue = this.#queues[i]!;
    const call = queue[this.#heads[i]!]!;
    this.#heads[i]! += 1;
    // Drop the taken prefix now and then, so a long trace does not keep every call it emitted.
    if (this.#heads[i]! >= 4_096 && this.#heads[i]! * 2 >= queue.length) {
      queue.splice(0, this.#heads[i]!);
      this.#heads[i] = 0;
    }
    return call;
  }

  #earliestQueue(): number {
    let best = -1;
    let bestCall: TraceCall | undefined;
    for (let i = 0; i < this.#queues.length; i++) {
      const call = this.#queues[i]![this.#heads[i]!];
      if (call === undefined) continue;
      if (
        bestCall === undefined ||
        call.at < bestCall.at ||
        (call.at === bestCall.at && call.session < bestCall.session)
      ) {
        best = i;
        bestCall = call;
      }
    }
    return best;
  }
}

/** A chat message as the OpenAI API takes it. */
export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant';
  readonly content: string;
}

const WORDS: readonly string[] = [
  'time',
  'model',
  'light',
  'river',
  'stone',
  'field',
  'grain',
  'wind',
  'cloud',
  'rain',
  'north',
  'south',
  'east',
  'west',
  'road',
  'hill',
  'tree',
  'leaf',
  'root',
  'seed',
  'iron',
  'salt',
  'wool',
  'milk',
  'bread',
  'fire',
  'smoke',
  'ash',
  'snow',
  'ice',
  'bird',
  'fish',
  'horse',
  'sheep',
  'goat',
  'wolf',
  'bear',
  'deer',
  'fox',
  'hare',
  'boat',
  'sail',
  'oar',
  'net',
  'rope',
  'knot',
  'gate',
  'wall',
  'door',
  'roof',
  'lamp',
  'wick',
  'oil',
  'wax',
  'ink',
  'page',
  'book',
  'word',
  'name',
  'song',
  'bell',
  'drum',
  'horn',
  'harp',
];

/** `count` words drawn from `seed`: the same seed gives the same words. */
function words(seed: number, count: number): string {
  const random = seededRandom(seed);
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) out[i] = WORDS[Math.floor(random() * WORDS.length)]!;
  return out.join(' ');
}

// Distinct seeds per kind of text, so a system prompt never equals a user message by accident.
const seedOf = (kind: number, a: number, b = 0): number =>
  (Math.imul(kind, 0x9e3779b1) ^ Math.imul(a + 1, 0x85ebca6b) ^ Math.imul(b + 1, 0xc2b2ae35)) >>> 0;

const systemCache = new Map<number, string>();

/** System prompts kept in {@link systemCache}: a workload of thousands of long contexts would fill memory. */
const SYSTEM_CACHE_ENTRIES = 256;

/** System prompt number `system` (cached: the few of them recur in every session). */
function systemPrompt(shape: WorkloadShape, system: number): string {
  const key = system * 1_000_003 + shape.systemWords;
  let text = systemCache.get(key);
  if (text === undefined) {
    if (systemCache.size >= SYSTEM_CACHE_ENTRIES) systemCache.clear();
    text = words(seedOf(1, system), shape.systemWords);
    systemCache.set(key, text);
  }
  return text;
}

/**
 * The messages of a call: the system prompt, then for every earlier turn its user message and the
 * assistant's reply, then this turn's user message. The replies are the driver's stand-ins for what
 * the engine answered: the engine caches prompts, not answers, so what matters for the cache is
 * that every turn resends the same history, which a stand-in does exactly.
 */
export function messagesOf(shape: WorkloadShape, call: TraceCall): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: 'system', content: systemPrompt(shape, call.system) }];
  for (let turn = 1; turn <= call.turn; turn++) {
    messages.push({ role: 'user', content: words(seedOf(2, call.session, turn), shape.userWords) });
    if (turn < call.turn)
      messages.push({ role: 'assistant', content: words(seedOf(3, call.session, turn), shape.outputTokens) });
  }
  return messages;
}

/**
 * The request body of a call: a streamed chat completion of exactly `outputTokens` tokens
 * (`ignore_eos`, vLLM's benchmark switch), with usage in the last event, and the session as
 * OpenAI's `user` so that a hashing placer can keep a session on one runner.
 */
export function bodyOf(shape: WorkloadShape, call: TraceCall): string {
  return JSON.stringify({
    model: shape.model,
    messages: messagesOf(shape, call),
    max_tokens: shape.outputTokens,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
    user: `session-${call.session}`,
  });
}

/**
 * The prompt's token structure as the simulated engine counts it (`role: content` per message,
 * each word and each colon one token): its length, and how many leading tokens are the system
 * message, the part every session with that system prompt shares.
 */
export function promptTokensOf(shape: WorkloadShape, turn: number): { total: number; shared: number } {
  const message = (wordsIn: number): number => 2 + wordsIn;
  const shared = message(shape.systemWords);
  return { total: shared + turn * message(shape.userWords) + (turn - 1) * message(shape.outputTokens), shared };
}

/**
 * The calls of `calls` with every tenant (system prompt) number moved up by `firstTenant`: the
 * same arrivals on contexts no engine has seen, so runs one after another on the same engines
 * each start from their own warm caches rather than the last run's.
 */
export function* onTenants(calls: Iterable<TraceCall>, firstTenant: number): Generator<TraceCall, void, undefined> {
  for (const call of calls) yield { ...call, system: call.system + firstTenant };
}

/**
 * The request body that caches tenant `system`'s context on the engine it is sent to: the
 * context as the system message and a one-word user message, one token out, not streamed. The
 * engine caches the context's full blocks, which every call of the tenant shares.
 */
export function warmBodyOf(shape: WorkloadShape, system: number): string {
  return JSON.stringify({
    model: shape.model,
    messages: [
      { role: 'system', content: systemPrompt(shape, system) },
      { role: 'user', content: WORDS[0] },
    ],
    max_tokens: 1,
  });
}
