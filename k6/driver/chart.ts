/**
 * A hand-written SVG bar chart of latency percentiles: one panel per load mode, one group per
 * target, one bar per percentile, each labelled with its value. Small enough that pulling in a
 * charting library for it would cost more than it saves, and the SVG renders on GitHub as is.
 */
import type { LoadMode, RunSummary } from './record.ts';
import { formatLoad, formatMs } from './report.ts';
import { escapeXml, gridLines, legend, niceScale, panelBase, panelLeft, svgClose, svgOpen, yAxisLabel } from './svg.ts';
import type { PanelLayout } from './svg.ts';

const PERCENTILES = [
  { key: 'p50', color: '#4c78a8' },
  { key: 'p90', color: '#f58518' },
  { key: 'p99', color: '#e45756' },
] as const;

const PANELS: PanelLayout = { width: 380, height: 240, top: 64, left: 56, gap: 48 };
const BAR_W = 22;

/**
 * Renders the chart; `title` goes at the top, `subtitle` (machine, date) under it. `panelTitles`
 * replaces a panel's "closed loop, 32 conn" heading, for scenarios whose two panels are two
 * measures rather than two load modes.
 */
export function latencyChart(
  summaries: readonly RunSummary[],
  title: string,
  subtitle: string,
  panelTitles: Partial<Record<LoadMode, string>> = {},
): string {
  const modes = (['closed', 'open'] as const).filter((m) => summaries.some((s) => s.mode === m));
  const width = panelLeft(PANELS, modes.length);
  const height = PANELS.top + PANELS.height + 70;
  const parts: string[] = [
    ...svgOpen(width, height, PANELS.left, title, subtitle),
    ...legend(
      PERCENTILES.map((p) => ({ name: p.key, color: p.color })),
      'box',
      { x: width - 190, y: 22, perRow: PERCENTILES.length, column: 60, row: 0 },
    ),
  ];
  modes.forEach((mode, i) =>
    parts.push(
      panel(
        summaries.filter((s) => s.mode === mode),
        mode,
        panelLeft(PANELS, i),
        panelTitles[mode],
      ),
    ),
  );
  return svgClose(parts);
}

function panel(rows: readonly RunSummary[], mode: LoadMode, x0: number, heading: string | undefined): string {
  const max = Math.max(...rows.flatMap((r) => PERCENTILES.map((p) => r.latency[p.key])).filter(Number.isFinite), 0.001);
  const { step, top } = niceScale(max);
  const y = (v: number): number => PANELS.top + PANELS.height - (v / top) * PANELS.height;
  const out: string[] = [`<g>`];
  const load = rows[0] ? formatLoad(rows[0]) : '';
  const label = heading ?? (mode === 'closed' ? `closed loop, ${load}` : `open loop, ${load}`);
  out.push(
    `<text x="${x0 + PANELS.width / 2}" y="${PANELS.top - 10}" text-anchor="middle" font-weight="bold">${escapeXml(label)}</text>`,
  );
  out.push(...gridLines(x0, PANELS.width, { step, top }, y, (v) => (step >= 1 ? v.toFixed(0) : formatMs(v))));
  out.push(yAxisLabel(x0 - 40, PANELS.top + PANELS.height / 2, 'latency, ms'));
  const groupW = PANELS.width / Math.max(rows.length, 1);
  rows.forEach((r, g) => {
    const gx = x0 + g * groupW + (groupW - PERCENTILES.length * BAR_W) / 2;
    PERCENTILES.forEach((p, b) => {
      const v = r.latency[p.key];
      if (!Number.isFinite(v)) return;
      const bx = gx + b * BAR_W;
      out.push(
        `<rect x="${bx + 1}" y="${y(v)}" width="${BAR_W - 2}" height="${PANELS.top + PANELS.height - y(v)}" fill="${p.color}"><title>${escapeXml(`${r.target} ${p.key} ${formatMs(v)} ms`)}</title></rect>`,
      );
      out.push(`<text x="${bx + BAR_W / 2}" y="${y(v) - 3}" text-anchor="middle" font-size="9">${formatMs(v)}</text>`);
    });
    const cx = x0 + g * groupW + groupW / 2;
    out.push(
      `<text x="${cx}" y="${PANELS.top + PANELS.height + 16}" text-anchor="middle" font-weight="bold">${escapeXml(r.target)}</text>`,
    );
    const rps = Number.isFinite(r.rps) ? r.rps.toFixed(0) : '-';
    out.push(
      `<text x="${cx}" y="${PANELS.top + PANELS.height + 30}" text-anchor="middle" fill="#555">${rps} req/s${r.errors ? `, ${r.errors} errors` : ''}</text>`,
    );
  });
  out.push(...panelBase(x0, x0 + PANELS.width, PANELS.top + PANELS.height));
  return out.join('\n');
}
