/**
 * The soak's chart, hand-written SVG like the others: two panels on one time axis (seconds from
 * the load's start), the gateway's resident memory above and the calls sent each second by
 * outcome below, with every fault window shaded across both, so a reader sees at once whether
 * memory climbed with a fault and whether errors stayed inside the windows.
 */
import { TIME_CHART, escapeXml, legend, niceScale, panelBase, svgClose, svgOpen, yAxisLabel } from '../svg.ts';
import type { SecondCounts } from './ledger.ts';
import type { FaultWindow } from './schedule.ts';

/** One RSS reading, seconds from the load's start (negative before it) and MiB. */
export interface RssPoint {
  readonly s: number;
  readonly mib: number;
}

/** What the chart draws. */
export interface SoakChartData {
  readonly rss: readonly RssPoint[];
  readonly timeline: readonly SecondCounts[];
  readonly windows: readonly FaultWindow[];
  /** When the load stopped sending, seconds from its start. */
  readonly loadEndS: number;
}

const { width: W, left: LEFT, right: RIGHT, top: TOP, gap: GAP } = TIME_CHART;
const PANEL_H = 200;
const OUTCOME_COLORS = { ok: '#54a24b', busy: '#f58518', error: '#e45756' } as const;
const WINDOW_FILL = '#e45756';

/** Renders the chart. */
export function soakChart(data: SoakChartData, title: string, subtitle: string): string {
  const xs = [...data.rss.map((p) => p.s), 0, data.loadEndS, ...data.windows.map((w) => w.endMs / 1000)];
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs, x0 + 1);
  const x = (s: number): number => LEFT + ((s - x0) / (x1 - x0)) * (W - LEFT - RIGHT);
  const height = TOP + 2 * PANEL_H + GAP + 60;
  const parts: string[] = svgOpen(W, height, LEFT, title, subtitle);
  const rssTop = TOP;
  const callsTop = TOP + PANEL_H + GAP;
  data.windows.forEach((w, i) => {
    const a = x(w.injectedMs / 1000);
    const b = x(w.endMs / 1000);
    parts.push(
      `<rect x="${a.toFixed(1)}" y="${rssTop}" width="${Math.max(1, b - a).toFixed(1)}" height="${callsTop + PANEL_H - rssTop}" fill="${WINDOW_FILL}" fill-opacity="0.12"><title>${escapeXml(`${w.kind} ${w.target}: ${w.note}`)}</title></rect>`,
    );
    // Staggered, so the labels of windows that overlap (a short soak's) do not overprint.
    parts.push(
      `<text x="${(a + 3).toFixed(1)}" y="${rssTop + 12 + (i % 2) * 12}" fill="#a33" font-size="10">${escapeXml(w.kind)}</text>`,
    );
  });
  const end = x(data.loadEndS);
  parts.push(
    `<line x1="${end.toFixed(1)}" x2="${end.toFixed(1)}" y1="${rssTop}" y2="${callsTop + PANEL_H}" stroke="#333" stroke-dasharray="4 3"/><text x="${(end + 3).toFixed(1)}" y="${callsTop - 8}" fill="#333" font-size="10">load ends</text>`,
  );
  parts.push(
    panel(
      rssTop,
      'gateway resident memory (VmRSS)',
      'MiB',
      [{ name: 'RSS', color: '#4c78a8', points: data.rss.map((p) => ({ s: p.s, v: p.mib })) }],
      x,
      true,
    ),
  );
  const series = (['ok', 'busy', 'error'] as const).map((key) => ({
    name: key,
    color: OUTCOME_COLORS[key],
    points: data.timeline.map((t) => ({ s: t.second + 0.5, v: t[key] })),
  }));
  parts.push(panel(callsTop, 'calls by outcome, by second sent', 'calls/s', series, x, false));
  const ticks = niceScale(x1 - x0);
  for (let s = Math.ceil(x0 / ticks.step) * ticks.step; s <= x1; s += ticks.step) {
    parts.push(
      `<text x="${x(s).toFixed(1)}" y="${callsTop + PANEL_H + 16}" text-anchor="middle" fill="#555">${s.toFixed(0)}</text>`,
    );
  }
  parts.push(
    `<text x="${(LEFT + W - RIGHT) / 2}" y="${callsTop + PANEL_H + 32}" text-anchor="middle" fill="#555">seconds from the start of the load; shaded: fault windows (injection to recovery + grace)</text>`,
  );
  parts.push(
    ...legend(series, 'line', { x: LEFT, y: callsTop + PANEL_H + 50, perRow: series.length, column: 90, row: 0 }),
  );
  return svgClose(parts);
}

interface Line {
  name: string;
  color: string;
  points: { s: number; v: number }[];
}

function panel(
  top: number,
  heading: string,
  unit: string,
  lines: readonly Line[],
  x: (s: number) => number,
  fromMin: boolean,
): string {
  const values = lines.flatMap((l) => l.points.map((p) => p.v)).filter(Number.isFinite);
  const max = Math.max(...values, 0.001);
  // Memory is read against its own floor, so that a 5 % drift is visible; counts start at 0.
  const floor = fromMin && values.length > 0 ? Math.floor(Math.min(...values) * 0.9) : 0;
  const { step, top: scaleTop } = niceScale(Math.max(max - floor, 0.001));
  const y = (v: number): number => top + PANEL_H - ((v - floor) / scaleTop) * PANEL_H;
  const out: string[] = ['<g>', `<text x="${LEFT}" y="${top - 10}" font-weight="bold">${escapeXml(heading)}</text>`];
  for (let v = 0; v <= scaleTop + step / 2; v += step) {
    out.push(
      `<line x1="${LEFT}" x2="${W - RIGHT}" y1="${y(floor + v).toFixed(1)}" y2="${y(floor + v).toFixed(1)}" stroke="#ddd"/>`,
    );
    out.push(
      `<text x="${LEFT - 6}" y="${(y(floor + v) + 4).toFixed(1)}" text-anchor="end" fill="#555">${(floor + v).toFixed(0)}</text>`,
    );
  }
  out.push(yAxisLabel(LEFT - 48, top + PANEL_H / 2, unit));
  for (const line of lines) {
    const shown = line.points.filter((p) => Number.isFinite(p.v));
    if (shown.length === 0) continue;
    out.push(
      `<polyline fill="none" stroke="${line.color}" stroke-width="1.5" points="${shown.map((p) => `${x(p.s).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ')}"/>`,
    );
  }
  out.push(...panelBase(LEFT, W - RIGHT, top + PANEL_H));
  return out.join('\n');
}
