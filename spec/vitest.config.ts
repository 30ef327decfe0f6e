import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Integration specs start real processes (engines, runners, gateways) on 127.0.0.1; on a
// shared 2-core machine a start can take seconds, so hooks get room. No test waits on time
// to pass a check: the timeouts only bound how long a broken test hangs.
export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  test: {
    include: ['spec/**/*.spec.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
