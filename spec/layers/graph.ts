import { dirname, join, normalize } from 'node:path';

// The import graph as the layer specs read it: which file imports which, type-only imports and
// re-exports included (a type import ties two files together as surely as a value import does:
// neither can be understood, moved or split without the other), and the cycles in it.

/** Drops comments, so that an import quoted in a TSDoc example is not read as one. */
function withoutComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

/**
 * Every relative module `text` (the source of `file`, a path from the root) imports or
 * re-exports, as paths from the root: `import`, `import type`, `import { type X }`,
 * `export … from`, `export type … from`, `import('…')` and a bare `import '…'` alike.
 */
export function importsIn(file: string, text: string): string[] {
  const found: string[] = [];
  for (const match of withoutComments(text).matchAll(/(?:\bfrom|\bimport)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
    found.push(normalize(join(dirname(file), match[1]!)));
  }
  return found;
}

/** A directed graph: each node and the nodes it points to. */
export type Graph = ReadonlyMap<string, readonly string[]>;

/** An edge between two nodes of different groups, with the groups it leaves and enters. */
export interface CrossEdge {
  readonly node: string;
  readonly target: string;
  readonly from: string;
  readonly to: string;
}

/** Each edge of `graph` from a node in one group to a node in another; nodes in no group are passed over. */
export function* crossEdges(graph: Graph, groupOf: (node: string) => string | undefined): Generator<CrossEdge> {
  for (const [node, targets] of graph) {
    const from = groupOf(node);
    if (from === undefined) continue;
    for (const target of targets) {
      const to = groupOf(target);
      if (to !== undefined && to !== from) yield { node, target, from, to };
    }
  }
}

/** The graph between groups of nodes: an edge from a's group to b's for each edge a → b across groups. */
export function groupGraph(graph: Graph, groupOf: (node: string) => string | undefined): Map<string, string[]> {
  const out = new Map<string, Set<string>>();
  for (const { from, to } of crossEdges(graph, groupOf)) out.set(from, (out.get(from) ?? new Set()).add(to));
  return new Map([...out].map(([k, v]) => [k, [...v].sort()]));
}

/** Strongly connected components of more than one node, or of one node pointing at itself. */
function tangles(graph: Graph): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let top: string;
    do {
      top = stack.pop()!;
      onStack.delete(top);
      component.push(top);
    } while (top !== node);
    if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort());
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return found;
}

/** One shortest way round from `start` back to itself, staying inside `within`. */
function loopFrom(graph: Graph, start: string, within: ReadonlySet<string>): string[] {
  const cameFrom = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const next of graph.get(node) ?? []) {
      if (!within.has(next)) continue;
      if (next === start) {
        const path = [node];
        while (path[0] !== start) path.unshift(cameFrom.get(path[0]!)!);
        return [...path, start];
      }
      if (!cameFrom.has(next)) {
        cameFrom.set(next, node);
        queue.push(next);
      }
    }
  }
  return [start];
}

/**
 * The cycles of `graph`, one per tangle of nodes that reach each other, each written as a way
 * round: `a -> b -> c -> a`. Empty when the graph has none.
 */
export function cycles(graph: Graph): string[] {
  return tangles(graph).map((component) => loopFrom(graph, component[0]!, new Set(component)).join(' -> '));
}

/**
 * The cycles between groups of nodes (folders, rooms), each hop shown with one edge that makes
 * it: `a -> b (x imports y) -> a (z imports w)`. Empty when the groups import one way.
 */
export function groupCycles(graph: Graph, groupOf: (node: string) => string | undefined): string[] {
  const witness = (from: string, to: string): string => {
    for (const [node, targets] of graph) {
      if (groupOf(node) !== from) continue;
      const target = targets.find((t) => groupOf(t) === to);
      if (target !== undefined) return `${node} imports ${target}`;
    }
    return '?';
  };
  return cycles(groupGraph(graph, groupOf)).map((loop) => {
    const hops = loop.split(' -> ');
    return hops.map((group, i) => (i === 0 ? group : `${group} (${witness(hops[i - 1]!, group)})`)).join(' -> ');
  });
}

/** Every folder holding a node of `graph` or a folder above one, the root ('') included. */
function foldersOf(graph: Graph): string[] {
  const found = new Set<string>(['']);
  for (const node of graph.keys()) {
    for (let dir = dirname(node); dir !== '.'; dir = dirname(dir)) found.add(dir);
  }
  return [...found].sort();
}

/**
 * The part of `folder` that `path` is in, or undefined outside it: the subfolder it is below
 * (everything under it together) or, loose in `folder`, the file itself. A folder of `apart`
 * below `folder` is a part on its own wherever it stands, at every level above it.
 */
function partIn(folder: string, path: string, apart: readonly string[]): string | undefined {
  const prefix = folder === '' ? '' : `${folder}/`;
  if (!path.startsWith(prefix)) return undefined;
  const own = apart.find((dir) => dir.startsWith(prefix) && path.startsWith(`${dir}/`));
  if (own !== undefined) return own.slice(prefix.length);
  return path.slice(prefix.length).split('/')[0];
}

/**
 * The cycles between folders, at every level: inside each folder, between its subfolders and
 * its loose files (a loose file is a part of its own, so a folder's face, index.ts, may import
 * its subfolders that import its errors.ts). Each is written `[folder] a -> b (x imports y) -> a
 * (…)`, the root as `.`; `apart` names folders that count as parts of their own at every level
 * above them (a composition root sitting inside a side it stands above). Empty when every
 * folder's parts import one way.
 */
export function folderCycles(graph: Graph, apart: readonly string[] = []): string[] {
  return foldersOf(graph).flatMap((folder) =>
    groupCycles(graph, (path) => partIn(folder, path, apart)).map((loop) => `[${folder || '.'}] ${loop}`),
  );
}
