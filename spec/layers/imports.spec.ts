import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { crossEdges, cycles, folderCycles, groupCycles, groupGraph, importsIn } from './graph.ts';
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
  'callbacks',
  'calls',
  'control',
  'detached',
  'fleet',
  'http',
  'observe',
  'store',
  'tokens',
];

/**
 * Rooms that stand alone: they import nothing else of the gateway, so every other room may use
 * them, through their own index.ts.
 */
const STANDALONE_ROOMS: readonly string[] = ['store', 'callbacks'];

/**
 * The one composition root, which starts gateways, runners and the bench: it sits inside
 * gateway/ but above every side, the bench included, so the folder rule counts it on its own.
 */
const COMPOSITION_ROOT = 'gateway/cli';

/**
 * Where each part of the gateway stands, bottom first: a part imports only parts below it. The
 * root is no room: its errors sit below every room, its resolved options (which the call path and
 * detached calls read) between the rooms they are built from and those two, and server.ts, the
 * composition root, above them all, then index.ts, the face a package user imports; the CLI,
 * which starts gateways and runners, is on top.
 */
const GATEWAY_ORDER: readonly string[] = [
  'store',
  'callbacks',
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

/** The part of the gateway a path is in (a room or a root file), or undefined outside gateway/. */
const gatewayPart = (path: string): string | undefined =>
  path.startsWith('gateway/') ? path.slice('gateway/'.length).split('/')[0] : undefined;

const isRoom = (part: string): boolean => !part.endsWith('.ts');

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

  it('the kernel names no file of the product, not even by path (whoever starts a script names it)', () => {
    const named = /['"`](?:\.\.\/)+(?:gateway|runner|k6)\//;
    expect(sources('placer/kernel').filter((file) => named.test(read(file)))).toEqual([]);
    expect(named.test("new URL('../../gateway/cli/tsx-sluice.mjs', import.meta.url)")).toBe(true);
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
    for (const room of GATEWAY_ROOMS) expect(sources(`gateway/${room}`)).toContain(`gateway/${room}/index.ts`);
  });

  it('the call store and the callbacks import nothing else from gateway/', () => {
    for (const dir of STANDALONE_ROOMS.map((room) => `gateway/${room}`)) {
      expect(breaches(dir, (t) => !t.startsWith('gateway/') || t.startsWith(`${dir}/`))).toEqual([]);
    }
  });

  it('no two files import each other, however far round, type imports and re-exports included', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('no two folders import each other, however far round, at any level (loose files each on their own)', () => {
    expect(folderCycles(graph, [COMPOSITION_ROOT])).toEqual([]);
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
      ['gateway/calls/agent.ts', ['gateway/store/types.ts', 'gateway/store/index.ts', 'gateway/fleet/index.ts']],
      ['gateway/cli/up.ts', ['gateway/access/secrets.ts']],
    ]);
    expect(upwardImports(planted)).toEqual(['gateway/fleet/pool.ts imports gateway/calls/agent.ts (fleet -> calls)']);
    expect(cycles(groupGraph(planted, gatewayPart))).toEqual(['calls -> fleet -> calls']);
    expect(groupCycles(planted, gatewayPart)).toEqual([
      'calls -> fleet (gateway/calls/agent.ts imports gateway/fleet/index.ts) -> calls (gateway/fleet/pool.ts imports gateway/calls/agent.ts)',
    ]);
    expect(sideDoors(planted)).toEqual([
      'gateway/fleet/pool.ts imports gateway/calls/agent.ts, not gateway/calls/index.ts',
      'gateway/calls/agent.ts imports gateway/store/types.ts, not gateway/store/index.ts',
    ]);

    const folders: Graph = new Map([
      ['runner/protocol/status.ts', ['runner/engines/kinds.ts', 'runner/protocol/errors.ts']],
      ['runner/engines/sim/engine.ts', ['runner/protocol/index.ts', 'runner/errors.ts']],
      ['runner/index.ts', ['runner/engines/index.ts']],
      ['runner/engines/argv.ts', ['runner/errors.ts']],
      ['gateway/cli/bench-command.ts', ['k6/driver/index.ts']],
      ['k6/driver/stack.ts', ['gateway/index.ts']],
    ]);
    expect(folderCycles(folders)).toEqual([
      '[.] gateway -> k6 (gateway/cli/bench-command.ts imports k6/driver/index.ts) -> gateway (k6/driver/stack.ts imports gateway/index.ts)',
      '[runner] engines -> protocol (runner/engines/sim/engine.ts imports runner/protocol/index.ts) -> engines (runner/protocol/status.ts imports runner/engines/kinds.ts)',
    ]);
    // The composition root stands above the bench; a face importing its subfolders is no cycle.
    expect(folderCycles(folders, ['gateway/cli'])).toEqual([
      '[runner] engines -> protocol (runner/engines/sim/engine.ts imports runner/protocol/index.ts) -> engines (runner/protocol/status.ts imports runner/engines/kinds.ts)',
    ]);
  });
});
