/**
 * Batch runners sharing one store on fake clocks, with scripted line calls: each line's result in
 * the store as it ends, the chunks shared between two runners with every line called once, a
 * runner that stops renewing (it died) whose chunks the other takes over, ending the line it had
 * in flight `line_interrupted` rather than calling it again, and a busy answer's Retry-After.
 */
import { describe, expect, it } from 'vitest';
import type { Caller } from '../../../gateway/access/index.ts';
import { BatchRunner } from '../../../gateway/batch/batch-runner.ts';
import type { FleetView } from '../../../gateway/batch/batch-runner.ts';
import { roomyFileKeeper, startChatBatch, storedLines } from './batch-fixtures.ts';
import type { LineAnswer, LineCalls, LineRequest } from '../../../gateway/batch/line-calls.ts';
import { resolveBatchConfig } from '../../../gateway/batch/options.ts';
import { createMemoryBatchStore } from '../../../gateway/store/index.ts';
import type { BatchStore } from '../../../gateway/store/index.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';

const TICK = 100;
const LEASE = 2000;
const OPERATOR: Caller = { kind: 'operator', id: 'op' };

/** Line calls the spec answers, recording the custom ids asked. */
class Calls implements LineCalls {
  readonly asked: Array<{ id: string; answer: (answer?: Partial<LineAnswer>) => void; done?: true }> = [];

  post(request: LineRequest): Promise<LineAnswer> {
    return new Promise((resolve) =>
      this.asked.push({
        id: request.headers['x-request-id']!.split(':')[1]!,
        answer: (answer = {}) =>
          resolve({
            status: 200,
            requestId: undefined,
            contentType: '',
            body: Buffer.from('{}'),
            truncated: false,
            ...answer,
          }),
      }),
    );
  }

  /** Answers every call not answered yet. */
  answerAll(answer?: Partial<LineAnswer>): void {
    for (const a of this.asked.filter((x) => !x.done)) {
      a.done = true;
      a.answer(answer);
    }
  }
}

/** A fleet of `slots` free slots, whatever runs. */
const fleet = (slots: number): FleetView => ({
  runners: () => [{ load: () => ({ inFlight: 0, slots }) }],
  waiting: () => 0,
});

/** The store as a gateway sharing it with others sees it. */
function shared(store: BatchStore): BatchStore {
  return new Proxy(store, {
    get: (target, name) => {
      if (name === 'shared') return true;
      const value = Reflect.get(target, name, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

async function flush(): Promise<void> {
  for (let i = 0; i < 30; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** A runner named `holder` on `store`, on its own clock, with its own calls. */
function runner(store: BatchStore, holder: string, clock: FakeClock, slots = 2) {
  const calls = new Calls();
  const files = roomyFileKeeper(store, clock);
  const run = new BatchRunner({
    store,
    files,
    calls,
    fleet: fleet(slots),
    clock,
    logger: silentLogger,
    config: resolveBatchConfig({ tick: TICK, chunkLines: 2, leaseTtl: LEASE }),
    maxResultBytes: 1 << 20,
    gatewayId: holder,
    holder,
  });
  return { calls, files, run };
}

/** Creates a batch of `n` lines on `r` and starts it there. */
async function start(store: BatchStore, r: ReturnType<typeof runner>, clock: FakeClock, n: number): Promise<string> {
  const ids = Array.from({ length: n }, (_, i) => `c${i}`);
  const record = await startChatBatch({ store, files: r.files, runner: r.run, clock }, OPERATOR, ids, {
    id: 'batch_w',
    owner: 'gw-a',
    runAs: { kind: 'operator', id: 'op' },
  });
  await flush();
  return record.id;
}

describe('batch work on a shared store', () => {
  it("writes each line's result to the store as it ends, before the batch does", async () => {
    const clock = new FakeClock();
    const store = createMemoryBatchStore({ now: () => clock.now() });
    const a = runner(store, 'gw-a', clock, 1);
    const id = await start(store, a, clock, 3);
    a.calls.asked[0]!.done = true;
    a.calls.asked[0]!.answer();
    await flush();
    expect([...(await store.lineResults(id)).keys()]).toEqual(['c0']);
    expect((await store.getBatch(id))!).toMatchObject({ status: 'in_progress', requestCounts: { completed: 1 } });
  });

  it('shares the chunks between two runners, each line called once, and one of them ends the batch', async () => {
    const clock = new FakeClock();
    const store = shared(createMemoryBatchStore({ now: () => clock.now() }));
    const a = runner(store, 'gw-a', clock);
    const b = runner(store, 'gw-b', clock);
    b.run.resume();
    const id = await start(store, a, clock, 12);
    for (let i = 0; i < 40; i++) {
      // The first runner's calls take a while: the other joins within its first poll.
      if (i > 15) a.calls.answerAll();
      b.calls.answerAll();
      clock.advance(TICK);
      await flush();
    }
    const batch = (await store.getBatch(id))!;
    expect(batch.status).toBe('completed');
    const asked = [...a.calls.asked, ...b.calls.asked].map((x) => x.id);
    expect(asked.sort()).toEqual(Array.from({ length: 12 }, (_, i) => `c${i}`).sort());
    expect(a.calls.asked.length).toBeGreaterThan(0);
    expect(b.calls.asked.length).toBeGreaterThan(0);
    expect((await storedLines(store, batch.outputFileId)).map((line) => line.custom_id).sort()).toEqual(asked.sort());
    await Promise.all([a.run.close(0), b.run.close(0)]);
  });

  it("takes over a dead runner's chunks when their lease expires, ending its line in flight interrupted, never calling it again", async () => {
    const clock = new FakeClock();
    // The dead runner's clock stands still: it renews nothing and releases nothing more.
    const stopped = new FakeClock();
    const store = shared(createMemoryBatchStore({ now: () => clock.now() }));
    const a = runner(store, 'gw-a', stopped, 1);
    const id = await start(store, a, stopped, 4);
    expect(a.calls.asked.map((x) => x.id)).toEqual(['c0', 'c1']);
    const b = runner(store, 'gw-b', clock, 4);
    b.run.resume();
    for (let i = 0; i < (LEASE / TICK) * 3; i++) {
      b.calls.answerAll();
      clock.advance(TICK);
      await flush();
    }
    const batch = (await store.getBatch(id))!;
    expect(batch.status).toBe('completed');
    expect(b.calls.asked.map((x) => x.id).sort()).toEqual(['c2', 'c3']);
    const errors = (await store.fileContent(batch.errorFileId!))!
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(errors.map((l) => [l.custom_id, l.error.code])).toEqual([
      ['c0', 'line_interrupted'],
      ['c1', 'line_interrupted'],
    ]);
    // The dead runner's late answers are refused: each line's result is written once.
    a.calls.answerAll();
    await flush();
    expect((await store.getBatch(id))!.requestCounts).toEqual({ total: 4, completed: 2, failed: 2 });
    await b.run.close(0);
  });

  it("waits a busy answer's Retry-After before calling the line again", async () => {
    const clock = new FakeClock();
    const store = createMemoryBatchStore({ now: () => clock.now() });
    const a = runner(store, 'gw-a', clock, 1);
    await start(store, a, clock, 1);
    const busy = Buffer.from(JSON.stringify({ error: { code: 'GW_RATE_LIMITED', message: 'busy' } }));
    a.calls.answerAll({ status: 429, body: busy, retryAfter: 5000 });
    for (let i = 0; i < 45; i++) {
      clock.advance(TICK);
      await flush();
    }
    expect(a.calls.asked).toHaveLength(1);
    for (let i = 0; i < 10; i++) {
      clock.advance(TICK);
      await flush();
    }
    expect(a.calls.asked).toHaveLength(2);
  });
});
