import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Integration specs start real processes (engines, runners, gateways) on 127.0.0.1; on a
// shared 2-core machine a start can take seconds, so hooks get room. No test waits on time
// to pass a check: the timeouts only bound how long a broken test hangs.
//
// At least two files run at once, even on two cores where vitest's default (cores - 1) is one:
// an integration or fault spec spends most of its time waiting on its processes' timers and
// sockets, and the other worker uses that time. Their bounds are set for a busier machine than
// that makes (the specs pass with two workers beside two busy-loop spinners).
export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['spec/**/*.spec.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
