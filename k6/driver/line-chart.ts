/**
 * A hand-written SVG line chart: panels side by side, one line per contender, points labelled
 * with their value. For figures that move with load (time to first token by arrival rate), where
 * the shape of each line says more than any single bar.
 */
import { formatMs } from './report.ts';
import { escapeXml, gridLines, legend, niceScale, panelBase, panelLeft, svgClose, svgOpen, yAxisLabel } from './svg.ts';
import type { PanelLayout } from './svg.ts';

/** One line: a contender's value at each x. */
export interface Series {
  readonly name: string;
  readonly points: readonly { readonly x: number; readonly y: number }[];
}

/** One panel: a heading, an axis label and its lines. */
export interface LinePanel {
  readonly heading: string;
  readonly yLabel: string;
  readonly series: readonly Series[];
}

const COLORS = ['#4c78a8', '#f58518', '#54a24b', '#e45756', '#72b7b2', '#b279a2', '#9d755d', '#eeca3b'];
const PANELS: PanelLayout = { width: 360, height: 260, top: 70, left: 64, gap: 70 };

/**
 * Renders `panels` side by side with one legend; `xLabel` names the shared x axis and `xTick`
 * formats its ticks (the x values of the first panel's points).
 */
export function lineChart(
  panels: readonly LinePanel[],
  title: string,
  subtitle: string,
  xLabel: string,
  xTick: (x: number) => string,
): string {
  const names = [...new Set(panels.flatMap((p) => p.series.map((s) => s.name)))];
  const color = (name: string): string => COLORS[names.indexOf(name) % COLORS.length]!;
  const width = panelLeft(PANELS, panels.length);
  const legendRows = Math.ceil(names.length / 4);
  const height = PANELS.top + PANELS.height + 50 + legendRows * 18;
  const parts: string[] = svgOpen(width, height, PANELS.left, title, subtitle);
  panels.forEach((panel, i) => parts.push(renderPanel(panel, panelLeft(PANELS, i), color, xLabel, xTick)));
  const entries = names.map((name) => ({ name, color: color(name) }));
  parts.push(
    ...legend(entries, 'line', { x: PANELS.left, y: PANELS.top + PANELS.height + 50, perRow: 4, column: 190, row: 18 }),
  );
  return svgClose(parts);
}

/** One panel of a {@link loadChart}: its heading, its axis label and the figure it reads from a run. */
export interface LoadPanel<R> {
  readonly heading: string;
  readonly yLabel: string;
  readonly value: (run: R) => number;
}

/**
 * A line chart of figures by load: x is each run's `level` as a % of capacity; each panel has one
 * line per `lineOf(run)`, in the order the lines first appear in `runs`.
 */
export function loadChart<R extends { readonly level: number }>(
  runs: readonly R[],
  lineOf: (run: R) => string,
  panels: readonly LoadPanel<R>[],
  title: string,
  subtitle: string,
): string {
  const names = [...new Set(runs.map(lineOf))];
  const linePanels = panels.map(({ heading, yLabel, value }) => ({
    heading,
    yLabel,
    series: names.map((name) => ({
      name,
      points: runs.filter((r) => lineOf(r) === name).map((r) => ({ x: r.level * 100, y: value(r) })),
    })),
  }));
  return lineChart(linePanels, title, subtitle, 'load, % of capacity', (v) => `${v.toFixed(0)}%`);
}

function renderPanel(
  panel: LinePanel,
  x0: number,
  color: (name: string) => string,
  xLabel: string,
  xTick: (x: number) => string,
): string {
  const points = panel.series.flatMap((s) => s.points).filter((p) => Number.isFinite(p.y));
  const xs = [...new Set(panel.series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const { step, top } = niceScale(Math.max(...points.map((p) => p.y), 0.001));
  const xMin = xs[0] ?? 0;
  const xMax = xs[xs.length - 1] ?? 1;
  const x = (v: number): number =>
    x0 + 20 + (xMax === xMin ? (PANELS.width - 40) / 2 : ((v - xMin) / (xMax - xMin)) * (PANELS.width - 40));
  const y = (v: number): number => PANELS.top + PANELS.height - (v / top) * PANELS.height;
  const out: string[] = [
    '<g>',
    `<text x="${x0 + PANELS.width / 2}" y="${PANELS.top - 12}" text-anchor="middle" font-weight="bold">${escapeXml(panel.heading)}</text>`,
  ];
  out.push(...gridLines(x0, PANELS.width, { step, top }, y, (v) => (step >= 1 ? v.toFixed(0) : formatMs(v))));
  for (const v of xs)
    out.push(
      `<text x="${x(v)}" y="${PANELS.top + PANELS.height + 16}" text-anchor="middle" fill="#555">${escapeXml(xTick(v))}</text>`,
    );
  out.push(
    `<text x="${x0 + PANELS.width / 2}" y="${PANELS.top + PANELS.height + 32}" text-anchor="middle" fill="#555">${escapeXml(xLabel)}</text>`,
  );
  out.push(yAxisLabel(x0 - 46, PANELS.top + PANELS.height / 2, panel.yLabel));
  for (const s of panel.series) {
    const shown = s.points.filter((p) => Number.isFinite(p.y));
    if (shown.length === 0) continue;
    out.push(
      `<polyline fill="none" stroke="${color(s.name)}" stroke-width="2" points="${shown.map((p) => `${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const p of shown) {
      out.push(
        `<circle cx="${x(p.x).toFixed(1)}" cy="${y(p.y).toFixed(1)}" r="3" fill="${color(s.name)}"><title>${escapeXml(`${s.name} ${xTick(p.x)}: ${formatMs(p.y)}`)}</title></circle>`,
      );
    }
  }
  out.push(...panelBase(x0, x0 + PANELS.width, PANELS.top + PANELS.height));
  return out.join('\n');
}
