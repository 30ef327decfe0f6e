#!/usr/bin/env node
// The `sluice` command. It runs the compiled JavaScript in dist/ (the installed package ships it;
// in a clone, `npm ci` builds it through the prepare script and `npm run build` rebuilds it), and,
// in a clone, the TypeScript sources through tsx (a devDependency) when there is no build, or when
// a source is newer than the build: a stale build never runs, it is only slower to start until
// `npm run build` (a line on stderr says so). It never builds anything itself.
import { existsSync, readdirSync, statSync } from 'node:fs';

const root = new URL('../../', import.meta.url);
const built = new URL('dist/gateway/cli/main.js', root);

/** The newest modification time among the sources the build is made of (tsconfig.build.json). */
function newestSource() {
  let newest = 0;
  for (const dir of ['gateway', 'runner', 'placer', 'k6/driver']) {
    // A deployment may ship the build without the sources: nothing there can be newer.
    if (!existsSync(new URL(`${dir}/`, root))) continue;
    for (const name of readdirSync(new URL(`${dir}/`, root), { recursive: true })) {
      // The dashboard's page, style and script are copied into the build as they are: sources too.
      if (!name.endsWith('.ts') && !name.startsWith('observe/dashboard/static/')) continue;
      newest = Math.max(newest, statSync(new URL(`${dir}/${name}`, root)).mtimeMs);
    }
  }
  return newest;
}

const builtAt = existsSync(built) ? statSync(built).mtimeMs : undefined;
if (builtAt !== undefined && newestSource() <= builtAt) {
  const { main } = await import(built.href);
  const code = await main(process.argv.slice(2), process.env);
  // Everything was closed gracefully by now; exit rather than wait on handles we do not own
  // (the IPC channel to a parent, telemetry timers).
  process.exit(code);
} else {
  if (builtAt !== undefined)
    process.stderr.write(
      'sluice: dist/ is older than the sources; running the sources through tsx (npm run build rebuilds it)\n',
    );
  // Only a clone has the sources and their entry: a copy without a build has nothing to run.
  if (!existsSync(new URL('./tsx-sluice.mjs', import.meta.url))) {
    process.stderr.write(
      'sluice: no build in dist/ and no sources to run; in a clone, `npm run build` builds it and `npm run sluice -- <command>` runs it\n',
    );
    process.exit(1);
  }
  try {
    await import('./tsx-sluice.mjs');
  } catch (error) {
    // A clone whose dependencies were never installed: say what to run rather than how it failed.
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !error.message.includes("'tsx'")) throw error;
    process.stderr.write(
      'sluice: no current build in dist/ and no tsx to run the sources; `npm ci` in the clone installs and builds\n',
    );
    process.exit(1);
  }
}
