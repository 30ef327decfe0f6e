/**
 * A hand-written SVG chart of grouped bars: one panel per subject (each with its own scale, so a
 * proxy a tenth the size of another is still readable), one group per condition, one bar per
 * series, each labelled with its value. chart.ts draws latency percentiles of run summaries;
 * this one draws any figures, for scenarios whose measure is not a latency.
 */
import { escapeXml, gridLines, legendEntry, niceScale, panelBase, svgClose, svgOpen, yAxisLabel } from './svg.ts';
import type { PanelLayout } from './svg.ts';

/** One bar colour and its legend entry. */
export interface BarSeries {
  name: string;
  color: string;
}

/** One group of bars: a value per series, in series order; a NaN bar is left out. */
export interface BarGroup {
  label: string;
  /** A second, grey line under the label. */
  note?: string;
  values: readonly number[];
}

/** One panel of groups. */
export interface BarPanel {
  title: string;
  groups: readonly BarGroup[];
}

/** What the chart is of. */
export interface BarChartText {
  title: string;
  /** Machine and date. */
  subtitle: string;
  /** The y axis's label, e.g. `RSS, MiB`. */
  axis: string;
  /** A value as its bar label shows it. @default one decimal */
  format?: (value: number) => string;
}

/** Each panel is as wide as its groups need, and at least `width`. */
const PANELS: PanelLayout = { width: 240, height: 240, top: 84, left: 60, gap: 56 };
const BAR_W = 20;
const GROUP_PAD = 24;
const HEADROOM = 1.1;

/** Renders `panels` side by side, the legend at the top right. */
export function barChart(panels: readonly BarPanel[], series: readonly BarSeries[], text: BarChartText): string {
  const format = text.format ?? ((v: number) => v.toFixed(1));
  const widths = panels.map((p) => Math.max(PANELS.width, p.groups.length * (series.length * BAR_W + GROUP_PAD)));
  const legendW = series.reduce((w, s) => w + 22 + s.name.length * 6.5, 0);
  const width = Math.max(PANELS.left + widths.reduce((a, w) => a + w + PANELS.gap, 0), PANELS.left + legendW + 20);
  const height = PANELS.top + PANELS.height + 56;
  const parts: string[] = svgOpen(width, height, PANELS.left, text.title, text.subtitle);
  let legendX = PANELS.left;
  for (const s of series) {
    parts.push(legendEntry('box', legendX, 58, s));
    legendX += 22 + s.name.length * 6.5;
  }
  let x0 = PANELS.left;
  panels.forEach((p, i) => {
    parts.push(panel(p, series, x0, widths[i]!, text.axis, format));
    x0 += widths[i]! + PANELS.gap;
  });
  return svgClose(parts);
}

function panel(
  p: BarPanel,
  series: readonly BarSeries[],
  x0: number,
  width: number,
  axis: string,
  format: (v: number) => string,
): string {
  const max = Math.max(...p.groups.flatMap((g) => g.values).filter(Number.isFinite), 0.001);
  // A tenth of headroom: a bar at the top of the scale would put its label on the panel's title.
  const { step, top } = niceScale(max * HEADROOM);
  const y = (v: number): number => PANELS.top + PANELS.height - (v / top) * PANELS.height;
  const out: string[] = [
    '<g>',
    `<text x="${x0 + width / 2}" y="${PANELS.top - 8}" text-anchor="middle" font-weight="bold">${escapeXml(p.title)}</text>`,
  ];
  out.push(...gridLines(x0, width, { step, top }, y, (v) => (step >= 1 ? v.toFixed(0) : v.toPrecision(2))));
  out.push(yAxisLabel(x0 - 44, PANELS.top + PANELS.height / 2, axis));
  const groupW = width / Math.max(p.groups.length, 1);
  p.groups.forEach((g, k) => {
    // Only the bars a group has are laid out, centred: a group with one figure shows one bar in its middle.
    const present = series.flatMap((s, b) => (Number.isFinite(g.values[b]) ? [{ s, v: g.values[b]! }] : []));
    const gx = x0 + k * groupW + (groupW - present.length * BAR_W) / 2;
    present.forEach(({ s, v }, b) => {
      const bx = gx + b * BAR_W;
      out.push(
        `<rect x="${bx + 1}" y="${y(v)}" width="${BAR_W - 2}" height="${PANELS.top + PANELS.height - y(v)}" fill="${s.color}"><title>${escapeXml(`${g.label} ${s.name} ${format(v)}`)}</title></rect>`,
      );
      out.push(
        `<text x="${bx + BAR_W / 2}" y="${y(v) - 3}" text-anchor="middle" font-size="9">${escapeXml(format(v))}</text>`,
      );
    });
    const cx = x0 + k * groupW + groupW / 2;
    out.push(
      `<text x="${cx}" y="${PANELS.top + PANELS.height + 16}" text-anchor="middle" font-weight="bold">${escapeXml(g.label)}</text>`,
    );
    if (g.note)
      out.push(
        `<text x="${cx}" y="${PANELS.top + PANELS.height + 30}" text-anchor="middle" fill="#555">${escapeXml(g.note)}</text>`,
      );
  });
  out.push(...panelBase(x0, x0 + width, PANELS.top + PANELS.height));
  return out.join('\n');
}
