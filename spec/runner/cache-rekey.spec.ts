import { describe, expect, it } from 'vitest';
import { CacheMirror } from '../../runner/cache-mirror.ts';
import { CacheRekeyer } from '../../runner/cache-rekey.ts';
import type { KvEvent } from '../../runner/kv-events.ts';
import { blockKey, chainBlockHashes, seedHash } from '../../runner/protocol/index.ts';

const SEED = '0';

/** The scheme's keys of the full blocks of `tokens`: what a gateway computes for that prompt. */
function schemeKeys(tokens: readonly number[], blockSize = 16): string[] {
  return chainBlockHashes(tokens, blockSize, seedHash(SEED)).map((hash) => blockKey(hash));
}

/** An engine key for the page ending at `end`: named by its whole prefix, as a chained hash is. */
const pageKey = (tokens: readonly number[], end: number): string => `e${tokens.slice(0, end).join('.')}`;

/**
 * SGLang's events for the pages of `tokens` from token `from` on: one BlockStored per page, its
 * parent the page before (null at the prompt's start).
 */
function pages(tokens: readonly number[], pageSize: number, from = 0): KvEvent[] {
  const events: KvEvent[] = [];
  for (let start = from; start + pageSize <= tokens.length; start += pageSize) {
    const end = start + pageSize;
    events.push({
      kind: 'stored',
      keys: [pageKey(tokens, end)],
      parent: start === 0 ? null : pageKey(tokens, start),
      tokens: tokens.slice(start, end),
      blockSize: pageSize,
      plain: true,
    });
  }
  return events;
}

/** Every scheme key stored by `events`, in order. */
const storedKeys = (events: readonly KvEvent[]): string[] =>
  events.flatMap((event) => (event.kind === 'stored' ? event.keys : []));
const removedKeys = (events: readonly KvEvent[]): string[] =>
  events.flatMap((event) => (event.kind === 'removed' ? event.keys : []));

const prompt = (length: number, salt = 0): number[] => Array.from({ length }, (_, i) => 100 + i + salt * 1000);

describe('CacheRekeyer', () => {
  it.each([
    ['pages of 1', 1, 40, 2],
    ['pages of 16', 16, 48, 3],
    ['pages of 48', 48, 96, 6],
    ['pages of 5, not dividing the block', 5, 50, 3],
  ])(
    'names %s as the scheme names the prompt, a block once its last token is stored',
    (_name, size, length, blocks) => {
      const tokens = prompt(length);
      const keyed = new CacheRekeyer({ seed: SEED, blockSize: 16 }).keyed(pages(tokens, size));
      expect(storedKeys(keyed)).toEqual(schemeKeys(tokens));
      expect(storedKeys(keyed)).toHaveLength(blocks);
    },
  );

  it('names only the new blocks of a prompt that extends a held prefix, whatever the events cut', () => {
    const rekeyer = new CacheRekeyer({ seed: SEED, blockSize: 16 });
    const first = prompt(40);
    rekeyer.keyed(pages(first, 1));
    // A second prompt shares 20 tokens, then goes its own way: the engine stores only its new pages.
    const second = [...first.slice(0, 20), ...prompt(30, 7)];
    const keyed = rekeyer.keyed(pages(second, 1, 20));
    const expected = schemeKeys(second);
    expect(expected[0]).toBe(schemeKeys(first)[0]);
    expect(storedKeys(keyed)).toEqual(expected.slice(1));
  });

  it('retracts a scheme block when the engine removes the page that completed it, leaves first', () => {
    const rekeyer = new CacheRekeyer({ seed: SEED, blockSize: 16 });
    const tokens = prompt(40);
    rekeyer.keyed(pages(tokens, 1));
    const [block0, block1] = schemeKeys(tokens);
    const remove = (from: number, to: number): KvEvent[] => [
      { kind: 'removed', keys: Array.from({ length: to - from }, (_, i) => pageKey(tokens, to - i)) },
    ];
    expect(rekeyer.keyed(remove(32, 40))).toEqual([]);
    expect(removedKeys(rekeyer.keyed(remove(16, 32)))).toEqual([block1]);
    expect(removedKeys(rekeyer.keyed(remove(0, 16)))).toEqual([block0]);
    expect(rekeyer.size).toBe(0);
  });

  it('keeps a block two stores hold until both are removed', () => {
    const rekeyer = new CacheRekeyer({ seed: SEED, blockSize: 16 });
    const tokens = prompt(16);
    expect(storedKeys(rekeyer.keyed(pages(tokens, 16)))).toEqual(schemeKeys(tokens));
    expect(rekeyer.keyed(pages(tokens, 16))).toEqual([]);
    const remove: KvEvent = { kind: 'removed', keys: [pageKey(tokens, 16)] };
    expect(rekeyer.keyed([remove])).toEqual([]);
    expect(removedKeys(rekeyer.keyed([remove]))).toEqual(schemeKeys(tokens));
  });

  it.each([
    ['its parent is unknown', (events: KvEvent[]) => events.slice(1)],
    [
      'it carries a LoRA adapter',
      (events: KvEvent[]) => [{ ...events[0]!, plain: false } as KvEvent, ...events.slice(1)],
    ],
    ['its tokens are not plain ids', (events: KvEvent[]) => [{ ...events[0]!, tokens: undefined }, ...events.slice(1)]],
  ])('names no block when %s, nor any block under it', (_name, alter) => {
    const tokens = prompt(48);
    const keyed = new CacheRekeyer({ seed: SEED, blockSize: 16 }).keyed(alter(pages(tokens, 16)));
    expect(keyed).toEqual([]);
  });

  it('forgets everything on AllBlocksCleared, which it passes on: a page under an old parent is unknown after it', () => {
    const rekeyer = new CacheRekeyer({ seed: SEED, blockSize: 16 });
    const tokens = prompt(48);
    const events = pages(tokens, 16);
    rekeyer.keyed(events.slice(0, 2));
    expect(rekeyer.keyed([{ kind: 'cleared' }, events[2]!])).toEqual([{ kind: 'cleared' }]);
    expect(rekeyer.size).toBe(0);
  });

  it("splits vLLM's multi-block BlockStored among its hashes, and re-chunks them into another block size", () => {
    const tokens = prompt(64);
    const event: KvEvent = {
      kind: 'stored',
      keys: ['a', 'b', 'c', 'd'],
      parent: null,
      tokens,
      blockSize: 16,
      plain: true,
    };
    expect(storedKeys(new CacheRekeyer({ seed: SEED, blockSize: 16 }).keyed([event]))).toEqual(schemeKeys(tokens));
    expect(storedKeys(new CacheRekeyer({ seed: SEED, blockSize: 32 }).keyed([event]))).toEqual(schemeKeys(tokens, 32));
    // Tokens that do not split evenly among the hashes are not trusted.
    const uneven = { ...event, tokens: tokens.slice(0, 60) };
    expect(new CacheRekeyer({ seed: SEED, blockSize: 16 }).keyed([uneven])).toEqual([]);
  });

  it('remembers at most maxPages engine blocks, naming none beyond until some are removed', () => {
    let full = 0;
    const rekeyer = new CacheRekeyer({ seed: SEED, blockSize: 16, maxPages: 20, onFull: () => (full += 1) });
    const tokens = prompt(40);
    expect(storedKeys(rekeyer.keyed(pages(tokens, 1)))).toEqual(schemeKeys(tokens).slice(0, 1));
    expect(rekeyer.size).toBe(20);
    // The first page past the bound is refused, and told; those under it have an unknown parent.
    expect(full).toBe(1);
    const other = prompt(20, 3);
    expect(rekeyer.keyed(pages(other, 1))).toEqual([]);
    expect(full).toBe(1);
    // A page removed makes room for one, and the next refusal is told again.
    rekeyer.keyed([{ kind: 'removed', keys: [pageKey(tokens, 20)] }]);
    expect(storedKeys(rekeyer.keyed(pages(other, 16)))).toEqual(schemeKeys(other));
    expect(rekeyer.keyed(pages(prompt(16, 4), 16))).toEqual([]);
    expect(full).toBe(2);
  });

  it('is forgotten when the mirror starts over: a page whose parent came before a gap is not named', () => {
    const mirror = new CacheMirror(() => 'epoch');
    mirror.keyWith(new CacheRekeyer({ seed: SEED, blockSize: 16 }));
    mirror.engineStarted();
    const tokens = prompt(48);
    const events = pages(tokens, 16);
    mirror.receive({ seq: 0n, events: events.slice(0, 2) });
    expect(mirror.keys()).toEqual(schemeKeys(tokens).slice(0, 2));
    mirror.receive({ seq: 5n, events: [] });
    mirror.receive({ seq: 6n, events: events.slice(2) });
    expect(mirror.live).toBe(true);
    expect(mirror.keys()).toEqual([]);
  });
});
