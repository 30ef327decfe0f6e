/**
 * A hand-written SVG line chart of placement cost against pool size, log scale on both axes so
 * a cost that grows linearly with the pool reads as a slope of one and a flat one as flat. One
 * panel per measurement (the placer's order alone, the whole walk), one line per placer.
 */
import { escapeXml, svgClose, svgOpen, yAxisLabel } from './svg.ts';

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
const PANEL_W = 380;
const PANEL_H = 260;
const TOP = 70;
const LEFT = 64;
const GAP = 64;

/** Renders the chart; `sizes` are the pool sizes (the x axis), shared by every panel. */
export function costChart(
  sizes: readonly number[],
  panels: readonly CostPanel[],
  title: string,
  subtitle: string,
): string {
  const width = LEFT + panels.length * (PANEL_W + GAP);
  const names = [...new Set(panels.flatMap((p) => p.series.map((s) => s.name)))];
  const height = TOP + PANEL_H + 50 + 16 * Math.ceil(names.length / 3);
  const all = panels.flatMap((p) => p.series.flatMap((s) => s.costs)).filter((v) => Number.isFinite(v) && v > 0);
  const lo = Math.floor(Math.log10(Math.min(...all, 1)));
  const hi = Math.ceil(Math.log10(Math.max(...all, 10)));
  const parts = svgOpen(width, height, LEFT, title, subtitle);
  panels.forEach((panel, p) => {
    const x0 = LEFT + p * (PANEL_W + GAP);
    const x = (i: number): number => x0 + (sizes.length > 1 ? (i / (sizes.length - 1)) * PANEL_W : PANEL_W / 2);
    const y = (v: number): number => TOP + PANEL_H - ((Math.log10(v) - lo) / Math.max(hi - lo, 1)) * PANEL_H;
    parts.push(
      `<text x="${x0 + PANEL_W / 2}" y="${TOP - 10}" text-anchor="middle" font-weight="bold">${escapeXml(panel.title)}</text>`,
    );
    for (let e = lo; e <= hi; e++) {
      const v = 10 ** e;
      parts.push(`<line x1="${x0}" x2="${x0 + PANEL_W}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`);
      parts.push(
        `<text x="${x0 - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${v >= 1 ? v.toLocaleString('en-US') : v}</text>`,
      );
    }
    sizes.forEach((size, i) =>
      parts.push(
        `<text x="${x(i)}" y="${TOP + PANEL_H + 16}" text-anchor="middle" fill="#555">${size.toLocaleString('en-US')}</text>`,
      ),
    );
    parts.push(
      `<text x="${x0 + PANEL_W / 2}" y="${TOP + PANEL_H + 32}" text-anchor="middle" fill="#555">runners in the pool</text>`,
    );
    parts.push(yAxisLabel(x0 - 48, TOP + PANEL_H / 2, 'µs per call'));
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
  names.forEach((name, i) => {
    const lx = LEFT + (i % 3) * 180;
    const ly = TOP + PANEL_H + 52 + 16 * Math.floor(i / 3);
    parts.push(
      `<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/><text x="${lx + 16}" y="${ly}">${escapeXml(name)}</text>`,
    );
  });
  return svgClose(parts);
}
