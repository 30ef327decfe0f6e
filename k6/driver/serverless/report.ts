/**
 * What the serverless scenario reports: GPU-seconds held against an always-on fleet at the
 * deployment's maximum, the calls that waited for a cold start and what that added to their
 * first token, and every failed call; and its chart, replicas and load on one time axis.
 */
import { TIME_CHART, escapeXml, legend, niceScale, svgClose, svgOpen } from '../svg.ts';
import { formatMs, formatTable } from '../report.ts';
import { distribution } from '../stats.ts';
import type { Distribution } from '../stats.ts';
import type { Phase, ReplicaSample, TracedCall } from './trace.ts';

/** The goal: replicas held under this share of an always-on fleet's, with no failed call. */
export const GPU_SHARE_GOAL = 0.4;

/** The figures of one run. */
export interface ServerlessFigures {
  readonly traceMs: number;
  readonly gpuSeconds: number;
  readonly alwaysOnGpuSeconds: number;
  /** gpuSeconds / alwaysOnGpuSeconds. */
  readonly share: number;
  readonly peakReplicas: number;
  readonly calls: number;
  readonly failed: number;
  readonly failures: Readonly<Record<string, number>>;
  /** Calls the gateway said waited for a replica to start. */
  readonly waited: number;
  readonly coldStartWait: Distribution | undefined;
  readonly ttftWaited: Distribution | undefined;
  readonly ttftWarm: Distribution | undefined;
  /** Median time to first token of the calls that waited, minus that of the calls that did not, ms. */
  readonly addedTtftP50: number | undefined;
  readonly goals: { readonly gpuShare: boolean; readonly noFailedCall: boolean };
}

/**
 * Sums the figures. GPU-seconds integrate the replicas holding an engine (starting, ready or
 * draining) between readings over the trace, at `gpusPerReplica` each.
 */
export function summarizeServerless(
  calls: readonly TracedCall[],
  samples: readonly ReplicaSample[],
  traceMs: number,
  maxReplicas: number,
  gpusPerReplica: number,
): ServerlessFigures {
  let replicaMs = 0;
  let peak = 0;
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i]!;
    const from = Math.max(0, s.ms);
    const to = Math.min(traceMs, samples[i + 1]?.ms ?? traceMs);
    const held = s.starting + s.ready + s.draining;
    if (s.ms <= traceMs) peak = Math.max(peak, held);
    if (to > from) replicaMs += held * (to - from);
  }
  const gpuSeconds = (replicaMs / 1000) * gpusPerReplica;
  const alwaysOnGpuSeconds = (maxReplicas * traceMs * gpusPerReplica) / 1000;
  const failures: Record<string, number> = {};
  for (const c of calls) if (c.error !== undefined) failures[c.error] = (failures[c.error] ?? 0) + 1;
  const failed = calls.filter((c) => c.error !== undefined).length;
  const ok = calls.filter((c) => c.error === undefined && c.ttftMs !== undefined);
  const waited = calls.filter((c) => c.coldStartMs !== undefined);
  const dist = (values: number[]): Distribution | undefined =>
    values.length > 0 ? distribution(values.sort((a, b) => a - b)) : undefined;
  const ttftWaited = dist(ok.filter((c) => c.coldStartMs !== undefined).map((c) => c.ttftMs!));
  const ttftWarm = dist(ok.filter((c) => c.coldStartMs === undefined).map((c) => c.ttftMs!));
  const share = alwaysOnGpuSeconds > 0 ? gpuSeconds / alwaysOnGpuSeconds : 0;
  return {
    traceMs,
    gpuSeconds,
    alwaysOnGpuSeconds,
    share,
    peakReplicas: peak,
    calls: calls.length,
    failed,
    failures,
    waited: waited.length,
    coldStartWait: dist(waited.map((c) => c.coldStartMs!)),
    ttftWaited,
    ttftWarm,
    addedTtftP50: ttftWaited && ttftWarm ? ttftWaited.p50 - ttftWarm.p50 : undefined,
    goals: { gpuShare: share < GPU_SHARE_GOAL, noFailedCall: failed === 0 && calls.length > 0 },
  };
}

/** The figures as text tables. */
export function formatServerless(f: ServerlessFigures): string {
  const d = (x: Distribution | undefined, p: 'p50' | 'p90' | 'max'): string => (x ? formatMs(x[p]) : '-');
  const held = formatTable(
    ['GPU-seconds held', 'always-on at max', 'share', 'goal', 'peak replicas'],
    [
      [
        f.gpuSeconds.toFixed(1),
        f.alwaysOnGpuSeconds.toFixed(1),
        `${(f.share * 100).toFixed(1)} %`,
        `< ${GPU_SHARE_GOAL * 100} % ${f.goals.gpuShare ? 'met' : 'MISSED'}`,
        String(f.peakReplicas),
      ],
    ],
  );
  const calls = formatTable(
    [
      'calls',
      'failed',
      'waited for a cold start',
      'cold-start wait p50 ms',
      'max ms',
      'ttft waited p50 ms',
      'ttft warm p50 ms',
      'added ttft p50 ms',
    ],
    [
      [
        String(f.calls),
        `${f.failed}${f.goals.noFailedCall ? '' : ' (goal: none)'}`,
        String(f.waited),
        d(f.coldStartWait, 'p50'),
        d(f.coldStartWait, 'max'),
        d(f.ttftWaited, 'p50'),
        d(f.ttftWarm, 'p50'),
        f.addedTtftP50 === undefined ? '-' : formatMs(f.addedTtftP50),
      ],
    ],
  );
  const failures = Object.entries(f.failures)
    .map(([code, n]) => `  ${code}: ${n}`)
    .join('\n');
  return `${held}\n\n${calls}${failures ? `\n\nfailed calls by reason:\n${failures}` : ''}`;
}

const { width: W, left: LEFT, right: RIGHT, top: TOP, gap: GAP } = TIME_CHART;
const PANEL_H = 180;

/** Replicas over time above (wanted, held, ready), calls sent and in flight each second below, the burst shaded. */
export function serverlessChart(
  samples: readonly ReplicaSample[],
  calls: readonly TracedCall[],
  phases: readonly Phase[],
  title: string,
  subtitle: string,
): string {
  const traceS = phases.reduce((t, p) => t + p.ms, 0) / 1000;
  const x = (s: number): number => LEFT + (Math.min(Math.max(s, 0), traceS) / traceS) * (W - LEFT - RIGHT);
  const seconds = Math.ceil(traceS);
  const sent = new Array<number>(seconds).fill(0);
  const inFlight = new Array<number>(seconds).fill(0);
  for (const c of calls) {
    const from = c.sentMs / 1000;
    const to = (c.sentMs + c.totalMs) / 1000;
    if (from < seconds) sent[Math.floor(from)]!++;
    for (let s = Math.max(0, Math.ceil(from)); s < Math.min(seconds, to); s++) inFlight[s]!++;
  }
  const height = TOP + 2 * PANEL_H + GAP + 70;
  const parts: string[] = svgOpen(W, height, LEFT, title, subtitle);
  let at = 0;
  for (const p of phases) {
    if (p.rate > 0)
      parts.push(
        `<rect x="${x(at / 1000)}" y="${TOP}" width="${x((at + p.ms) / 1000) - x(at / 1000)}" height="${2 * PANEL_H + GAP}" fill="#4c78a8" opacity="0.08"/>`,
      );
    at += p.ms;
  }
  const replicaSeries = [
    { name: 'wanted', color: '#9d755d', points: samples.map((s) => ({ s: s.ms / 1000, v: s.wanted })) },
    {
      name: 'holding an engine (starting, ready, draining)',
      color: '#e45756',
      points: samples.map((s) => ({ s: s.ms / 1000, v: s.starting + s.ready + s.draining })),
    },
    { name: 'ready', color: '#54a24b', points: samples.map((s) => ({ s: s.ms / 1000, v: s.ready })) },
  ];
  parts.push(panel('replicas', TOP, replicaSeries, x));
  const callSeries = [
    { name: 'calls sent per second', color: '#4c78a8', points: sent.map((v, s) => ({ s: s + 0.5, v })) },
    { name: 'calls in flight', color: '#f58518', points: inFlight.map((v, s) => ({ s, v })) },
  ];
  parts.push(panel('load', TOP + PANEL_H + GAP, callSeries, x));
  for (let s = 0; s <= traceS; s += traceS > 60 ? 20 : 10) {
    parts.push(`<text x="${x(s)}" y="${TOP + 2 * PANEL_H + GAP + 16}" text-anchor="middle" fill="#555">${s}s</text>`);
  }
  const legendGrid = { x: LEFT, y: TOP + 2 * PANEL_H + GAP + 40, perRow: 3, column: 290, row: 16 };
  parts.push(...legend([...replicaSeries, ...callSeries], 'line', legendGrid));
  return svgClose(parts);
}

function panel(
  heading: string,
  top: number,
  series: readonly { name: string; color: string; points: readonly { s: number; v: number }[] }[],
  x: (s: number) => number,
): string {
  const max = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p.v)));
  const { step, top: yTop } = niceScale(max);
  const y = (v: number): number => top + PANEL_H - (v / yTop) * PANEL_H;
  const out = [`<text x="${LEFT}" y="${top - 8}" font-weight="bold">${escapeXml(heading)}</text>`];
  for (let v = 0; v <= yTop + step / 2; v += step) {
    out.push(
      `<line x1="${LEFT}" x2="${W - RIGHT}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/><text x="${LEFT - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${Number(v.toFixed(2))}</text>`,
    );
  }
  for (const s of series) {
    if (s.points.length === 0) continue;
    // A step line: a count holds until the next reading.
    const path = s.points
      .map(
        (p, i) =>
          `${i === 0 ? 'M' : 'H'}${x(p.s).toFixed(1)}${i === 0 ? ` ${y(p.v).toFixed(1)}` : ` V${y(p.v).toFixed(1)}`}`,
      )
      .join(' ');
    out.push(`<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
  }
  return out.join('\n');
}
