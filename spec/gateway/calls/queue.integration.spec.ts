/**
 * The wait queue over real processes: 3 runners with 2 slots each, their simulated engines
 * appending every call they start to one call log, so the order in which calls started is read
 * from the engines themselves. One burst per property, a little over two fleets' worth of calls
 * so that the queue holds more than a fleet's worth; the orders of longer queues are tables on
 * the fake clock in wait-queue.spec.ts.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { asOperator, chatBody, eventually, getJson, startFleet } from '../../support/fleet.ts';
import type { Fleet } from '../../support/fleet.ts';

const dir = mkdtempSync(join(tmpdir(), 'sluice-queue-'));
const log = join(dir, 'calls.log');
let fleet: Fleet | undefined;
afterAll(async () => {
  await fleet?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Call ids in the order the engines started them (a call the runner refused is not started). */
function started(): string[] {
  let text = '';
  try {
    text = readFileSync(log, 'utf8');
  } catch {
    return [];
  }
  const lines = text
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' '));
  const refused = new Set(lines.filter(([, what]) => what === 'refused').map(([id]) => id));
  return lines.filter(([id, what]) => what === 'start' && !refused.has(id)).map(([id]) => id!);
}

async function waiting(gw: string): Promise<number> {
  return (await getJson(`${gw}/v1/queue`, asOperator)).json.waiting as number;
}

/**
 * Sends one call and resolves with its id once the gateway has it in hand: started on an engine
 * or waiting in the queue. Sent one after another, the calls' arrival order is the send order.
 */
async function send(
  gw: string,
  sent: Promise<string>[],
  base: number,
  headers: Record<string, string> = {},
): Promise<void> {
  const before = base + sent.length;
  sent.push(
    request(`${gw}/v1/chat/completions`, {
      method: 'POST',
      body: chatBody(),
      headers: { 'content-type': 'application/json', ...headers },
    }).then(async (res) => {
      await res.body.dump();
      expect(res.statusCode).toBe(200);
      return res.headers['sluice-call-id'] as string;
    }),
  );
  // A woken call walking the pool is briefly in neither count; it lands in one of them.
  await eventually(
    async () => started().length + (await waiting(gw)) >= before + 1,
    10_000,
    `call ${before} started or queued`,
  );
}

/** The fleet's slots: 3 runners with 2 each. */
const SLOTS = 6;
/** Calls sent in each burst: the slots' worth, and eight more that wait. */
const BURST = SLOTS + 8;
/**
 * How far apart the first calls take their slots (see {@link sendAll}): wider than the stalls a
 * busy machine gives an engine process, which could end two calls together.
 */
const SPREAD_MS = 200;

/**
 * Sends `count` calls in order. The first {@link SLOTS} take the slots {@link SPREAD_MS} apart, so
 * that calls end, and waiters are woken into the freed slots, that far apart too: two calls woken
 * within a millisecond of each other go to two runners and may reach their engines in either
 * order, and the engines' log would then show the network's order instead of the queue's.
 */
async function sendAll(
  gw: string,
  sent: Promise<string>[],
  base: number,
  count: number,
  headers: Record<string, string> = {},
): Promise<void> {
  for (let i = 0; i < count; i++) {
    await send(gw, sent, base, headers);
    if (i < SLOTS) await new Promise((r) => setTimeout(r, SPREAD_MS));
  }
}

describe('the wait queue on real processes', () => {
  let gw = '';
  beforeEach(async () => {
    if (fleet) return;
    fleet = await startFleet({
      nodes: 3,
      // Calls of 3 s: the slots are still all held when the last call of a burst arrives.
      engineArgs: ['--ttft-ms', '0', '--itl-ms', '40', '--output-tokens', '75', '--call-log', log],
      runnerArgs: ['--slots', '2'],
      // Status probes would wake waiters too (free slots in a report), and two calls placed at
      // once on two runners may reach their engines in either order: with probes out of the way
      // the engines' log shows the queue's own order, woken one by one as calls end.
      gatewayArgs: ['--default-priority', 'batch', '--status-interval', '1m'],
    });
    gw = fleet.gateway.url;
  }, 60_000);

  it(`starts ${BURST} calls of one priority sent in a burst in their arrival order`, async () => {
    const sent: Promise<string>[] = [];
    await sendAll(gw, sent, 0, BURST);
    const ids = await Promise.all(sent);
    expect(started()).toEqual(ids);
    expect(await waiting(gw)).toBe(0);
  }, 60_000);

  it(`starts an interactive call sent after ${BURST} batch calls before every batch call still waiting`, async () => {
    const before = started().length;
    const sent: Promise<string>[] = [];
    await sendAll(gw, sent, before, BURST, { 'sluice-priority': 'batch' });
    await eventually(async () => (await waiting(gw)) === BURST - SLOTS, 10_000, `${BURST - SLOTS} batch calls waiting`);
    const queue = (await getJson(`${gw}/v1/queue`, asOperator)).json;
    expect(queue.models).toEqual([
      expect.objectContaining({ model: 'sim-small', priority: 'batch', waiting: BURST - SLOTS }),
    ]);
    const interactive = request(`${gw}/v1/chat/completions`, {
      method: 'POST',
      body: chatBody(),
      headers: { 'content-type': 'application/json', 'sluice-priority': 'interactive' },
    }).then(async (res) => {
      await res.body.dump();
      expect(res.statusCode).toBe(200);
      return res.headers['sluice-call-id'] as string;
    });
    const ids = await Promise.all(sent);
    const first = await interactive;
    const order = started().slice(before);
    // Six batch calls took the six slots; the interactive one came next, ahead of the eight that waited.
    expect(order.indexOf(first)).toBe(SLOTS);
    expect(order.filter((id) => id !== first)).toEqual(ids);
  }, 60_000);
});
