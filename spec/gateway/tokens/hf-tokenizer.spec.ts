import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PromptMapper } from '../../../gateway/tokens/index.ts';
import type { LogFields } from '../../../placer/kernel/index.ts';
import { blockKeys, chainBlockHashes, seedHash } from '../../../runner/protocol/index.ts';
import type { CacheAnnouncement } from '../../../runner/protocol/index.ts';
import { warningRecorder } from '../../support/logger.ts';

const FIXTURES = join(import.meta.dirname, '../../fixtures/tokenizers');
const NAME = 'sluice/chatml-bpe';
const model: CacheAnnouncement = {
  tokenizer: NAME,
  scheme: { algorithm: 'sha256_cbor', seed: '0', blockSize: 4 },
  events: true,
};

/** The fixture tokenizer as the library makes it, to encode expected texts with. */
async function fixtureTokenizer(): Promise<Tokenizer> {
  const read = async (file: string) => JSON.parse(await readFile(join(FIXTURES, NAME, file), 'utf8'));
  return new Tokenizer(await read('tokenizer.json'), await read('tokenizer_config.json'));
}

const keysOf = (ids: number[], blockSize = 4) => blockKeys(chainBlockHashes(ids, blockSize, seedHash('0')));

describe('PromptMapper on a Hugging Face tokenizer', () => {
  let tokenizer: Tokenizer;
  let mapper: PromptMapper;
  beforeAll(async () => {
    tokenizer = await fixtureTokenizer();
    mapper = new PromptMapper({ tokenizerDir: FIXTURES, minPromptTokens: 1 });
    expect(await mapper.prepare(model)).toBe(true);
  });

  it("maps a chat to the tokens of its template's text, the special tokens read as themselves", () => {
    const messages = [
      { role: 'system', content: 'You are brief.' },
      { role: 'user', content: 'What is <|im_end|> for?\n  Two lines.' },
    ];
    // Rendered by Python's Jinja2 (trim_blocks, lstrip_blocks, as transformers) from the fixture's template.
    const text =
      '<|begin_of_text|><|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nWhat is <|im_end|> for?\n  Two lines.<|im_end|>\n<|im_start|>assistant\n';
    const ids: number[] = tokenizer.encode(text, { add_special_tokens: false }).ids;
    const blocks = mapper.blocksOf({ route: 'chat', messages }, model)!;
    expect(blocks).toEqual({ promptTokens: ids.length, keys: keysOf(ids) });
    // The BOS once, from the template; the special tokens as single ids.
    expect(ids.filter((id) => id === tokenizer.token_to_id('<|begin_of_text|>'))).toHaveLength(1);
    expect(ids.filter((id) => id === tokenizer.token_to_id('<|im_end|>'))).toHaveLength(3);
  });

  it('takes a list of text parts as their texts joined by newlines, as vLLM does', () => {
    const parts = [
      { type: 'text', text: 'first part' },
      { type: 'text', text: 'second part' },
    ];
    const joined = mapper.blocksOf(
      { route: 'chat', messages: [{ role: 'user', content: 'first part\nsecond part' }] },
      model,
    );
    expect(mapper.blocksOf({ route: 'chat', messages: [{ role: 'user', content: parts }] }, model)).toEqual(joined);
  });

  it('maps a completion with the BOS the tokenizer adds', () => {
    const prompt = 'The gateway places each call on the runner whose engine holds its prefix.';
    const ids: number[] = tokenizer.encode(prompt).ids;
    expect(ids[0]).toBe(tokenizer.token_to_id('<|begin_of_text|>'));
    expect(mapper.blocksOf({ route: 'completions', prompt }, model)).toEqual({
      promptTokens: ids.length,
      keys: keysOf(ids),
    });
  });

  it('maps nothing for a chat it cannot render exactly: tools, images, no messages, a bad message', () => {
    const user = { role: 'user', content: 'hello there' };
    const tools = [{ type: 'function', function: { name: 'f' } }];
    const image = { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] };
    expect(mapper.blocksOf({ route: 'chat', messages: [user], tools }, model)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'chat', messages: [image] }, model)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'chat', messages: [] }, model)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'chat', messages: [{ content: 'no role' }] }, model)).toBeUndefined();
    expect(mapper.blocksOf({ route: 'completions', prompt: ['a', 'b'] }, model)).toBeUndefined();
  });
});

describe('PromptMapper loading tokenizers', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-tokenizers-'));
    await mkdir(join(dir, 'acme', 'broken'), { recursive: true });
    await writeFile(join(dir, 'acme', 'broken', 'tokenizer.json'), '{ "model": ');
    await writeFile(join(dir, 'acme', 'broken', 'tokenizer_config.json'), '{}');
    await mkdir(join(dir, 'sluice'), { recursive: true });
    const fixture = join(FIXTURES, NAME);
    await mkdir(join(dir, NAME));
    for (const file of ['tokenizer.json', 'tokenizer_config.json'])
      await writeFile(join(dir, NAME, file), await readFile(join(fixture, file)));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  const source = { route: 'completions', prompt: 'word '.repeat(40) } as const;

  it.each([
    ['a missing folder', 'acme/missing'],
    ['a broken tokenizer.json', 'acme/broken'],
    ['a name reaching out of the directory', '../sluice/chatml-bpe'],
  ])('maps nothing for %s, and logs it once with the name', async (_, tokenizer) => {
    const warnings: LogFields[] = [];
    const mapper = new PromptMapper({ tokenizerDir: dir, logger: warningRecorder(warnings) });
    const announcement = { ...model, tokenizer };
    expect(mapper.blocksOf(source, announcement)).toBeUndefined();
    expect(await mapper.prepare(announcement)).toBe(false);
    expect(mapper.blocksOf(source, announcement)).toBeUndefined();
    expect(await mapper.prepare(announcement)).toBe(false);
    expect(warnings).toEqual([{ msg: 'tokenizer not loaded', tokenizer, reason: expect.any(String) }]);
  });

  it('maps nothing for a model tokenizer without a tokenizer directory, and says why once', async () => {
    const warnings: LogFields[] = [];
    const mapper = new PromptMapper({ logger: warningRecorder(warnings) });
    expect(await mapper.prepare(model)).toBe(false);
    expect(mapper.blocksOf(source, model)).toBeUndefined();
    expect(warnings).toEqual([
      { msg: 'tokenizer not loaded', tokenizer: NAME, reason: expect.stringMatching(/directory/) },
    ]);
  });

  it('loads a tokenizer on first use without holding the call, and maps with it once loaded', async () => {
    const mapper = new PromptMapper({ tokenizerDir: dir });
    expect(mapper.blocksOf(source, model)).toBeUndefined();
    expect(await mapper.prepare(model)).toBe(true);
    expect(mapper.blocksOf(source, model)?.promptTokens).toBeGreaterThan(40);
  });

  it('tokenizes whole, and the same as uncached, a tokenizer that treats the text after a special token apart', async () => {
    // Metaspace with prepend_scheme "first" puts its space before the first stretch of text only,
    // so "[INST]again" cut after "[INST]" would tokenize "again" as a first stretch.
    const letters = [...'abcdefghijklmnopqrstuvwxyz▁'];
    const tokenizer = {
      added_tokens: ['<unk>', '<s>', '[INST]'].map((content, id) => ({
        id,
        content,
        special: true,
        normalized: false,
        lstrip: false,
        rstrip: false,
        single_word: false,
      })),
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
      post_processor: {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
      },
      decoder: null,
      model: {
        type: 'BPE',
        unk_token: '<unk>',
        vocab: Object.fromEntries([['<unk>', 0], ['<s>', 1], ['[INST]', 2], ...letters.map((c, i) => [c, i + 3])]),
        merges: [],
      },
    };
    await mkdir(join(dir, 'acme', 'metaspace'), { recursive: true });
    await writeFile(join(dir, 'acme', 'metaspace', 'tokenizer.json'), JSON.stringify(tokenizer));
    await writeFile(join(dir, 'acme', 'metaspace', 'tokenizer_config.json'), '{}');
    const announcement = { ...model, tokenizer: 'acme/metaspace' };
    const cached = new PromptMapper({ tokenizerDir: dir, minPromptTokens: 1 });
    const uncached = new PromptMapper({ tokenizerDir: dir, minPromptTokens: 1, prefixCacheEntries: 0 });
    expect(await cached.prepare(announcement)).toBe(true);
    expect(await uncached.prepare(announcement)).toBe(true);
    for (const prompt of ['[INST]again and again[INST]more', '[INST]again and again[INST]more and more[INST]x']) {
      const expected = uncached.blocksOf({ route: 'completions', prompt }, announcement);
      for (let i = 0; i < 2; i += 1)
        expect(cached.blocksOf({ route: 'completions', prompt }, announcement)).toEqual(expected);
    }
  });

  it('refuses a bad option by name', () => {
    expect(() => new PromptMapper({ tokenizerDir: '' })).toThrow(/tokenizerDir/);
    expect(() => new PromptMapper({ prefixCacheEntries: -1 })).toThrow(/prefixCacheEntries/);
    expect(() => new PromptMapper({ prefixCacheBytes: 0 })).toThrow(/prefixCacheBytes/);
  });
});
