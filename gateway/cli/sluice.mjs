#!/usr/bin/env node
// The `sluice` command. The sources are TypeScript, run through tsx's loader, so a fresh
// clone needs only `npm ci`: no build step stands between an edit and a run.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./main.ts');
const code = await main(process.argv.slice(2), process.env);
// Everything was closed gracefully by now; exit rather than wait on handles we do not own
// (the IPC channel to a parent, telemetry timers).
process.exit(code);
