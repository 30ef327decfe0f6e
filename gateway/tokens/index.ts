/**
 * The tokens room: a call's prompt in the engines' own tokens and blocks, so placement can look it
 * up in what the engines' caches hold.
 */
export type { PromptBlocks } from './prompt-blocks.ts';
export { PromptMapper } from './prompt-blocks.ts';
export type { PromptMapperOptions, PromptMapperSettings } from './options.ts';
export { promptMapperDefaults, resolvePromptMapperOptions } from './options.ts';
export type { PromptSource } from './prompt-tokenizer.ts';
