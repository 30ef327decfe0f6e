import { readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { read, root, sources } from './sources.ts';

// The layers of docs/architecture.md, checked on the source: kernel -> placer -> runner ->
// gateway, with the bench (k6/) beside them. A rule broken here is a seam someone will trip on.

/** Every relative module a file imports or re-exports, as a path from the repository root. */
function importsOf(file: string): string[] {
  const text = read(file);
  const found: string[] = [];
  for (const match of text.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
    found.push(relative(root, join(root, dirname(file), match[1]!)));
  }
  return found;
}

function breaches(dir: string, allowed: (target: string) => boolean): string[] {
  return sources(dir).flatMap((file) =>
    importsOf(file)
      .filter((target) => !allowed(target))
      .map((target) => `${file} imports ${target}`),
  );
}

const inside = (prefix: string) => (target: string) => target.startsWith(prefix);

/** The gateway's rooms (docs/architecture.md), the CLI aside: one concern each, an index.ts its face. */
const GATEWAY_ROOMS: readonly string[] = ['access', 'calls', 'control', 'detached', 'fleet', 'http', 'observe'];

describe('layers', () => {
  it('the kernel imports nothing outside itself', () => {
    expect(breaches('placer/kernel', inside('placer/kernel/'))).toEqual([]);
  });

  it('placer/ imports only itself (the kernel included)', () => {
    expect(breaches('placer', inside('placer/'))).toEqual([]);
  });

  it('runner/ imports only itself and the kernel (and package.json for its version)', () => {
    const allowed = (t: string) => t.startsWith('runner/') || t.startsWith('placer/kernel/') || t === 'package.json';
    expect(breaches('runner', allowed)).toEqual([]);
  });

  it('gateway/ never imports the bench, except the bench command (loaded on demand) reaching its face', () => {
    const allowed = (t: string) => !t.startsWith('k6/');
    const found = breaches('gateway', allowed);
    expect(found.filter((b) => b !== 'gateway/cli/bench-command.ts imports k6/driver/index.ts')).toEqual([]);
    // The one exception is real: `sluice bench` finds the bench through it.
    expect([...new Set(found)]).toEqual(['gateway/cli/bench-command.ts imports k6/driver/index.ts']);
  });

  it('gateway/ keeps at its root only the composition root, its options, its errors and its public face', () => {
    const entries = readdirSync(join(root, 'gateway'), { withFileTypes: true });
    const loose = entries.filter((e) => e.isFile()).map((e) => e.name);
    expect(loose.sort()).toEqual(['errors.ts', 'index.ts', 'options.ts', 'server.ts']);
  });

  it('gateway/ is made of its rooms, each but the CLI with an index.ts as its public face', () => {
    const entries = readdirSync(join(root, 'gateway'), { withFileTypes: true });
    const rooms = entries.filter((e) => e.isDirectory()).map((e) => e.name);
    expect(rooms.sort()).toEqual([...GATEWAY_ROOMS, 'cli'].sort());
    for (const room of GATEWAY_ROOMS) expect(sources(`gateway/${room}`)).toContain(`gateway/${room}/index.ts`);
  });

  it('the call store and the callbacks import nothing else from gateway/', () => {
    for (const dir of ['gateway/detached/store', 'gateway/detached/callbacks']) {
      expect(breaches(dir, (t) => !t.startsWith('gateway/') || t.startsWith(`${dir}/`))).toEqual([]);
    }
  });

  it('the rule itself sees a breach', () => {
    // A guard against a regex that matches nothing: runner/ does import the kernel.
    expect(sources('runner').flatMap(importsOf).some((t) => t.startsWith('placer/kernel/'))).toBe(true);
  });
});
