import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { read, root, sources } from './sources.ts';

// The bench (k6/) measures the product from outside, as a package user would use it: it reaches
// gateway/, runner/ and placer/ only through their public faces, so a refactor inside a side
// cannot break the bench, and the faces show everything the bench relies on.

/** The product's entry points the bench may import, as paths from the repository root. */
const ENTRY_POINTS: readonly string[] = ['gateway/index.ts', 'runner/index.ts', 'placer/index.ts'];

/** Every relative module `text` (the file `file`) imports, re-exports or loads, as a path from the root. */
function importsOf(file: string, text: string): string[] {
  const found: string[] = [];
  for (const match of text.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
    found.push(relative(root, join(root, dirname(file), match[1]!)));
  }
  return found;
}

/** Each import of `file` that leaves k6/ for anything but an entry point, as `file imports target`. */
function breaches(file: string, text: string): string[] {
  return importsOf(file, text)
    .filter((target) => !target.startsWith('k6/') && !ENTRY_POINTS.includes(target))
    .map((target) => `${file} imports ${target}`);
}

describe('the bench reaches the product only through its entry points', () => {
  it('imports nothing outside k6/ but gateway/index.ts, runner/index.ts and placer/index.ts', () => {
    expect(sources('k6').flatMap((file) => breaches(file, read(file)))).toEqual([]);
  });

  it('does use the entry points (the rule reads real imports)', () => {
    const targets = new Set(sources('k6').flatMap((file) => importsOf(file, read(file))));
    for (const entry of ENTRY_POINTS) expect(targets).toContain(entry);
  });

  it.each([
    ["import { WaitQueue } from '../../../gateway/calls/wait-queue.ts';", 'gateway/calls/wait-queue.ts'],
    ["import type { Setting } from '../../../gateway/cli/settings.ts';", 'gateway/cli/settings.ts'],
    ["export { BLOCK_SIZE } from '../../../runner/engines/sim/prefix-cache.ts';", 'runner/engines/sim/prefix-cache.ts'],
    ["const kernel = await import('../../../placer/kernel/index.ts');", 'placer/kernel/index.ts'],
  ])('sees a breach in %s', (line, target) => {
    expect(breaches('k6/driver/vsim/sluice.ts', line)).toEqual([`k6/driver/vsim/sluice.ts imports ${target}`]);
  });

  it('lets the entry points and the bench itself through', () => {
    const text = ["import { WaitQueue } from '../../../gateway/index.ts';", "import { load } from '../load.ts';"].join(
      '\n',
    );
    expect(breaches('k6/driver/vsim/sluice.ts', text)).toEqual([]);
  });
});
