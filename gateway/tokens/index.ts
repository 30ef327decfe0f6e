/**
 * The tokens room: a call's prompt in the engines' own tokens and blocks, so placement can look it
 * up in what the engines' caches hold.
 */
export type { PromptBlocks, PromptMapperOptions, PromptSource } from './prompt-blocks.ts';
export { PromptMapper } from './prompt-blocks.ts';
