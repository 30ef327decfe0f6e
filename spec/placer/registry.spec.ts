import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PlacerConfigError,
  PlacerNotFoundError,
  builtinPlacers,
  loadPlacer,
  placeCall,
  placerDescriptors,
} from '../../placer/index.ts';
import type { Placer, Runner } from '../../placer/index.ts';
import { FakeClock, Fleet, fakeCall, fakePool } from './fake.ts';

const fixtures = resolve(import.meta.dirname, '../fixtures/placers');

/** Rejection of `loadPlacer(spec, { cwd })`, checked to be an error of `type` with its `code`. */
async function rejection<E extends Error>(
  spec: string,
  cwd: string,
  type: new (m: string) => E,
  code: string,
): Promise<E> {
  const error = await loadPlacer(spec, { cwd }).then(
    () => expect.unreachable(`loadPlacer(${JSON.stringify(spec)}) resolved`),
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(type);
  expect(error).toMatchObject({ code });
  return error as E;
}

/** Rejection of `loadPlacer`, checked to be a PlacerConfigError: a module that is no placer, or bad options. */
const refusal = (spec: string, cwd = fixtures) => rejection(spec, cwd, PlacerConfigError, 'PLACER_INVALID_OPTION');

/** Rejection of `loadPlacer`, checked to be a PlacerNotFoundError: nothing resolves from the spec. */
const notFound = (spec: string, cwd = fixtures) => rejection(spec, cwd, PlacerNotFoundError, 'PLACER_NOT_FOUND');

describe('loadPlacer', () => {
  // Broken modules are written per run rather than kept as fixtures, so the type check never sees them.
  let scratch = '';
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'sluice-placers-'));
    await writeFile(join(scratch, 'empty.mjs'), 'export const other = 1;\n');
    await writeFile(join(scratch, 'nameless.mjs'), 'export default { order: (_c, r) => r };\n');
    await writeFile(join(scratch, 'throws.mjs'), "export default () => { throw new Error('no GPUs listed'); };\n");
    await writeFile(join(scratch, 'syntax.mjs'), 'export default {\n');
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  it.each(Object.keys(builtinPlacers))('returns a fresh %s placer when given its name', async (name) => {
    const first = await loadPlacer(name);
    expect(first.name).toBe(name);
    expect(await loadPlacer(name)).not.toBe(first);
  });

  it('returns the custom placer whose order placeCall follows when given a .ts path', async () => {
    const placer = await loadPlacer('./first-free.ts', { cwd: fixtures });
    expect(placer.name).toBe('first-free');
    const fleet = new Fleet();
    const pool = fakePool(fleet.runners({ a: ['placed'], b: ['placed'], c: ['busy'] }));
    const placement = await placeCall(fakeCall(), pool, placer, { retryAllDelay: 10, clock: new FakeClock() });
    expect(placement.value).toBe('b');
    expect(fleet.offers).toEqual(['c', 'b']);
  });

  it('returns the custom placer when given an absolute path', async () => {
    const placer = await loadPlacer(join(fixtures, 'first-free.ts'), { cwd: '/nonexistent' });
    expect(placer.name).toBe('first-free');
  });

  it('returns the custom placer when given a path relative to the working directory', async () => {
    const placer = await loadPlacer('spec/fixtures/placers/first-free.ts', { cwd: resolve(fixtures, '../../..') });
    expect(placer.name).toBe('first-free');
  });

  it('returns the export named placer when a plain JS module has no default export', async () => {
    const placer = await loadPlacer('./reverse.mjs', { cwd: fixtures });
    expect(placer.name).toBe('reverse');
    const runners = new Fleet().runners({ a: [], b: [], c: [] });
    expect([...placer.order(fakeCall(), runners)].map((r) => r.id)).toEqual(['c', 'b', 'a']);
  });

  it('throws PlacerConfigError naming the spec when the module exports garbage', async () => {
    const error = await refusal('./garbage.ts');
    expect(error.message).toBe('placer "./garbage.ts" does not export an object with order(call, runners)');
  });

  const unknown = ['foo', 'toString', 'least', 'Least-Loaded', '@team/placers'];
  it.each(unknown)('throws PlacerNotFoundError naming the built-ins and the folder when given %s', async (name) => {
    const error = await notFound(name);
    expect(error.message).toBe(
      `placer "${name}" is none of the built-ins (round-robin, consistent-hash, least-loaded, load-weighted, prefix-affinity, kv-aware) and no package ${name} resolves from ${fixtures} (MODULE_NOT_FOUND)`,
    );
  });

  it('throws PlacerNotFoundError naming the file when the module file is missing', async () => {
    const error = await notFound('./missing.mjs');
    expect(error.message).toMatch(/ and there is no module at \/.*\/missing\.mjs \(MODULE_NOT_FOUND\)$/);
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('throws PlacerConfigError with the cause when the module does not parse', async () => {
    const error = await refusal('./syntax.mjs', scratch);
    expect(error.message).toContain('placer "./syntax.mjs" could not be loaded');
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('throws PlacerConfigError when the module has neither a default nor a placer export', async () => {
    const error = await refusal('./empty.mjs', scratch);
    expect(error.message).toBe('placer "./empty.mjs" has neither a default export nor an export named placer');
  });

  it('throws PlacerConfigError when the placer has no name', async () => {
    const error = await refusal('./nameless.mjs', scratch);
    expect(error.message).toBe('placer "./nameless.mjs" does not export an object with a non-empty string name');
  });

  it('throws PlacerConfigError with the cause when the factory throws', async () => {
    const error = await refusal('./throws.mjs', scratch);
    expect(error.message).toBe('placer "./throws.mjs" factory threw: no GPUs listed');
    expect(error.cause).toMatchObject({ message: 'no GPUs listed' });
  });
});

describe('loadPlacer with a package', () => {
  // A project folder whose node_modules holds placer packages of each kind, and a folder inside it.
  let project = '';
  const order = 'order: (_call, runners) => [...runners].reverse()';
  const packages: Record<string, Record<string, string>> = {
    'esm-placer': {
      'package.json': '{"name":"esm-placer","type":"module","exports":{".":{"types":"./i.d.ts","import":"./i.js"}}}',
      'i.js': `export default () => ({ name: 'esm', ${order} });\n`,
    },
    'cjs-placer': {
      'package.json': '{"name":"cjs-placer","main":"lib/main.js"}',
      'lib/main.js': `module.exports = (options) => ({ name: 'cjs-' + options.tag, ${order} });\n`,
    },
    'ts-cjs-placer': {
      'package.json': '{"name":"ts-cjs-placer"}',
      'index.js': `"use strict";\nObject.defineProperty(exports, "__esModule", { value: true });\nexports.default = { name: 'ts-cjs', ${order} };\n`,
    },
    '@team/placers': {
      'package.json': '{"name":"@team/placers","type":"module","exports":{"./sticky":"./sticky.js"}}',
      'sticky.js': `export const placer = { name: 'sticky', ${order} };\n`,
    },
    'no-placer': {
      'package.json': '{"name":"no-placer","main":"index.js"}',
      'index.js': 'module.exports = { other: 1 };\n',
    },
  };
  beforeAll(async () => {
    project = await mkdtemp(join(tmpdir(), 'sluice-placer-packages-'));
    for (const [name, files] of Object.entries(packages)) {
      for (const [file, text] of Object.entries(files)) {
        const path = join(project, 'node_modules', name, file);
        await mkdir(resolve(path, '..'), { recursive: true });
        await writeFile(path, text);
      }
    }
    await mkdir(join(project, 'deploy/gateway'), { recursive: true });
  });
  afterAll(async () => {
    await rm(project, { recursive: true, force: true });
  });

  it.each([
    ['esm-placer', 'an ES module package that exports its entry only to imports', 'esm'],
    ['cjs-placer', 'a CommonJS package whose module.exports is the factory', 'cjs-blue'],
    ['ts-cjs-placer', "a CommonJS package holding the placer as exports.default (TypeScript's output)", 'ts-cjs'],
    ['@team/placers/sticky', 'the subpath of a scoped package, exporting a placer named placer', 'sticky'],
  ])('loads %s: %s', async (spec, _what, name) => {
    const placer = await loadPlacer(spec, { cwd: project, options: { tag: 'blue' } });
    expect(placer.name).toBe(name);
    const runners = new Fleet().runners({ a: [], b: [] });
    expect([...placer.order(fakeCall(), runners)].map((r) => r.id)).toEqual(['b', 'a']);
  });

  it('resolves a package from a folder below the project, as Node does', async () => {
    expect((await loadPlacer('esm-placer', { cwd: join(project, 'deploy/gateway') })).name).toBe('esm');
  });

  it('throws PlacerConfigError when the package exports no placer', async () => {
    const error = await refusal('no-placer', project);
    expect(error.message).toBe('placer "no-placer" does not export an object with order(call, runners)');
  });

  it('throws PlacerNotFoundError when the package does not export the subpath', async () => {
    const error = await notFound('@team/placers/other', project);
    expect(error.message).toMatch(
      / and no package @team\/placers\/other resolves from .* \(ERR_PACKAGE_PATH_NOT_EXPORTED\)$/,
    );
  });
});

describe('loadPlacer options', () => {
  it('passes options to a built-in factory, whose checks name the option', async () => {
    await expect(loadPlacer('consistent-hash', { options: { loadFactor: 0.5 } })).rejects.toThrow(
      'loadFactor must be at least 1, got 0.5',
    );
    const placer = await loadPlacer('least-loaded', { options: { staleAfterMs: 500 } });
    expect(placer.name).toBe('least-loaded');
    await expect(loadPlacer('consistent-hash', { options: { loadfactor: 1.5 } })).rejects.toThrow(
      'placer consistent-hash has no option "loadfactor"; it takes loadFactor',
    );
    await expect(loadPlacer('round-robin', { options: { random: 1 } })).rejects.toThrow(
      'placer round-robin has no option "random"; it takes none',
    );
  });
});

let scratchDir = '';
beforeAll(async () => {
  scratchDir = await mkdtemp(join(tmpdir(), 'sluice-placer-context-'));
  await writeFile(
    join(scratchDir, 'context.mjs'),
    "export default (options, context) => ({ name: 'ctx', got: [options, context], order: (_c, r) => r });\n",
  );
});
afterAll(async () => {
  await rm(scratchDir, { recursive: true, force: true });
});

describe('placer descriptors', () => {
  it('describe every built-in: name, defaults for each option key, and create', () => {
    expect(Object.keys(placerDescriptors)).toEqual(Object.keys(builtinPlacers));
    for (const [name, descriptor] of Object.entries(placerDescriptors)) {
      expect(descriptor.name).toBe(name);
      expect(Object.keys(descriptor.defaults).sort()).toEqual([...descriptor.optionKeys].sort());
      expect(descriptor.create(undefined, { clock: new FakeClock() }).name).toBe(name);
    }
  });

  it.each(['least-loaded', 'load-weighted', 'prefix-affinity'])(
    'make %s read report freshness from the context clock',
    async (name) => {
      const clock = new FakeClock();
      const reported = { running: 4, at: clock.now() };
      const runner = (id: string, report?: typeof reported): Runner => ({
        id,
        tryExec: () => Promise.resolve({ kind: 'busy' }),
        load: () => ({ inFlight: 0, slots: 4, ...(report ? { reported: report } : {}) }),
      });
      const runners = [runner('a', reported), runner('b')];
      const placer = await loadPlacer(name, { options: { staleAfterMs: 100 }, clock });
      const first = (p: Placer) => [...p.order(fakeCall(), runners)][0]!.id;
      // Fresh on the fake clock: a, full, goes after b whatever the draw.
      for (let i = 0; i < 20; i++) expect(first(placer)).toBe('b');
      clock.advance(101);
      // Stale: both read idle, so draws put a first at least once (Date.now would have made it stale from the start).
      const firsts = new Set(Array.from({ length: 40 }, () => first(placer)));
      expect(firsts.has('a')).toBe(true);
    },
  );

  it("hands a module's factory the options and the context", async () => {
    const clock = new FakeClock();
    const placer = (await loadPlacer('./context.mjs', { cwd: scratchDir, options: { weight: 2 }, clock })) as Placer & {
      got: unknown[];
    };
    expect(placer.got).toEqual([{ weight: 2 }, { clock }]);
  });
});
