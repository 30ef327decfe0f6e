/**
 * The soak's outcome ledger: every call the driver sent, with when it was due, sent and ended,
 * what came back, and whether its life overlapped a fault window; then the fate of every detached
 * call that was accepted. From it come the soak's goals: no non-busy error outside the fault
 * windows, no detached call lost.
 */
import { distribution } from '../stats.ts';
import type { Distribution } from '../stats.ts';
import { overlapsWindow } from './schedule.ts';
import type { FaultWindow } from './schedule.ts';

/** How a call was made: sync non-streamed, sync streamed (SSE), or detached (`Prefer: respond-async`). */
export type CallKind = 'sync' | 'stream' | 'detached';

/** Every kind, in table order. */
export const CALL_KINDS: readonly CallKind[] = Object.freeze(['sync', 'stream', 'detached']);

/**
 * What a call's answer means for the soak: `ok` (a whole answer, or a detached call's 202),
 * `busy` (the fleet said "not now" with a busy code, which a client retries), `error` (anything
 * else: another status, a stream cut by an error event, no answer), `dropped` (the driver's own
 * in-flight cap was reached, so it never sent the call).
 */
export type Outcome = 'ok' | 'busy' | 'error' | 'dropped';

/** The 503 codes that mean "no room now, retry": load shedding, not a failure. */
const BUSY_CODES: ReadonlySet<string> = new Set(['PLACER_TIMEOUT', 'GW_OVERLOADED']);

/** One call. Times are ms from the load's start. */
export interface LedgerEntry {
  readonly seq: number;
  readonly kind: CallKind;
  readonly dueMs: number;
  readonly sentMs: number;
  readonly endMs: number;
  /** HTTP status; 0 when no answer came (or the call was dropped). */
  readonly status: number;
  /** The error code: the body's `error.code`, a stream's error event's, or a transport error's (`UND_ERR_SOCKET`). */
  readonly code?: string;
  /** The gateway's `sluice-call-id`, when it sent one. */
  readonly callId?: string;
}

/** What {@link classify} needs of an entry. */
type Answer = Pick<LedgerEntry, 'kind' | 'status' | 'code'>;

/** The outcome of an answer; see {@link Outcome}. */
export function classify(answer: Answer): Outcome {
  if (answer.status === 0) return answer.code === 'dropped' ? 'dropped' : 'error';
  if (answer.status === 503 && answer.code !== undefined && BUSY_CODES.has(answer.code)) return 'busy';
  const wanted = answer.kind === 'detached' ? 202 : 200;
  return answer.status === wanted && answer.code === undefined ? 'ok' : 'error';
}

/** A short label for an answer, the key of the outcome table: `200`, `503 PLACER_TIMEOUT`, `UND_ERR_SOCKET`. */
export function outcomeLabel(answer: Answer): string {
  if (answer.status === 0) return answer.code ?? 'no answer';
  return answer.code === undefined ? String(answer.status) : `${answer.status} ${answer.code}`;
}

/** Calls of one kind (or all) by outcome. */
export interface KindCounts {
  sent: number;
  ok: number;
  busy: number;
  error: number;
  dropped: number;
  /** Calls whose life overlapped a fault window. */
  inWindows: number;
  /** Errors (not busy, not dropped) outside every window: the soak's goal is 0. */
  errorsOutside: number;
}

/** One row of the outcome table. */
export interface OutcomeRow {
  label: string;
  outcome: Outcome;
  count: number;
  inWindows: number;
  outside: number;
}

/** Calls sent in one second of the load, by outcome: the chart's lower panel. */
export interface SecondCounts {
  second: number;
  ok: number;
  busy: number;
  error: number;
}

/** The ledger's figures. */
export interface LedgerSummary {
  byKind: Record<CallKind | 'all', KindCounts>;
  outcomes: OutcomeRow[];
  /** End-to-end time of the `ok` sync and stream calls, from their due time, outside and inside the windows. */
  latency: { outside: Distribution; inWindows: Distribution };
  /** The first errors outside every window, for the report (at most {@link EXAMPLES}). */
  errorsOutside: LedgerEntry[];
  timeline: SecondCounts[];
}

/** Most examples kept of any one kind of failure. */
export const EXAMPLES = 20;

/** The record of every call of a soak. */
export class Ledger {
  readonly entries: LedgerEntry[] = [];

  /** Adds one call. */
  record(entry: LedgerEntry): void {
    this.entries.push(entry);
  }

  /** The detached calls that were accepted, with the id to poll. */
  accepted(): LedgerEntry[] {
    return this.entries.filter((e) => e.kind === 'detached' && classify(e) === 'ok' && e.callId !== undefined);
  }

  /** The figures, given the fault windows as they happened. */
  summary(windows: readonly FaultWindow[]): LedgerSummary {
    const zero = (): KindCounts => ({ sent: 0, ok: 0, busy: 0, error: 0, dropped: 0, inWindows: 0, errorsOutside: 0 });
    const byKind = { sync: zero(), stream: zero(), detached: zero(), all: zero() };
    const rows = new Map<string, OutcomeRow>();
    const latency = { outside: [] as number[], inWindows: [] as number[] };
    const errorsOutside: LedgerEntry[] = [];
    const seconds: SecondCounts[] = [];
    for (const e of [...this.entries].sort((a, b) => a.seq - b.seq)) {
      const outcome = classify(e);
      const inWindow = overlapsWindow(windows, e.sentMs, e.endMs);
      for (const counts of [byKind[e.kind], byKind.all]) {
        counts.sent++;
        counts[outcome]++;
        if (inWindow) counts.inWindows++;
        else if (outcome === 'error') counts.errorsOutside++;
      }
      const label = outcomeLabel(e);
      const row = rows.get(label) ?? { label, outcome, count: 0, inWindows: 0, outside: 0 };
      row.count++;
      row[inWindow ? 'inWindows' : 'outside']++;
      rows.set(label, row);
      if (outcome === 'error' && !inWindow && errorsOutside.length < EXAMPLES) errorsOutside.push(e);
      if (outcome === 'ok' && e.kind !== 'detached')
        latency[inWindow ? 'inWindows' : 'outside'].push(e.endMs - e.dueMs);
      if (outcome !== 'dropped') {
        const second = Math.max(0, Math.floor(e.dueMs / 1000));
        while (seconds.length <= second) seconds.push({ second: seconds.length, ok: 0, busy: 0, error: 0 });
        seconds[second]![outcome]++;
      }
    }
    return {
      byKind,
      outcomes: [...rows.values()].sort((a, b) => b.count - a.count || a.label.localeCompare(b.label)),
      latency: { outside: distribution(latency.outside), inWindows: distribution(latency.inWindows) },
      errorsOutside,
      timeline: seconds,
    };
  }
}

/** Statuses a detached call never leaves. */
const TERMINAL_STATUSES: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** What the driver found of one accepted detached call at the end. */
export interface DetachedFate {
  readonly id: string;
  /** The call's last status, `not-found` (404), or `unreadable` when the status route kept failing. */
  readonly status: string;
  /** The call's `error.code`, when it has one. */
  readonly code?: string;
  /** For a `succeeded` call: whether `GET .../result` answered 2xx. */
  readonly result?: boolean;
}

/**
 * Why an accepted detached call counts as lost, or undefined when it is accounted for: it must
 * be terminal, a success with a readable result, anything else with an error code.
 */
export function lostBecause(fate: DetachedFate): string | undefined {
  if (!TERMINAL_STATUSES.has(fate.status))
    return fate.status === 'not-found'
      ? 'not found'
      : fate.status === 'unreadable'
        ? 'status unreadable'
        : `still ${fate.status}`;
  if (fate.status === 'succeeded') return fate.result === true ? undefined : 'succeeded without a result';
  return fate.code === undefined ? `${fate.status} without an error code` : undefined;
}

/** The detached calls' figures. */
export interface DetachedSummary {
  accepted: number;
  /** By final status (`succeeded`, `failed GW_OWNER_LOST`, `not-found`, ...). */
  byStatus: Record<string, number>;
  lost: number;
  /** Lost calls by reason. */
  lostBy: Record<string, number>;
  /** The first lost calls, for the report. */
  lostExamples: (DetachedFate & { why: string })[];
}

/** Summarises the fates of the accepted detached calls. */
export function summarizeDetached(fates: readonly DetachedFate[]): DetachedSummary {
  const byStatus: Record<string, number> = {};
  const lostBy: Record<string, number> = {};
  const lostExamples: (DetachedFate & { why: string })[] = [];
  for (const fate of fates) {
    const key = fate.code === undefined ? fate.status : `${fate.status} ${fate.code}`;
    byStatus[key] = (byStatus[key] ?? 0) + 1;
    const why = lostBecause(fate);
    if (why === undefined) continue;
    lostBy[why] = (lostBy[why] ?? 0) + 1;
    if (lostExamples.length < EXAMPLES) lostExamples.push({ ...fate, why });
  }
  return {
    accepted: fates.length,
    byStatus,
    lost: Object.values(lostBy).reduce((a, b) => a + b, 0),
    lostBy,
    lostExamples,
  };
}

/** Calls that ran more than once, from the engines' call logs (call ids to runs). */
export interface TwiceSummary {
  /** Distinct call ids the engines ran at least once. */
  ran: number;
  /** Ids run more than once. */
  twice: number;
  examples: { id: string; runs: number }[];
  /** Calls answered 503 whose id an engine ran: a retrying client would run them twice. */
  ranButAnswered503: number;
  ranButAnswered503Examples: { id: string; code: string }[];
}

/**
 * Summarises the run counts the engines' call logs give. With `entries`, also counts the calls
 * answered 503 (a status a client retries) that an engine ran all the same: a client that retries
 * one runs it twice, though no engine saw its id twice.
 */
export function summarizeRuns(runs: ReadonlyMap<string, number>, entries: readonly LedgerEntry[] = []): TwiceSummary {
  let ran = 0;
  const twice: { id: string; runs: number }[] = [];
  for (const [id, count] of runs) {
    if (count >= 1) ran++;
    if (count >= 2) twice.push({ id, runs: count });
  }
  const retryable = entries.filter((e) => e.status === 503 && e.callId !== undefined && (runs.get(e.callId) ?? 0) >= 1);
  return {
    ran,
    twice: twice.length,
    examples: twice.slice(0, EXAMPLES),
    ranButAnswered503: retryable.length,
    ranButAnswered503Examples: retryable.slice(0, EXAMPLES).map((e) => ({ id: e.callId!, code: e.code ?? '' })),
  };
}
