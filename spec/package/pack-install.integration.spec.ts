/**
 * The package as a user gets it: the repository's package.json and the files it lists, built the
 * way npm's prepare step builds them (gateway/cli/build.mjs), packed by `npm pack`, and installed
 * by `npm ci --offline` into a temporary project, from npm's cache, with the production
 * dependencies only. Beside it sits a custom placer written as its own TypeScript package, type-
 * checked against the published declarations; `sluice up --placer my-placer`, run from the
 * installed bin, places calls with it.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatBody, postJson } from '../support/fleet.ts';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  version: string;
  files: string[];
  bin: Record<string, string>;
  dependencies: Record<string, string>;
};
/** npm without its update check, audit or log files. */
const NPM_FLAGS = ['--no-audit', '--no-fund', '--no-update-notifier', '--logs-max=0', '--loglevel=error'];

/**
 * The custom placer package: offers runners last first, and writes to a file the order it gave
 * each call (`offer <call id> <runner ids>`) and where each call went (`placed <call id> <runner id>`).
 */
const PLACER_SOURCE = `import { appendFileSync } from 'node:fs';
import type { Placer, PlacerContext, Runner, RunnerCall } from 'sluice/placer';
import { loadOf, readLoad } from 'sluice/placer';

/** Options from --placer-options. */
export interface ReverseOptions {
  /** File the offers and placements are written to, a line each. */
  log: string;
}

export default function createReversePlacer(options: ReverseOptions, { clock }: PlacerContext): Placer {
  return {
    name: 'reverse',
    order<R extends Runner<unknown>>(call: RunnerCall, runners: readonly R[]): R[] {
      // The helpers and the clock type-check too: loads are read against the gateway's clock.
      const loads: number[] = runners.map((runner) => loadOf(readLoad(runner), clock.now()));
      const offers = loads.length > 0 ? [...runners].reverse() : [];
      appendFileSync(options.log, \`offer \${call.id} \${offers.map((r) => r.id).join(',')}\\n\`);
      return offers;
    },
    placed(call: RunnerCall, runner: Runner<unknown>): void {
      appendFileSync(options.log, \`placed \${call.id} \${runner.id}\\n\`);
    },
  };
}
`;

/** The same placer embedded in a gateway of the package's own: the main entry's types. */
const EMBED_SOURCE = `import { type Gateway, createGateway } from 'sluice';
import { systemClock } from 'sluice/placer';
import createReversePlacer from './index.js';

export function reverseGateway(runners: string[], log: string): Gateway {
  return createGateway({ runners, placer: createReversePlacer({ log }, { clock: systemClock }) });
}
`;

/** A placer that breaks the contract, which the published types must refuse. */
const BROKEN_SOURCE = `import type { Placer } from 'sluice/placer';
export const placer: Placer = { name: 'broken', order: (call: string) => [call] };
`;

describe('the packed package', () => {
  let dir = '';
  let project = '';
  let packed: string[] = [];
  let placerBuilt: Promise<unknown> | undefined;
  /** tsc on the placer package, once, for whichever test needs its build first. */
  const buildPlacer = () => (placerBuilt ??= run(process.execPath, [tsc, '-p', join(project, 'my-placer')]));

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-package-'));
    const stage = join(dir, 'stage');
    // Only what package.json lists, and the build the prepare step makes.
    for (const file of ['package.json', 'README.md', ...manifest.files.filter((f) => !f.startsWith('dist'))]) {
      mkdirSync(dirname(join(stage, file)), { recursive: true });
      cpSync(join(root, file), join(stage, file), { recursive: true });
    }
    await run(process.execPath, [join(root, 'gateway/cli/build.mjs'), '--out-dir', join(stage, 'dist')]);
    const { stdout } = await run(
      'npm',
      ['pack', '--json', '--ignore-scripts', '--pack-destination', dir, ...NPM_FLAGS],
      {
        cwd: stage,
      },
    );
    const [pack] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
    packed = pack!.files.map((f) => f.path);
    project = join(dir, 'project');
    writeProject(project, join(dir, pack!.filename));
    await run('npm', ['ci', '--offline', '--ignore-scripts', ...NPM_FLAGS], { cwd: project });
  }, 300_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('holds compiled JavaScript, declarations and the bin, and no TypeScript source or tsx entry', () => {
    expect(packed).toEqual(
      expect.arrayContaining([
        'dist/index.js',
        'dist/index.d.ts',
        'dist/placer/index.js',
        'dist/placer/index.d.ts',
        'dist/gateway/cli/main.js',
        'dist/gateway/observe/dashboard/static/index.html',
        'gateway/cli/sluice.mjs',
        'package.json',
      ]),
    );
    expect(packed.filter((path) => /(?<!\.d)\.ts$/.test(path) || path.includes('tsx'))).toEqual([]);
  });

  it('installs with its production dependencies only, and its bin runs without tsx', async () => {
    expect(existsSync(join(project, 'node_modules/tsx'))).toBe(false);
    const { stdout } = await run(process.execPath, [join(project, 'node_modules/.bin/sluice'), '--help'], {
      cwd: project,
    });
    expect(stdout).toContain(`sluice ${manifest.version}`);
  });

  it('exports the programmatic gateway and runner, and the placer API', async () => {
    const script =
      "const main = await import('sluice'); const placer = await import('sluice/placer');" +
      'console.log([main.createGateway, main.createRunner, placer.loadPlacer, placer.readLoad].map((f) => typeof f).join());';
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: project });
    expect(stdout.trim()).toBe('function,function,function,function');
  });

  it('type-checks a placer package (and a gateway embedding it) against the published types, and refuses one that breaks the contract', async () => {
    const placer = join(project, 'my-placer');
    const [built, broken] = await Promise.allSettled([
      buildPlacer(),
      run(process.execPath, [tsc, '-p', join(placer, 'tsconfig.broken.json')]),
    ]);
    expect(built.status).toBe('fulfilled');
    expect(existsSync(join(placer, 'dist/index.d.ts'))).toBe(true);
    expect(existsSync(join(placer, 'dist/embed.js'))).toBe(true);
    expect(broken.status).toBe('rejected');
    expect(String((broken as PromiseRejectedResult).reason.stdout)).toMatch(/broken\/index\.ts.*error TS2322/);
  }, 120_000);

  it('places calls with `sluice up --placer my-placer`, the package resolved from the working directory', async () => {
    await buildPlacer();
    const log = join(project, 'placed.log');
    const up = startUp(project, ['--placer', 'my-placer', '--placer-options', JSON.stringify({ log })]);
    try {
      const url = await up.url;
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push(await postJson(`${url}/v1/chat/completions`, chatBody()));
      for (const answer of answers) expect(answer.status).toBe(200);
      // The placer was told of every call on the runner that answered it, the first it offered:
      // the last the pool listed.
      const lines = readFileSync(log, 'utf8').trim().split('\n');
      for (const { headers } of answers) {
        const [call, runner] = [headers['sluice-call-id'], headers['sluice-runner-id']];
        expect(lines).toContain(`placed ${call} ${runner}`);
        expect(lines.find((line) => line.startsWith(`offer ${call} `))).toMatch(
          new RegExp(`^offer ${call} ${runner}(,|$)`),
        );
      }
      up.child.kill('SIGINT');
      expect(await up.exited).toBe(0);
    } finally {
      if (up.child.exitCode === null && up.child.signalCode === null) up.child.kill('SIGKILL');
    }
  }, 90_000);
});

describe('without a build', () => {
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-no-build-'));
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    [
      'the bin, copied without a build or the sources, stops with a line naming the command that builds',
      '.',
      ['sluice.mjs'],
      'sluice: no build in dist/ and no sources to run; in a clone, `npm run build` builds it',
    ],
    [
      'the bin in a clone without its dependencies stops with a line naming the command that installs them',
      'clone',
      ['sluice.mjs', 'tsx-sluice.mjs'],
      'sluice: no current build in dist/ and no tsx to run the sources; `npm ci` in the clone',
    ],
  ])('%s', (_name, under, files, message) => {
    const at = join(dir, under);
    mkdirSync(join(at, 'gateway/cli'), { recursive: true });
    for (const file of files) cpSync(join(root, 'gateway/cli', file), join(at, 'gateway/cli', file));
    const ran = spawnSync(process.execPath, [join(at, 'gateway/cli/sluice.mjs'), '--help'], { encoding: 'utf8' });
    expect(ran.status).toBe(1);
    expect(ran.stderr).toContain(message);
  });

  it("npm's prepare step under npx in the clone builds nothing and says so", () => {
    const out = join(dir, 'dist');
    const ran = spawnSync(process.execPath, [join(root, 'gateway/cli/build.mjs'), '--prepare', '--out-dir', out], {
      encoding: 'utf8',
      env: { ...process.env, npm_command: 'exec', npm_config_local_prefix: root },
    });
    expect(ran.status).toBe(0);
    expect(ran.stderr).toContain('sluice: not building under npx');
    expect(existsSync(out)).toBe(false);
  });
});

/**
 * The temporary project: a package.json naming the tarball and the placer package, and a lockfile
 * holding the repository's production dependencies as its own lockfile pins them, so `npm ci
 * --offline` takes every one from npm's cache (which the repository's `npm ci` filled).
 */
function writeProject(project: string, tarball: string): void {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { dev?: boolean }>;
  };
  const dependencies = { sluice: `file:${tarball}`, 'my-placer': 'file:my-placer' };
  const placer = {
    name: 'my-placer',
    version: '1.0.0',
    type: 'module',
    exports: { '.': { types: './dist/index.d.ts', import: './dist/index.js' } },
    peerDependencies: { sluice: `^${manifest.version}` },
  };
  const packages: Record<string, unknown> = {
    '': { name: 'project', dependencies },
    'my-placer': { name: placer.name, version: placer.version, peerDependencies: placer.peerDependencies },
    'node_modules/my-placer': { resolved: 'my-placer', link: true },
    'node_modules/sluice': {
      version: manifest.version,
      resolved: `file:${tarball}`,
      integrity: `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`,
      dependencies: manifest.dependencies,
      bin: manifest.bin,
    },
  };
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path.startsWith('node_modules/') && !entry.dev) packages[path] = entry;
  }
  const files: Record<string, string> = {
    'package.json': JSON.stringify({ name: 'project', private: true, type: 'module', dependencies }),
    'package-lock.json': JSON.stringify({ name: 'project', lockfileVersion: 3, requires: true, packages }),
    'my-placer/package.json': JSON.stringify(placer),
    'my-placer/src/index.ts': PLACER_SOURCE,
    'my-placer/src/embed.ts': EMBED_SOURCE,
    'my-placer/broken/index.ts': BROKEN_SOURCE,
    'my-placer/tsconfig.json': JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        strict: true,
        declaration: true,
        rootDir: 'src',
        outDir: 'dist',
        // The published declarations are checked as the placer's own code is.
        skipLibCheck: false,
        types: ['node'],
        typeRoots: [join(root, 'node_modules/@types')],
      },
      include: ['src'],
    }),
    'my-placer/tsconfig.broken.json': JSON.stringify({
      extends: './tsconfig.json',
      compilerOptions: { noEmit: true, rootDir: 'broken', skipLibCheck: true },
      include: ['broken'],
    }),
  };
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(project, file)), { recursive: true });
    writeFileSync(join(project, file), text);
  }
}

/** `sluice up` on port 0 from the project's installed bin, its token files kept in the project. */
function startUp(
  project: string,
  args: string[],
): { child: ChildProcess; url: Promise<string>; exited: Promise<number | null> } {
  const child = spawn(
    process.execPath,
    [join(project, 'node_modules/.bin/sluice'), 'up', '--port', '0', '--log-level', 'warn', ...args],
    {
      cwd: project,
      env: { ...process.env, XDG_RUNTIME_DIR: project },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = new Promise<string>((resolve, reject) => {
    child.on('message', (m: { type?: string; url?: string }) => {
      if (m?.type === 'listening' && typeof m.url === 'string') resolve(m.url);
    });
    child.once('exit', (code) => reject(new Error(`sluice up exited (${code}) before listening\n${stderr}`)));
  });
  return { child, url, exited };
}
