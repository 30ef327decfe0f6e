/**
 * A hand-written SVG line chart of placement cost against pool size, log scale on both axes so
 * a cost that grows linearly with the pool reads as a slope of one and a flat one as flat. One
 * panel per measurement (the placer's order alone, the whole walk), one line per placer.
 */
import { escapeXml, legend, panelLeft, svgClose, svgOpen, yAxisLabel } from './svg.ts';
import type { PanelLayout } from './svg.ts';

/** One placer's costs at each pool size, µs per call, in the order of the sizes. */
export interface CostSeries {
  name: string;
  costs: readonly number[];
}

/** One panel: a title and a series per placer. */
export interface CostPanel {
  title: string;
  series: readonly CostSeries[];
}

const COLORS = ['#4c78a8', '#f58518', '#54a24b', '#e45756', '#b279a2', '#9d755d'];
const PANELS: PanelLayout = { width: 380, height: 260, top: 70, left: 64, gap: 64 };

/** Renders the chart; `sizes` are the pool sizes (the x axis), shared by every panel. */
export function costChart(
  sizes: readonly number[],
  panels: readonly CostPanel[],
  title: string,
  subtitle: string,
): string {
  const width = panelLeft(PANELS, panels.length);
  const names = [...new Set(panels.flatMap((p) => p.series.map((s) => s.name)))];
  const height = PANELS.top + PANELS.height + 50 + 16 * Math.ceil(names.length / 3);
  const all = panels.flatMap((p) => p.series.flatMap((s) => s.costs)).filter((v) => Number.isFinite(v) && v > 0);
  const lo = Math.floor(Math.log10(Math.min(...all, 1)));
  const hi = Math.ceil(Math.log10(Math.max(...all, 10)));
  const parts = svgOpen(width, height, PANELS.left, title, subtitle);
  panels.forEach((panel, p) => {
    const x0 = panelLeft(PANELS, p);
    const x = (i: number): number =>
      x0 + (sizes.length > 1 ? (i / (sizes.length - 1)) * PANELS.width : PANELS.width / 2);
    const y = (v: number): number =>
      PANELS.top + PANELS.height - ((Math.log10(v) - lo) / Math.max(hi - lo, 1)) * PANELS.height;
    parts.push(
      `<text x="${x0 + PANELS.width / 2}" y="${PANELS.top - 10}" text-anchor="middle" font-weight="bold">${escapeXml(panel.title)}</text>`,
    );
    for (let e = lo; e <= hi; e++) {
      const v = 10 ** e;
      parts.push(`<line x1="${x0}" x2="${x0 + PANELS.width}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`);
      parts.push(
        `<text x="${x0 - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v >= 1 ? v.toLocaleString('en-US') : v}</text>`,
      );
    }
    sizes.forEach((size, i) =>
      parts.push(
        `<text x="${x(i)}" y="${PANELS.top + PANELS.height + 16}" text-anchor="middle" fill="#555">${size.toLocaleString('en-US')}</text>`,
      ),
    );
    parts.push(
      `<text x="${x0 + PANELS.width / 2}" y="${PANELS.top + PANELS.height + 32}" text-anchor="middle" fill="#555">runners in the pool</text>`,
    );
    parts.push(yAxisLabel(x0 - 48, PANELS.top + PANELS.height / 2, 'µs per call'));
    for (const s of panel.series) {
      const color = COLORS[names.indexOf(s.name) % COLORS.length]!;
      const points = s.costs
        .map((v, i) => (Number.isFinite(v) && v > 0 ? `${x(i).toFixed(1)},${y(v).toFixed(1)}` : undefined))
        .filter((pt) => pt !== undefined);
      parts.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2" points="${points.join(' ')}"><title>${escapeXml(s.name)}</title></polyline>`,
      );
      for (const pt of points) {
        const [cx, cy] = pt.split(',');
        parts.push(`<circle cx="${cx}" cy="${cy}" r="3" fill="${color}"/>`);
      }
    }
  });
  const entries = names.map((name, i) => ({ name, color: COLORS[i % COLORS.length]! }));
  parts.push(
    ...legend(entries, 'box', { x: PANELS.left, y: PANELS.top + PANELS.height + 52, perRow: 3, column: 180, row: 16 }),
  );
  return svgClose(parts);
}
