import { describe, expect, it } from 'vitest';
import { CacheMirror } from '../../runner/cache-mirror.ts';

/** A mirror with numbered epochs and a log of what its listener heard. */
function mirrorWithLog() {
  let epochs = 0;
  const mirror = new CacheMirror(() => `e${++epochs}`);
  const heard: string[] = [];
  mirror.listen({
    changed: (stored, removed) => heard.push(`+${stored.join(',')} -${removed.join(',')}`),
    startedOver: () => heard.push(`over ${mirror.epoch} ${mirror.live ? 'live' : 'down'}`),
  });
  return { mirror, heard };
}

describe('CacheMirror', () => {
  it('is down until it hears the engine, and then follows stores and removals as changes', () => {
    const { mirror, heard } = mirrorWithLog();
    expect(mirror.live).toBe(false);
    mirror.receive({ seq: 7n, events: [{ kind: 'stored', keys: ['a', 'b'] }] });
    mirror.receive({
      seq: 8n,
      events: [
        { kind: 'removed', keys: ['a', 'z'] },
        { kind: 'stored', keys: ['b', 'c'] },
      ],
    });
    expect(mirror.live).toBe(true);
    expect(mirror.keys().sort()).toEqual(['b', 'c']);
    // Only real changes are told: b was held already, z never was.
    expect(heard).toEqual(['over e1 live', '+a,b -', '+c -a']);
  });

  it('starts over on a skipped sequence number: nothing held, a new epoch, down until the next message', () => {
    const { mirror, heard } = mirrorWithLog();
    mirror.receive({ seq: 0n, events: [{ kind: 'stored', keys: ['a'] }] });
    mirror.receive({ seq: 2n, events: [{ kind: 'stored', keys: ['b'] }] });
    expect(mirror).toMatchObject({ live: false, epoch: 'e2', size: 0 });
    mirror.receive({ seq: 3n, events: [{ kind: 'stored', keys: ['c'] }] });
    expect(mirror).toMatchObject({ live: true, epoch: 'e2' });
    expect(mirror.keys()).toEqual(['c']);
    expect(heard).toEqual(['over e1 live', '+a -', 'over e2 down', 'over e2 live', '+c -']);
  });

  it('knows a fresh engine holds nothing and numbers from 0, so a first message numbered 1 is a gap', () => {
    const { mirror } = mirrorWithLog();
    mirror.engineStarted();
    expect(mirror).toMatchObject({ live: true, epoch: 'e2', size: 0 });
    mirror.receive({ seq: 1n, events: [{ kind: 'stored', keys: ['a'] }] });
    expect(mirror).toMatchObject({ live: false, epoch: 'e3', size: 0 });
  });

  it('empties under a new epoch on AllBlocksCleared, keeping what the same batch stored after it', () => {
    const { mirror } = mirrorWithLog();
    mirror.engineStarted();
    mirror.receive({ seq: 0n, events: [{ kind: 'stored', keys: ['a'] }] });
    mirror.receive({ seq: 1n, events: [{ kind: 'cleared' }, { kind: 'stored', keys: ['b'] }] });
    expect(mirror).toMatchObject({ live: true, epoch: 'e3' });
    expect(mirror.keys()).toEqual(['b']);
  });

  it('forgets everything when the engine is lost', () => {
    const { mirror } = mirrorWithLog();
    mirror.engineStarted();
    mirror.receive({ seq: 0n, events: [{ kind: 'stored', keys: ['a'] }] });
    mirror.engineLost();
    expect(mirror).toMatchObject({ live: false, epoch: 'e3', size: 0 });
  });
});
