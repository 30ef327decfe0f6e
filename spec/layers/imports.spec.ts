import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { crossEdges, cycles, groupCycles, groupGraph, importsIn } from './graph.ts';
import type { Graph } from './graph.ts';
import { PRODUCT, read, root, sources } from './sources.ts';

// The layers of docs/architecture.md, checked on the source: kernel -> placer -> wire ->
// runner, and the wire -> gateway, with the bench (k6/) beside them. Every import counts, type
// imports and re-exports included. A rule broken here is a seam someone will trip on.

/** Every relative module a file imports or re-exports, as a path from the repository root. */
const importsOf = (file: string): string[] => importsIn(file, read(file));

/** The product's import graph: each source file and the files it imports. */
function productGraph(): Graph {
  return new Map(PRODUCT.flatMap(sources).map((file) => [file, importsOf(file)]));
}

/** `file imports target` for each import of a file in `files` that `allowed` refuses. */
function breachesIn(files: readonly string[], allowed: (target: string, file: string) => boolean): string[] {
  return files.flatMap((file) =>
    importsOf(file)
      .filter((target) => !allowed(target, file))
      .map((target) => `${file} imports ${target}`),
  );
}

const breaches = (dir: string, allowed: (target: string, file: string) => boolean): string[] =>
  breachesIn(sources(dir), allowed);

const inside = (prefix: string) => (target: string) => target.startsWith(prefix);

/** The gateway's rooms (docs/architecture.md), the CLI aside: one concern each, an index.ts its face. */
const GATEWAY_ROOMS: readonly string[] = [
  'access',
  'batch',
  'calls',
  'control',
  'detached',
  'fleet',
  'http',
  'observe',
  'tokens',
];

/**
 * Rooms inside a room that stand alone: they import nothing else of the gateway, so every other
 * room may use them, through their own index.ts.
 */
const NESTED_ROOMS: readonly string[] = ['detached/store', 'detached/callbacks'];

/**
 * Where each part of the gateway stands, bottom first: a part imports only parts below it. The
 * root is no room: its errors sit below every room, its resolved options (which the call path and
 * detached calls read) between the rooms they are built from and those two, and server.ts, the
 * composition root, above them all, then index.ts, the face a package user imports; the CLI,
 * which starts gateways and runners, is on top.
 */
const GATEWAY_ORDER: readonly string[] = [
  'detached/store',
  'detached/callbacks',
  'errors.ts',
  'http',
  'tokens',
  'access',
  'observe',
  'fleet',
  'control',
  'options.ts',
  'detached',
  'calls',
  'batch',
  'server.ts',
  'index.ts',
  'cli',
];

/** The part of the gateway a path is in (a room, a nested room or a root file), or undefined outside gateway/. */
function gatewayPart(path: string): string | undefined {
  if (!path.startsWith('gateway/')) return undefined;
  const rest = path.slice('gateway/'.length);
  const nested = NESTED_ROOMS.find((room) => rest.startsWith(`${room}/`));
  return nested ?? rest.split('/')[0];
}

const isRoom = (part: string): boolean => !part.endsWith('.ts');

/** The top-level folder of the product a path is in, for the folders whose order the layers fix. */
const topLevel = (path: string): string | undefined =>
  ['gateway', 'runner', 'placer'].find((dir) => path.startsWith(`${dir}/`));

/**
 * `file imports target` for each import from one room into another that does not name the
 * target room's index.ts. The CLI is let off: it loads each command's modules lazily, by file,
 * so that a command starts without the rooms it does not use; it sits above every room.
 */
function sideDoors(graph: Graph): string[] {
  return [...crossEdges(graph, gatewayPart)]
    .filter(({ target, from, to }) => from !== 'cli' && isRoom(to) && target !== `gateway/${to}/index.ts`)
    .map(({ node, target, to }) => `${node} imports ${target}, not gateway/${to}/index.ts`);
}

/**
 * `file imports target (from -> to)` for each import between parts of the gateway that goes up
 * {@link GATEWAY_ORDER}, or names a part it does not list.
 */
function upwardImports(graph: Graph): string[] {
  const rank = (part: string) => GATEWAY_ORDER.indexOf(part);
  return [...crossEdges(graph, gatewayPart)]
    .filter(({ from, to }) => rank(from) === -1 || rank(to) === -1 || rank(to) > rank(from))
    .map(({ node, target, from, to }) => `${node} imports ${target} (${from} -> ${to})`);
}

describe('layers', () => {
  const graph = productGraph();

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

  it('the wire (runner/protocol/) imports only the kernel and itself (and package.json for the version)', () => {
    const allowed = (t: string) =>
      t.startsWith('runner/protocol/') || t.startsWith('placer/kernel/') || t === 'package.json';
    expect(breaches('runner/protocol', allowed)).toEqual([]);
  });

  it('gateway/ reaches runner/ only through the wire; the CLI, the one composition root, may import both sides', () => {
    // `sluice runner` and `sluice sim-engine` start a runner and the simulator from the CLI,
    // which is why it alone may reach past the wire.
    const allowed = (t: string, file: string) =>
      !t.startsWith('runner/') || t.startsWith('runner/protocol/') || file.startsWith('gateway/cli/');
    expect(breaches('gateway', allowed)).toEqual([]);
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
    for (const room of [...GATEWAY_ROOMS, ...NESTED_ROOMS])
      expect(sources(`gateway/${room}`)).toContain(`gateway/${room}/index.ts`);
  });

  it('the call store and the callbacks import nothing else from gateway/', () => {
    for (const dir of NESTED_ROOMS.map((room) => `gateway/${room}`)) {
      expect(breaches(dir, (t) => !t.startsWith('gateway/') || t.startsWith(`${dir}/`))).toEqual([]);
    }
  });

  it('no two files import each other, however far round, type imports and re-exports included', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('no two of gateway/, runner/ and placer/ import each other, however far round', () => {
    expect(groupCycles(graph, topLevel)).toEqual([]);
  });

  it('no two parts of the gateway import each other, however far round', () => {
    expect(groupCycles(graph, gatewayPart)).toEqual([]);
  });

  it('each part of the gateway imports only the parts below it, in the order of docs/architecture.md', () => {
    expect(upwardImports(graph)).toEqual([]);
  });

  it('a room is entered through its index.ts; inside a room, files import each other directly', () => {
    expect(sideDoors(graph)).toEqual([]);
  });

  it('the rules themselves see planted breaches', () => {
    // A guard against a pattern that matches nothing: runner/ does import the kernel.
    expect(
      sources('runner')
        .flatMap(importsOf)
        .some((t) => t.startsWith('placer/kernel/')),
    ).toBe(true);

    const source = [
      "import type { A } from './a.ts';",
      "import { type B, c } from '../b.ts';",
      "export * from './c.ts';",
      "export type { D } from './d.ts';",
      'export {',
      '  e,',
      "} from './e.ts';",
      "const f = await import('./f.ts');",
      "import './g.ts';",
      "// import { h } from './h.ts';",
      "/** {@link import('./i.ts')} */",
      "import { j } from 'node:fs';",
    ].join('\n');
    expect(importsIn('gateway/x/y.ts', source)).toEqual([
      'gateway/x/a.ts',
      'gateway/b.ts',
      'gateway/x/c.ts',
      'gateway/x/d.ts',
      'gateway/x/e.ts',
      'gateway/x/f.ts',
      'gateway/x/g.ts',
    ]);

    const loop: Graph = new Map([
      ['a', ['b']],
      ['b', ['c', 'd']],
      ['c', ['a']],
      ['d', []],
      ['e', ['e']],
    ]);
    expect(cycles(loop)).toEqual(['a -> b -> c -> a', 'e -> e']);
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', []],
        ]),
      ),
    ).toEqual([]);

    const planted: Graph = new Map([
      [
        'gateway/fleet/pool.ts',
        ['gateway/calls/agent.ts', 'gateway/fleet/breaker.ts', 'gateway/errors.ts', 'gateway/http/index.ts'],
      ],
      [
        'gateway/calls/agent.ts',
        ['gateway/detached/store/types.ts', 'gateway/detached/store/index.ts', 'gateway/fleet/index.ts'],
      ],
      ['gateway/cli/up.ts', ['gateway/access/secrets.ts']],
    ]);
    expect(upwardImports(planted)).toEqual(['gateway/fleet/pool.ts imports gateway/calls/agent.ts (fleet -> calls)']);
    expect(cycles(groupGraph(planted, gatewayPart))).toEqual(['calls -> fleet -> calls']);
    expect(groupCycles(planted, gatewayPart)).toEqual([
      'calls -> fleet (gateway/calls/agent.ts imports gateway/fleet/index.ts) -> calls (gateway/fleet/pool.ts imports gateway/calls/agent.ts)',
    ]);
    expect(sideDoors(planted)).toEqual([
      'gateway/fleet/pool.ts imports gateway/calls/agent.ts, not gateway/calls/index.ts',
      'gateway/calls/agent.ts imports gateway/detached/store/types.ts, not gateway/detached/store/index.ts',
    ]);
    expect(topLevel('runner/protocol/call.ts')).toBe('runner');
    expect(topLevel('k6/driver/stack.ts')).toBeUndefined();
  });
});
