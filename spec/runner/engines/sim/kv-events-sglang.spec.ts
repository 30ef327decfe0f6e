import { afterEach, describe, expect, it } from 'vitest';
import { CacheRekeyer } from '../../../../runner/cache-rekey.ts';
import { createSimEngine, resolveSimEngineOptions } from '../../../../runner/engines/sim/index.ts';
import { SglangPages, sglangEventHash, sglangPageDigest } from '../../../../runner/engines/sim/kv-events-sglang.ts';
import { clearUntilHeard, expectMirrorFollows, subscribedMirror } from '../../../support/kv-mirror.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const hash = (byte: number): Buffer => Buffer.alloc(32, byte);

describe("SGLang's page hashes", () => {
  // Computed with Python's hashlib from SGLang's definition: sha256(prior digest, each token as 4 bytes little-endian).
  it('chains SHA-256 over the prior digest and the tokens as 4 bytes little-endian, cut to a signed int64', () => {
    const first = sglangPageDigest([1, 2, 3], undefined);
    expect(first.toString('hex')).toBe('4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d');
    expect(sglangEventHash(first)).toBe(5059399719711515881n);
    const second = sglangPageDigest([4], first);
    expect(second.toString('hex')).toBe('cae427896adf826b263f0caef3c2cac907160ef49aa89d8222ba92a1cab31e8a');
    expect(sglangEventHash(second)).toBe(-3826890312201043349n);
  });
});

describe('SglangPages', () => {
  const run = (hashes: Buffer[], parent: Buffer | null, tokenIds: number[]) => [hashes, parent, tokenIds, 4] as const;

  it("tells each block as its pages, chained across blocks and runs, and a removed block's pages first page first", () => {
    const pages = new SglangPages(2);
    const first = pages.stored(...run([hash(1), hash(2)], null, [1, 2, 3, 4, 5, 6, 7, 8]));
    const digests: Buffer[] = [];
    let prior: Buffer | undefined;
    for (const page of [
      [1, 2],
      [3, 4],
      [5, 6],
      [7, 8],
      [9, 10],
      [11, 12],
    ]) {
      prior = sglangPageDigest(page, prior);
      digests.push(prior);
    }
    const id = (i: number) => sglangEventHash(digests[i]!);
    expect(first).toEqual([
      ['BlockStored', [id(0)], null, [1, 2], 2, null, 'GPU'],
      ['BlockStored', [id(1)], id(0), [3, 4], 2, null, 'GPU'],
      ['BlockStored', [id(2)], id(1), [5, 6], 2, null, 'GPU'],
      ['BlockStored', [id(3)], id(2), [7, 8], 2, null, 'GPU'],
    ]);
    expect(pages.stored(...run([hash(3)], hash(2), [9, 10, 11, 12]))).toEqual([
      ['BlockStored', [id(4)], id(3), [9, 10], 2, null, 'GPU'],
      ['BlockStored', [id(5)], id(4), [11, 12], 2, null, 'GPU'],
    ]);
    expect(pages.removed(hash(3))).toEqual([
      ['BlockRemoved', [id(4)], 'GPU'],
      ['BlockRemoved', [id(5)], 'GPU'],
    ]);
    expect(pages.removed(hash(3))).toEqual([]);
  });

  it('tells nothing of a run whose parent block it does not hold, since it cannot chain from it', () => {
    const pages = new SglangPages(1);
    expect(pages.stored(...run([hash(2)], hash(1), [1, 2, 3, 4]))).toEqual([]);
    pages.stored(...run([hash(1)], null, [1, 2, 3, 4]));
    pages.clear();
    expect(pages.stored(...run([hash(2)], hash(1), [5, 6, 7, 8]))).toEqual([]);
  });
});

describe("the simulated engine's --kv-events-style", () => {
  const events = { enable_kv_cache_events: true, publisher: 'zmq', endpoint: 'tcp://*:5557' };

  it('defaults to vLLM, and to pages of 1 token in the sglang style', () => {
    expect(resolveSimEngineOptions({ kvEventsConfig: events }).kvEvents?.style).toEqual({ kind: 'vllm' });
    expect(resolveSimEngineOptions({ kvEventsConfig: events, kvEventsStyle: 'sglang' }).kvEvents?.style).toEqual({
      kind: 'sglang',
      pageSize: 1,
    });
  });

  it('reads the config as SGLang does in its style: publishing on without enable_kv_cache_events', () => {
    const sglang = { publisher: 'zmq', endpoint: 'tcp://*:5557' };
    expect(resolveSimEngineOptions({ kvEventsConfig: sglang }).kvEvents).toBeUndefined();
    expect(resolveSimEngineOptions({ kvEventsConfig: sglang, kvEventsStyle: 'sglang' }).kvEvents).toMatchObject({
      endpoint: 'tcp://*:5557',
    });
  });

  it.each([
    [{ kvEventsStyle: 'tgi' as never }, 'kvEventsStyle must be "vllm" or "sglang", got "tgi"'],
    [{ pageSize: 4 }, 'pageSize is for kvEventsStyle "sglang"'],
    [{ kvEventsStyle: 'sglang' as const, pageSize: 5 }, 'pageSize must divide blockSize (16), got 5'],
    [{ kvEventsStyle: 'sglang' as const, pageSize: 0 }, 'pageSize must be'],
  ])('refuses %o', (options, message) => {
    expect(() => resolveSimEngineOptions({ kvEventsConfig: events, ...options })).toThrow(message);
  });
});

describe("the runner's re-keying over the simulated engine's SGLang events", () => {
  it.each([1, 2, 4])(
    "holds the engine's blocks under the wire's keys from pages of %i token(s), through stores, evictions and a reset",
    async (pageSize) => {
      const { mirror, endpoint } = await subscribedMirror(cleanups);
      mirror.keyWith(new CacheRekeyer({ seed: '0', blockSize: 4 }));
      const engine = createSimEngine({
        hashSeed: '0',
        blockSize: 4,
        cacheBlocks: 12,
        kvEventsStyle: 'sglang',
        pageSize,
        kvEventsConfig: { publisher: 'zmq', endpoint },
      });
      cleanups.push(() => engine.close());
      const { url } = await engine.listen(0, '127.0.0.1');
      await clearUntilHeard(mirror, url);
      await expectMirrorFollows(mirror, engine, url);
    },
  );
});
