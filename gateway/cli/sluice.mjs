#!/usr/bin/env node
// The `sluice` command. It runs the compiled JavaScript in dist/ when that build is present
// (`npm ci` builds it through the prepare script; `npm run build` rebuilds it), and the
// TypeScript sources through tsx otherwise (a checkout without `npm ci`). The build is not
// checked against the sources: after editing a source, rebuild or delete dist/.
import { existsSync } from 'node:fs';

const built = new URL('../../dist/gateway/cli/main.js', import.meta.url);
if (existsSync(built)) {
  const { main } = await import(built.href);
  const code = await main(process.argv.slice(2), process.env);
  // Everything was closed gracefully by now; exit rather than wait on handles we do not own
  // (the IPC channel to a parent, telemetry timers).
  process.exit(code);
} else {
  await import('./tsx-sluice.mjs');
}
