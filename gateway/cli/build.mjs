#!/usr/bin/env node
// The production build: tsconfig.build.json compiled (JavaScript and declarations) into dist/,
// with the dashboard's static files copied beside it. `npm run build` runs it, and so does npm's
// prepare step (`npm ci` or `npm install` in a clone, a git dependency, `npm pack`), except under
// npx: `npx sluice` in a clone packs the clone into npm's npx cache and runs prepare there, with
// its output hidden, so a minute-long compile would start without a word. Under npx it builds
// nothing and says so; the bin then runs a build made before, or names the command that makes one.
//
//   node gateway/cli/build.mjs [--out-dir <dir>] [--prepare]
//
// --out-dir builds elsewhere (a spec's temporary package); --prepare marks npm's prepare step.
import { spawnSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = fileURLToPath(new URL('../../', import.meta.url));
const { values } = parseArgs({ options: { 'out-dir': { type: 'string' }, prepare: { type: 'boolean' } } });

if (values.prepare && process.env.npm_command === 'exec') {
  process.stderr.write('sluice: not building under npx; `npm run build` in the clone builds dist/\n');
  process.exit(0);
}

const outDir = resolve(values['out-dir'] ?? resolve(root, 'dist'));
rmSync(outDir, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const built = spawnSync(process.execPath, [tsc, '-p', resolve(root, 'tsconfig.build.json'), '--outDir', outDir], {
  stdio: 'inherit',
});
if (built.status !== 0) process.exit(built.status ?? 1);
cpSync(resolve(root, 'gateway/observe/dashboard/static'), resolve(outDir, 'gateway/observe/dashboard/static'), {
  recursive: true,
});
