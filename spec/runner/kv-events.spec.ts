import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encode } from '@msgpack/msgpack';
import { Dealer, Publisher } from 'zeromq';
import { afterEach, describe, expect, it } from 'vitest';
import { createSimEngine } from '../../runner/engines/sim/index.ts';
import type { SimEngine } from '../../runner/engines/sim/index.ts';
import { decodeKvEvents } from '../../runner/kv-events.ts';
import type { KvEvent } from '../../runner/kv-events.ts';
import { blockKey } from '../../runner/protocol/index.ts';
import { eventually } from '../support/fleet.ts';
import { clearUntilHeard, expectMirrorFollows, post, subscribedMirror, words } from '../support/kv-mirror.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const hash = (byte: number): Uint8Array => new Uint8Array(32).fill(byte);
const ok = (events: KvEvent[]) => ({ kind: 'ok', events });

describe('decodeKvEvents', () => {
  it("reads vLLM's array form: tagged arrays in [ts, events, data_parallel_rank], hashes as 32 bytes", () => {
    const payload = encode([
      1.5,
      [
        ['BlockStored', [hash(1), hash(2)], null, [1, 2, 3, 4, 5, 6, 7, 8], 4, null, 'GPU', null],
        ['BlockRemoved', [hash(3)], 'GPU'],
        ['AllBlocksCleared'],
      ],
      0,
    ]);
    expect(decodeKvEvents(payload)).toEqual(
      ok([
        {
          kind: 'stored',
          keys: [blockKey(hash(1)), blockKey(hash(2))],
          parent: null,
          tokens: [1, 2, 3, 4, 5, 6, 7, 8],
          blockSize: 4,
          plain: true,
        },
        { kind: 'removed', keys: [blockKey(hash(3))] },
        { kind: 'cleared' },
      ]),
    );
  });

  it('reads the map form, events tagged by type, and integer hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)', () => {
    const big = 0xfedcba9876543210n;
    const payload = encode(
      {
        ts: 2,
        events: [
          { type: 'BlockStored', block_hashes: [big, 7], parent_block_hash: null, token_ids: [], block_size: 16 },
          { type: 'BlockRemoved', block_hashes: [big] },
        ],
        data_parallel_rank: 0,
      },
      { useBigInt64: true },
    );
    expect(decodeKvEvents(payload)).toEqual(
      ok([
        {
          kind: 'stored',
          keys: ['fedcba9876543210', '0000000000000007'],
          parent: null,
          tokens: [],
          blockSize: 16,
          plain: true,
        },
        { kind: 'removed', keys: ['fedcba9876543210'] },
      ]),
    );
  });

  it("reads SGLang's events: a signed 64-bit hash per page, its parent, no lora_name, and what makes a block not plain", () => {
    const payload = encode(
      [
        0,
        [
          ['BlockStored', [-2n], -1n, [5], 1, null, 'GPU'],
          ['BlockStored', [3], null, [[1, 2]], 1, null],
          { type: 'BlockStored', block_hashes: [4], parent_block_hash: 3, token_ids: [6], block_size: 1, lora_id: 2 },
          { type: 'BlockStored', block_hashes: [5], parent_block_hash: 4, token_ids: [7], extra_keys: [['salt']] },
        ],
        0,
      ],
      { useBigInt64: true },
    );
    expect(decodeKvEvents(payload)).toEqual(
      ok([
        {
          kind: 'stored',
          keys: ['fffffffffffffffe'],
          parent: 'ffffffffffffffff',
          tokens: [5],
          blockSize: 1,
          plain: true,
        },
        { kind: 'stored', keys: ['0000000000000003'], parent: null, blockSize: 1, plain: true },
        { kind: 'stored', keys: [blockKey(4)], parent: blockKey(3), tokens: [6], blockSize: 1, plain: false },
        { kind: 'stored', keys: [blockKey(5)], parent: blockKey(4), tokens: [7], plain: false },
      ]),
    );
  });

  it("skips events of another medium than the GPU (vLLM's CPU offload tier)", () => {
    const payload = encode([0, [['BlockStored', [hash(1)], null, [], 16, null, 'CPU', null]], 0]);
    expect(decodeKvEvents(payload)).toEqual(ok([]));
  });

  it.each([
    ['not msgpack', new Uint8Array([0xc1])],
    ['no events list', encode([0, 'x'])],
    ['an unknown event', encode([0, [['BlockMoved', []]]])],
    ['hashes that are not a list', encode([0, [['BlockRemoved', 'x', 'GPU']]])],
    ['a hash that is text', encode([0, [['BlockRemoved', ['x'], 'GPU']]])],
  ])('says why for %s', (_name, payload) => {
    expect(decodeKvEvents(payload)).toMatchObject({ kind: 'bad', problem: expect.any(String) });
  });
});

async function startSim(endpoint: string, cacheBlocks: number): Promise<{ engine: SimEngine; url: string }> {
  const engine = createSimEngine({
    hashSeed: '0',
    blockSize: 4,
    cacheBlocks,
    kvEventsConfig: { enable_kv_cache_events: true, publisher: 'zmq', endpoint, topic: 'kv' },
  });
  cleanups.push(() => engine.close());
  const { url } = await engine.listen(0, '127.0.0.1');
  return { engine, url };
}

describe("the runner's subscriber and mirror over the simulated engine's events", () => {
  it("holds what the engine's cache holds through stores, evictions and a reset, over a real ZMQ socket", async () => {
    const { mirror, endpoint } = await subscribedMirror(cleanups);
    const { engine, url } = await startSim(endpoint, 12);
    await clearUntilHeard(mirror, url);
    await expectMirrorFollows(mirror, engine, url);
    expect(mirror.live).toBe(true);
  });

  it('starts over on a gap in the sequence: blocks forgotten, a new epoch, down until the engine is heard again', async () => {
    const { mirror, endpoint } = await subscribedMirror(cleanups);
    const pub = new Publisher({ linger: 0 });
    cleanups.push(() => pub.close());
    pub.connect(endpoint);
    const seq = (n: number) => {
      const bytes = Buffer.alloc(8);
      bytes.writeBigUInt64BE(BigInt(n));
      return bytes;
    };
    const stored = (byte: number) => encode([0, [['BlockStored', [hash(byte)], null, [], 16, null, 'GPU', null]], 0]);
    let sent = 0;
    await eventually(
      async () => {
        await pub.send(['', seq(sent++), stored(1)]);
        return mirror.live;
      },
      10_000,
      'first message heard',
    );
    const epoch = mirror.epoch;
    expect(mirror.keys()).toEqual([blockKey(hash(1))]);
    await pub.send(['', seq(sent + 1), stored(2)]);
    await eventually(() => mirror.epoch !== epoch, 10_000, 'the gap seen');
    expect(mirror.live).toBe(false);
    expect(mirror.keys()).toEqual([]);
    await pub.send(['', seq(sent + 2), stored(3)]);
    await eventually(() => mirror.live, 10_000, 'heard again');
    expect(mirror.keys()).toEqual([blockKey(hash(3))]);
  });
});

describe("the simulated engine's replay socket", () => {
  it('answers a start sequence number with every kept batch from it on, then the end marker', async () => {
    const { mirror, endpoint } = await subscribedMirror(cleanups);
    const dir = await mkdtemp(join(tmpdir(), 'sluice-replay-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const replayEndpoint = `ipc://${join(dir, 'replay.sock')}`;
    const engine = createSimEngine({
      kvEventsConfig: { enable_kv_cache_events: true, publisher: 'zmq', endpoint, replay_endpoint: replayEndpoint },
    });
    cleanups.push(() => engine.close());
    const { url } = await engine.listen(0, '127.0.0.1');
    await clearUntilHeard(mirror, url);
    await post(url, '/v1/completions', { prompt: words(40, 'r'), max_tokens: 1 });
    await eventually(() => mirror.size === 2, 10_000, 'the blocks heard');

    const dealer = new Dealer({ linger: 0 });
    cleanups.push(() => dealer.close());
    dealer.connect(replayEndpoint);
    await dealer.send([Buffer.alloc(0), Buffer.alloc(8)]);
    const replayed: Array<{ seq: bigint; events: unknown }> = [];
    for await (const [, seq, payload] of dealer) {
      if (seq!.equals(Buffer.alloc(8, 0xff))) break;
      const decoded = decodeKvEvents(payload!);
      replayed.push({ seq: seq!.readBigUInt64BE(), events: decoded.kind === 'ok' ? decoded.events : decoded });
    }
    // Every batch from 0: the clears sent until one was heard, then the call's two blocks in chain order.
    expect(replayed.map((r) => r.seq)).toEqual(replayed.map((_, i) => BigInt(i)));
    expect(replayed.at(-1)!.events).toMatchObject([{ kind: 'stored', keys: engine.cachedBlockKeys(), parent: null }]);
  });
});
