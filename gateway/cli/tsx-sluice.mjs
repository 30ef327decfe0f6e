#!/usr/bin/env node
// `sluice` on the TypeScript sources through tsx's loader, whether or not a build exists. The
// bin (sluice.mjs) falls back to it without a build, and a process running the sources (the
// specs under vitest, or the fallback itself) starts its sluice children with it, so a test
// always runs the sources under test and never a stale build.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./main.ts');
const code = await main(process.argv.slice(2), process.env);
// Everything was closed gracefully by now; exit rather than wait on handles we do not own
// (the IPC channel to a parent, telemetry timers).
process.exit(code);
