/**
 * The bench's shared SVG pieces (k6/driver/svg.ts): where side-by-side panels stand, and the
 * legend's entries laid out in rows with their swatch.
 */
import { describe, expect, it } from 'vitest';
import { legend, legendEntry, panelLeft } from '../../k6/driver/svg.ts';

describe('panelLeft', () => {
  it('puts each panel a width and a gap right of the one before; past the last, the chart ends', () => {
    const layout = { width: 300, height: 200, top: 60, left: 50, gap: 40 };
    expect([0, 1, 2].map((i) => panelLeft(layout, i))).toEqual([50, 390, 730]);
  });
});

describe('legendEntry', () => {
  it.each([
    [
      'line' as const,
      '<line x1="10" x2="28" y1="16" y2="16" stroke="#123" stroke-width="3"/><text x="34" y="20">a &lt;b&gt;</text>',
    ],
    ['box' as const, '<rect x="10" y="10" width="12" height="12" fill="#123"/><text x="26" y="20">a &lt;b&gt;</text>'],
  ])('draws a %s swatch before the escaped name, on the baseline given', (swatch, svg) => {
    expect(legendEntry(swatch, 10, 20, { name: 'a <b>', color: '#123' })).toBe(svg);
  });
});

describe('legend', () => {
  it('fills rows of perRow entries, column apart, then starts the next row a row lower', () => {
    const entries = ['a', 'b', 'c'].map((name) => ({ name, color: '#000' }));
    const grid = { x: 100, y: 50, perRow: 2, column: 80, row: 16 };
    expect(legend(entries, 'box', grid)).toEqual([
      legendEntry('box', 100, 50, entries[0]!),
      legendEntry('box', 180, 50, entries[1]!),
      legendEntry('box', 100, 66, entries[2]!),
    ]);
  });
});
