/**
 * The package's main entry (`import { createGateway, createRunner } from 'sluice'`): the
 * gateway's and the runner's public faces. The placer API (the Placer contract, the runner view,
 * descriptors and helpers for a custom placer) is its own entry, `sluice/placer`.
 */
export * from './gateway/index.ts';
export * from './runner/index.ts';
