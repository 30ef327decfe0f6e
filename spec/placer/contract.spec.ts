import { builtinPlacers } from '../../placer/index.ts';
import createFirstFreePlacer from '../fixtures/placers/first-free.ts';
import { placerContract } from './placer-contract.ts';

for (const [name, create] of Object.entries(builtinPlacers)) placerContract(name, create);

// The custom fixture runs the same suite, as any operator's placer can.
placerContract('first-free fixture', createFirstFreePlacer);
