#!/usr/bin/env node
// The production build: tsconfig.build.json compiled (JavaScript and declarations) into dist/,
// with the dashboard's static files copied beside it. `npm run build` runs it, and so does npm's
// prepare step (`npm ci` or `npm install` in a clone, a git dependency, `npm pack`), except for
// `npx sluice` run in this clone: npm 10 packs the clone to run its bin and runs prepare first,
// with the output hidden, so a minute-long compile would start without a word. Then it builds
// nothing and says so; the bin runs a build made before, or names the command that makes one.
// (npx of a git dependency still builds: the clone npm made is not the project npx runs in.)
//
//   node gateway/cli/build.mjs [--out-dir <dir>] [--prepare]
//
// --out-dir builds elsewhere (a spec's temporary package); --prepare marks npm's prepare step.
import { spawnSync } from 'node:child_process';
import { cpSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = fileURLToPath(new URL('../../', import.meta.url));
const { values } = parseArgs({ options: { 'out-dir': { type: 'string' }, prepare: { type: 'boolean' } } });

/** True when npm runs this from npx (or `npm exec`) in this very clone. */
function npxHere() {
  const project = process.env.npm_config_local_prefix;
  if (process.env.npm_command !== 'exec' || project === undefined) return false;
  try {
    return realpathSync(project) === realpathSync(root);
  } catch {
    return false;
  }
}

if (values.prepare && npxHere()) {
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
