/**
 * The CallStore contract as one suite every store runs, so the gateway's detached-call logic can
 * rely on one behaviour whether calls live in memory or in Redis shared by several gateways.
 * The tests live in contract-calls.ts, contract-queued.ts, contract-sharing.ts and
 * contract-bounds.ts; this file runs them.
 */
import { afterEach, describe } from 'vitest';
import type { MakeStore, StoreFixture } from './call-fixtures.ts';
import { boundTests } from './contract-bounds.ts';
import { callTests } from './contract-calls.ts';
import { queuedTests } from './contract-queued.ts';
import { sharingTests } from './contract-sharing.ts';

export type { MakeStore, StoreFixture } from './call-fixtures.ts';

/** Registers the CallStore contract suite for the stores `make` returns. */
export function describeCallStore(name: string, make: MakeStore): void {
  describe(`${name} (CallStore contract)`, () => {
    const fixtures: StoreFixture[] = [];
    const fixture: MakeStore = async (options) => {
      const made = await make(options);
      fixtures.push(made);
      return made;
    };
    afterEach(async () => {
      await Promise.all(fixtures.splice(0).map((f) => f.close()));
    });
    callTests(fixture);
    queuedTests(fixture);
    sharingTests(fixture);
    boundTests(fixture);
  });
}
