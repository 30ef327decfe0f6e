/**
 * The batch runner on a fake clock, with scripted line calls and a scripted fleet: how many
 * lines the window releases as slots free, a line per key in turn, busy answers retried after
 * their delay and never written, expiry and cancel letting the running lines finish, and a
 * gateway stopping mid-batch.
 */
import { describe, expect, it } from 'vitest';
import type { Caller } from '../../../gateway/access/index.ts';
import type { ClientKey } from '../../../gateway/access/scopes.ts';
import { BatchRunner } from '../../../gateway/batch/batch-runner.ts';
import type { FleetView } from '../../../gateway/batch/batch-runner.ts';
import { roomyFileKeeper, startChatBatch, storedLines } from './batch-fixtures.ts';
import type { LineAnswer, LineCalls, LineRequest } from '../../../gateway/batch/line-calls.ts';
import { resolveBatchConfig } from '../../../gateway/batch/options.ts';
import { createMemoryBatchStore } from '../../../gateway/store/index.ts';
import type { BatchStore } from '../../../gateway/store/index.ts';
import { silentLogger } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { newBatchRecord } from '../../support/batch-record.ts';

const TICK = 100;
const DAY = 24 * 3_600_000;

/** Line calls that wait until the spec answers them. */
class ScriptedCalls implements LineCalls {
  readonly asked: Array<{ request: LineRequest; answer: (answer?: Partial<LineAnswer>) => void }> = [];

  post(request: LineRequest): Promise<LineAnswer> {
    return new Promise((resolve) =>
      this.asked.push({
        request,
        answer: (answer = {}) =>
          resolve({
            status: 200,
            requestId: request.headers['x-request-id'],
            contentType: 'application/json',
            body: Buffer.from('{"ok":true}'),
            truncated: false,
            ...answer,
          }),
      }),
    );
  }

  /** The custom ids asked so far, in order. */
  get ids(): string[] {
    return this.asked.map((a) => a.request.headers['x-request-id']!.split(':')[1]!);
  }

  /** Answers the oldest unanswered call. */
  answerNext(answer?: Partial<LineAnswer>): void {
    const next = this.asked.find((a) => !(a as { done?: true }).done);
    (next as { done?: true }).done = true;
    next!.answer(answer);
  }
}

/**
 * A fleet of `slots[model]` slots per model that places the outstanding line calls on them, in
 * the order asked, and keeps the rest waiting in the queue as the gateway would; `busy[model]`
 * slots are taken by other work.
 */
function fleet(calls: ScriptedCalls, slots: Record<string, number>, busy: Record<string, number>) {
  const outstanding = () => calls.asked.filter((a) => !(a as { done?: true }).done).length;
  const free = (model: string) => Math.max(0, (slots[model] ?? 0) - (busy[model] ?? 0));
  const view: FleetView = {
    runners: (model) => [
      {
        load: () => ({ inFlight: Math.min(outstanding(), free(model)) + (busy[model] ?? 0), slots: slots[model] ?? 0 }),
      },
    ],
    waiting: (model) => Math.max(0, outstanding() - free(model)),
  };
  return { ...view, busy };
}

const key = (id: string, limits: ClientKey['limits'] = {}): Caller => ({
  kind: 'client',
  key: { id, name: id, limits } as ClientKey,
});

/** Lets every promise chain that can run, run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

interface Setup {
  clock: FakeClock;
  store: BatchStore;
  calls: ScriptedCalls;
  /** Slots of the fleet other work takes, by model. */
  busy: Record<string, number>;
  runner: BatchRunner;
  /** Uploads lines for `owner` and starts a batch over them; resolves with its id. */
  batch(owner: Caller, ids: string[]): Promise<string>;
}

/** A runner and its batches over a fleet of `slots`, `busy` of them taken by other work. */
function setup(slots: Record<string, number> = { m: 1 }, busy: Record<string, number> = {}): Setup {
  const clock = new FakeClock();
  const store = createMemoryBatchStore({ now: () => clock.now() });
  const calls = new ScriptedCalls();
  const view = fleet(calls, slots, { ...busy });
  const files = roomyFileKeeper(store, clock);
  const runner = new BatchRunner({
    store,
    files,
    calls,
    fleet: view,
    clock,
    logger: silentLogger,
    config: resolveBatchConfig({ tick: TICK }),
    maxResultBytes: 1 << 20,
    gatewayId: 'gw-1',
    holder: 'gw-1.a',
  });
  let n = 0;
  const batch = async (owner: Caller, ids: string[]) => {
    const record = await startChatBatch({ store, files, runner, clock }, owner, ids, { id: `batch_${++n}` });
    await flush();
    return record.id;
  };
  return { clock, store, calls, busy: view.busy, runner, batch };
}

const ids = (n: number, prefix = 'l') => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe('BatchRunner', () => {
  it('releases as many lines as there are free slots, and one more parked, then one per line that ends', async () => {
    const s = setup({ m: 3 });
    const id = await s.batch(key('k1'), ids(10));
    expect(s.calls.asked).toHaveLength(4);
    expect((await s.store.getBatch(id))!.status).toBe('in_progress');
    s.calls.answerNext();
    await flush();
    expect(s.calls.asked).toHaveLength(5);
    // Other work took every slot: the lines that end leave one parked line and no more.
    s.busy.m = 3;
    for (let i = 0; i < 4; i++) s.calls.answerNext();
    await flush();
    s.clock.advance(TICK);
    await flush();
    expect(s.calls.asked).toHaveLength(6);
    // The other work ended: the window opens to the free slots again, at the next tick.
    s.busy.m = 0;
    s.clock.advance(TICK);
    await flush();
    expect(s.calls.asked).toHaveLength(9);
  });

  it('sends each line in the batch class with its batch and custom id as request id', async () => {
    const s = setup();
    const id = await s.batch(key('k1'), ['only']);
    expect(s.calls.asked[0]!.request.headers).toEqual({ 'sluice-priority': 'batch', 'x-request-id': `${id}:only` });
    expect(s.calls.asked[0]!.request.path).toBe('/v1/chat/completions');
    expect(JSON.parse(s.calls.asked[0]!.request.body.toString())).toEqual({ model: 'm' });
  });

  it('takes a line from each key in turn, whatever the size of their batches', async () => {
    const s = setup({ m: 1 }, { m: 1 });
    await s.batch(key('big'), ids(50, 'big'));
    await s.batch(key('small'), ids(3, 'small'));
    // One parked line at a time: each end releases the next, alternating keys.
    for (let i = 0; i < 6; i++) {
      s.calls.answerNext();
      await flush();
    }
    const order = s.calls.ids.map((x) => x.replace(/\d+$/, ''));
    expect(order.slice(0, 7)).toEqual(['big', 'small', 'big', 'small', 'big', 'small', 'big']);
  });

  it("holds a key's lines in flight to half its concurrentCalls, leaving the rest to its interactive calls", async () => {
    const s = setup({ m: 10 });
    await s.batch(key('k1', { concurrentCalls: 4 }), ids(10));
    expect(s.calls.asked).toHaveLength(2);
    s.calls.answerNext();
    await flush();
    expect(s.calls.asked).toHaveLength(3);
    await s.batch(key('k2', { concurrentCalls: 1 }), ids(3, 'other'));
    expect(s.calls.ids.filter((id) => id.startsWith('other'))).toEqual(['other0']);
  });

  it('puts a line answered busy back, runs it again after the delay, and writes its result once', async () => {
    const s = setup({ m: 1 }, { m: 1 });
    const id = await s.batch(key('k1'), ['a', 'b']);
    const busy = Buffer.from(JSON.stringify({ error: { code: 'PLACER_TIMEOUT', message: 'busy' } }));
    s.calls.answerNext({ status: 503, body: busy });
    await flush();
    expect(s.calls.ids).toEqual(['a']);
    s.clock.advance(1000);
    await flush();
    expect(s.calls.ids).toEqual(['a', 'a']);
    s.calls.answerNext();
    await flush();
    s.calls.answerNext({ status: 500, body: Buffer.from('{"error":{"code":"GW_ENGINE_ERROR"}}') });
    await flush();
    const batch = (await s.store.getBatch(id))!;
    expect(batch.status).toBe('completed');
    expect(batch.requestCounts).toEqual({ total: 2, completed: 1, failed: 1 });
    expect((await storedLines(s.store, batch.outputFileId)).map((l) => l.custom_id)).toEqual(['a']);
    const errors = await storedLines(s.store, batch.errorFileId);
    expect(errors.map((l) => [l.custom_id, l.response.status_code])).toEqual([['b', 500]]);
  });

  it('expires at the end of its window with what completed; the running line finishes, the rest are listed batch_expired', async () => {
    const s = setup({ m: 1 }, { m: 1 });
    const id = await s.batch(key('k1'), ids(4));
    expect(s.calls.ids).toEqual(['l0']);
    s.clock.advance(DAY);
    await flush();
    expect((await s.store.getBatch(id))!.status).toBe('in_progress');
    s.calls.answerNext();
    await flush();
    expect(s.calls.ids).toEqual(['l0']);
    const batch = (await s.store.getBatch(id))!;
    expect(batch.status).toBe('expired');
    expect(batch.requestCounts).toEqual({ total: 4, completed: 1, failed: 3 });
    expect((await storedLines(s.store, batch.outputFileId)).map((l) => l.custom_id)).toEqual(['l0']);
    const errors = await storedLines(s.store, batch.errorFileId);
    expect(errors.map((l) => [l.custom_id, l.response, l.error.code])).toEqual([
      ['l1', null, 'batch_expired'],
      ['l2', null, 'batch_expired'],
      ['l3', null, 'batch_expired'],
    ]);
  });

  it('cancels at once: cancelling while a line runs, cancelled when it ends, no line started after', async () => {
    const s = setup({ m: 1 });
    const id = await s.batch(key('k1'), ids(5));
    expect(s.calls.ids).toEqual(['l0', 'l1']);
    const cancelling = await s.runner.cancel(id);
    expect(cancelling?.status).toBe('cancelling');
    s.calls.answerNext();
    // Neither the slot it freed nor the ticks release another line.
    for (const wait of [flush, () => s.clock.advance(TICK * 5), flush]) await wait();
    expect((await s.store.getBatch(id))!.status).toBe('cancelling');
    s.calls.answerNext();
    await flush();
    expect(s.calls.asked).toHaveLength(2);
    const batch = (await s.store.getBatch(id))!;
    expect(batch.status).toBe('cancelled');
    expect(batch.requestCounts).toEqual({ total: 5, completed: 2, failed: 0 });
    expect(s.runner.stats().batches).toEqual({ cancelled: 1 });
  });

  it('stops a batch another gateway marked cancelling in the shared store, within a second', async () => {
    const s = setup({ m: 1 }, { m: 1 });
    const id = await s.batch(key('k1'), ids(4));
    await s.store.updateBatch(id, { status: 'cancelling', cancellingAt: s.clock.now() });
    for (let i = 0; i < 10; i++) {
      s.clock.advance(TICK);
      await flush();
    }
    s.calls.answerNext();
    await flush();
    expect(s.calls.ids).toEqual(['l0']);
    expect((await s.store.getBatch(id))!.status).toBe('cancelled');
  });

  it("fails a batch of this gateway's that it does not run (it ran before a restart) when it is read", async () => {
    const s = setup();
    const record = newBatchRecord(s.clock.now(), {
      id: 'batch_orphan',
      inputFileId: 'file-x',
      status: 'in_progress',
      requestCounts: { total: 3, completed: 1, failed: 0 },
    });
    await s.store.putBatch(record);
    expect(await s.runner.settled(record)).toMatchObject({
      status: 'failed',
      errors: [{ code: 'gateway_restarted' }],
      requestCounts: { total: 3, completed: 1, failed: 0 },
    });
    // Another gateway's batch is left to it.
    const other = { ...record, id: 'batch_other', owner: 'gw-2' };
    await s.store.putBatch(other);
    expect((await s.runner.settled(other)).status).toBe('in_progress');
  });

  it('fails the batches still running when the gateway stops, naming why', async () => {
    const s = setup({ m: 1 }, { m: 1 });
    const id = await s.batch(key('k1'), ids(3));
    const closed = s.runner.close(60_000);
    s.calls.answerNext();
    await closed;
    const batch = (await s.store.getBatch(id))!;
    expect(batch.status).toBe('failed');
    expect(batch.errors).toEqual([
      { code: 'gateway_stopped', message: 'the gateway stopped before the batch finished' },
    ]);
    expect(s.calls.asked).toHaveLength(1);
  });
});
