/**
 * The release window as a table: lines follow the fleet's free slots with one parked, never past
 * maxLinesInFlight; and the free slots read from runners' loads.
 */
import { describe, expect, it } from 'vitest';
import { PARKED, freeSlots, linesToRelease } from '../../../gateway/batch/window.ts';

describe('linesToRelease', () => {
  it.each([
    // free, waiting, inFlight, max, released
    [0, 0, 0, 256, PARKED, 'an idle batch on a full fleet parks one line'],
    [0, 1, 1, 256, 0, 'one parked already: nothing more while no slot frees'],
    [4, 0, 0, 256, 4 + PARKED, 'free slots are filled, and one more line parks'],
    [4, 2, 10, 256, 4 + PARKED - 2, 'lines waiting count against the free slots'],
    [0, 5, 5, 256, 0, 'more waiting than parked (other gateways, other clients): nothing'],
    [100, 0, 250, 256, 6, 'never past maxLinesInFlight'],
    [3, 0, 256, 256, 0, 'at maxLinesInFlight: nothing'],
  ])('%i free, %i waiting, %i in flight of %i: %i (%s)', (free, waiting, inFlight, maxInFlight, released) => {
    expect(linesToRelease({ free, waiting, inFlight, maxInFlight })).toBe(released);
  });
});

describe('freeSlots', () => {
  it('sums the reported slots less the calls on each runner, and counts an unreported runner while idle', () => {
    const runner = (inFlight: number, slots?: number) => ({ load: () => ({ inFlight, ...(slots ? { slots } : {}) }) });
    expect(freeSlots([runner(1, 4), runner(4, 4), runner(6, 4)])).toBe(3);
    expect(freeSlots([runner(0), runner(1)])).toBe(1);
    expect(freeSlots([{}])).toBe(1);
    expect(freeSlots([])).toBe(0);
  });
});
