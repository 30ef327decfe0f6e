import { describe, expect, it } from 'vitest';
import { barChart } from '../../k6/driver/bar-chart.ts';

const series = [
  { name: 'idle', color: '#111111' },
  { name: 'plateau', color: '#222222' },
];
const text = { title: 'memory <test>', subtitle: 'machine & date', axis: 'RSS, MiB' };
const bars = (svg: string): string[] =>
  [...svg.matchAll(/<rect x="[\d.]+" y="[\d.]+" width="18"[^>]*fill="(#\w+)"/g)].map((m) => m[1]!);

describe('barChart', () => {
  it('draws one bar per finite value, in series colour, and leaves NaN out', () => {
    const svg = barChart(
      [
        {
          title: 'sluice',
          groups: [
            { label: '1000 streams', values: [140, 180] },
            { label: 'settled', values: [Number.NaN, 150] },
          ],
        },
      ],
      series,
      text,
    );
    expect(bars(svg)).toEqual(['#111111', '#222222', '#222222']);
    expect(svg).toContain('>180.0</text>');
    expect(svg).not.toContain('NaN');
  });

  it('centres a group with one bar on its label', () => {
    const svg = barChart([{ title: 'p', groups: [{ label: 'only', values: [Number.NaN, 10] }] }], series, text);
    const bar = /<rect x="([\d.]+)" y="[\d.]+" width="18"/.exec(svg)!;
    const label = /<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" font-weight="bold">only</.exec(svg)!;
    // The rect starts 1 px inside its 20 px slot, so its centre is x + 9.
    expect(Number(bar[1]) + 9).toBeCloseTo(Number(label[1]), 6);
  });

  it('puts each panel on its own scale and escapes text', () => {
    const svg = barChart(
      [
        { title: 'big', groups: [{ label: 'a', values: [400, 450] }] },
        { title: 'small', groups: [{ label: 'b', values: [12, 40] }] },
      ],
      series,
      text,
    );
    expect(svg).toContain('memory &lt;test&gt;');
    expect(svg).toContain('machine &amp; date');
    // Axis ticks: up to 500 for the big panel, in tens for the small one, not a shared 0-500; and
    // the small panel's 40 gets a tick above it, so its label clears the panel's title.
    const ticks = [...svg.matchAll(/text-anchor="end" fill="#555">(\d+)</g)].map((m) => Number(m[1]));
    expect(ticks).toEqual([0, 100, 200, 300, 400, 500, 0, 10, 20, 30, 40, 50]);
  });
});
