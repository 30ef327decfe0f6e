/**
 * The pieces every hand-written SVG chart of the bench shares: the frame with its title and
 * subtitle, where panels stand, a round y scale with its grid, the rotated axis label, the base
 * line, the legend, and text made safe for SVG. Each chart (chart.ts, bar-chart.ts,
 * line-chart.ts, cost-chart.ts, soak/chart.ts, serverless/report.ts) lays out its own panels
 * with them.
 */

/** `text` safe inside SVG text and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** A round axis: about five steps of 1, 2 or 5 times a power of ten, topping out above `max`. */
export function niceScale(max: number): { step: number; top: number } {
  const raw = max / 5;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * power >= raw) ?? 10) * power;
  return { step, top: Math.ceil(max / step - 1e-9) * step };
}

/** The opening of a chart `width` by `height`: a white ground, `title` and `subtitle` at `left`. */
export function svgOpen(width: number, height: number, left: number, title: string, subtitle: string): string[] {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${left}" y="20" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<text x="${left}" y="38" fill="#555">${escapeXml(subtitle)}</text>`,
  ];
}

/** Closes the chart `parts` opened by {@link svgOpen} and returns its text. */
export function svgClose(parts: string[]): string {
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/**
 * The grid of a panel from `x0`, `width` wide: a light line and a tick label at every step of
 * `scale` from 0 to its top, `y` placing a value and `label` writing it.
 */
export function gridLines(
  x0: number,
  width: number,
  scale: { step: number; top: number },
  y: (v: number) => number,
  label: (v: number) => string,
): string[] {
  const out: string[] = [];
  for (let v = 0; v <= scale.top + scale.step / 2; v += scale.step) {
    out.push(`<line x1="${x0}" x2="${x0 + width}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`);
    out.push(`<text x="${x0 - 6}" y="${y(v) + 4}" text-anchor="end" fill="#555">${label(v)}</text>`);
  }
  return out;
}

/** A y axis's label, turned to read upwards, centred on (`x`, `y`). */
export function yAxisLabel(x: number, y: number, text: string): string {
  return `<text transform="translate(${x},${y}) rotate(-90)" text-anchor="middle" fill="#555">${escapeXml(text)}</text>`;
}

/** A panel's base line from `x0` to `x1` at `y`, closing the panel's group. */
export function panelBase(x0: number, x1: number, y: number): string[] {
  return [`<line x1="${x0}" x2="${x1}" y1="${y}" y2="${y}" stroke="#333"/>`, '</g>'];
}

/** Where a chart's panels stand: each `width` by `height`, `gap` apart, the first `left` and `top` in from the corner. */
export interface PanelLayout {
  readonly width: number;
  readonly height: number;
  readonly top: number;
  readonly left: number;
  readonly gap: number;
}

/** The left edge of panel `i` of panels side by side; of panel `count`, the width of a chart of `count` panels. */
export function panelLeft(layout: PanelLayout, i: number): number {
  return layout.left + i * (layout.width + layout.gap);
}

/**
 * The frame of the charts over time (soak/chart.ts, serverless/report.ts): 960 wide, its panels
 * stacked on one time axis; each chart chooses its panels' height.
 */
export const TIME_CHART = Object.freeze({ width: 960, left: 70, right: 30, top: 70, gap: 60 });

/** One legend entry: a series' name and its colour. */
export interface LegendEntry {
  readonly name: string;
  readonly color: string;
}

/** How a legend's swatch draws its colour: a short thick line (for lines) or a square (for bars and areas). */
export type Swatch = 'line' | 'box';

/** A legend entry at (`x`, `y`), `y` being its text's baseline. */
export function legendEntry(swatch: Swatch, x: number, y: number, entry: LegendEntry): string {
  const mark =
    swatch === 'line'
      ? `<line x1="${x}" x2="${x + 18}" y1="${y - 4}" y2="${y - 4}" stroke="${entry.color}" stroke-width="3"/>`
      : `<rect x="${x}" y="${y - 10}" width="12" height="12" fill="${entry.color}"/>`;
  return `${mark}<text x="${x + (swatch === 'line' ? 24 : 16)}" y="${y}">${escapeXml(entry.name)}</text>`;
}

/** Where a legend's entries stand: `perRow` a row from (`x`, `y`), `column` apart, rows `row` apart. */
export interface LegendGrid {
  readonly x: number;
  readonly y: number;
  readonly perRow: number;
  readonly column: number;
  readonly row: number;
}

/** A legend of `entries` in rows, each with its swatch. */
export function legend(entries: readonly LegendEntry[], swatch: Swatch, grid: LegendGrid): string[] {
  return entries.map((entry, i) =>
    legendEntry(
      swatch,
      grid.x + (i % grid.perRow) * grid.column,
      grid.y + Math.floor(i / grid.perRow) * grid.row,
      entry,
    ),
  );
}
