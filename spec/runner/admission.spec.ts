/** runner/admission.ts: whether the runner takes a call now, and the busy answer when it does not. */
import { describe, expect, it } from 'vitest';
import { admit, notReadyReason } from '../../runner/admission.ts';
import type { AdmissionState } from '../../runner/admission.ts';
import type { EngineBusyReason } from '../../runner/engine.ts';
import { Slots } from '../../runner/slots.ts';

/** A runner's admission state: not draining, an engine that takes calls, and one slot, unless given. */
function state(given: { draining?: boolean; engineBusy?: EngineBusyReason; slots?: Slots } = {}): AdmissionState {
  const { draining = false, engineBusy, slots = new Slots(1) } = given;
  return { draining: () => draining, engine: { busyReason: () => engineBusy }, slots };
}

describe('admit', () => {
  it('returns admitted with a release that gives the slot back', () => {
    const slots = new Slots(1);
    const admission = admit(state({ slots }));
    expect(admission.kind).toBe('admitted');
    expect(slots.inUse).toBe(1);
    if (admission.kind === 'admitted') admission.release();
    expect(slots.inUse).toBe(0);
  });

  it('returns busy for slots when every slot is taken', () => {
    const slots = new Slots(1);
    admit(state({ slots }));
    expect(admit(state({ slots }))).toEqual({ kind: 'busy', reason: 'slots' });
  });

  it("returns draining first, then the engine's reason, and takes no slot for either", () => {
    const slots = new Slots(1);
    expect(admit(state({ draining: true, engineBusy: 'starting', slots }))).toEqual({
      kind: 'busy',
      reason: 'draining',
    });
    expect(admit(state({ engineBusy: 'starting', slots }))).toEqual({ kind: 'busy', reason: 'starting' });
    expect(admit(state({ engineBusy: 'no-engine', slots }))).toEqual({ kind: 'busy', reason: 'no-engine' });
    expect(slots.inUse).toBe(0);
  });
});

describe('notReadyReason', () => {
  it("returns draining, then the engine's reason, and nothing for a ready runner whatever its slots", () => {
    expect(notReadyReason({ draining: () => true, engine: { busyReason: () => 'engine-failed' } })).toBe('draining');
    expect(notReadyReason({ draining: () => false, engine: { busyReason: () => 'engine-failed' } })).toBe(
      'engine-failed',
    );
    expect(notReadyReason({ draining: () => false, engine: { busyReason: () => undefined } })).toBeUndefined();
  });
});
