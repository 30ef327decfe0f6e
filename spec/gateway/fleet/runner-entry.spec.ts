/**
 * RunnerEntry's capacity signal: when it tells the gateway's wait queue that a runner may have
 * room, and for how many calls. No network: the transport is never asked to send.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { HttpRunner } from '../../../gateway/fleet/http-runner.ts';
import { RunnerEntry } from '../../../gateway/fleet/runner-entry.ts';
import type { ReportedLoad } from '../../../runner/protocol/index.ts';
import { FakeClock } from '../../placer/fake.ts';

const entries: RunnerEntry[] = [];
afterEach(async () => {
  await Promise.all(entries.splice(0).map((e) => e.close()));
});

function entry(threshold = 1) {
  const clock = new FakeClock();
  const told: number[] = [];
  const transport = new HttpRunner(new URL('http://127.0.0.1:1'), {
    connectTimeout: 100,
    responseTimeout: 100,
    streamIdleTimeout: 100,
    clock,
  });
  const e = new RunnerEntry('r1', transport, {
    clock,
    breaker: { threshold, openFor: 1000, closeAfter: 1 },
    streamIdleTimeout: 100,
    onChange: () => {},
    room: {
      freed: (runner, _models, free) => {
        expect(runner).toBe(e.id);
        told.push(free);
      },
    },
  });
  entries.push(e);
  return { e, told, clock };
}

const load = (slotsInUse: number, slots = 4): ReportedLoad => ({ slotsInUse, slots, queue: 0, models: {} });
/** A registration body reporting `l`; ready unless told otherwise. */
const registration = (l: ReportedLoad, { ready = true } = {}) => ({
  id: 'r1',
  url: 'http://127.0.0.1:1',
  version: '1',
  engines: [],
  models: ['m'],
  slots: l.slots,
  gpus: null,
  ready,
  load: l,
});

describe('RunnerEntry room listener', () => {
  it('tells the free slots of a heartbeat, and nothing when it reports none', () => {
    const { e, told } = entry();
    e.register(registration(load(4)));
    expect(told).toEqual([]);
    e.heartbeat({ ready: true, state: 'serving', models: ['m'], load: load(1) });
    e.heartbeat({ ready: true, state: 'serving', models: ['m'], load: load(4) });
    expect(told).toEqual([3]);
  });

  it('tells a runner that registers ready with free slots, and not one still starting or draining', () => {
    const { e, told } = entry();
    e.register(registration(load(0), { ready: false }));
    expect(told).toEqual([]);
    e.register(registration(load(1)));
    expect(told).toEqual([3]);
    e.heartbeat({ ready: true, state: 'draining', models: ['m'], load: load(0) });
    expect(told).toEqual([3]);
  });

  it('tells a heartbeat that turns a starting runner ready, and one that adds a model, which is how calls waiting for a replica wake', () => {
    const { e, told } = entry();
    e.register(registration(load(0), { ready: false }));
    e.heartbeat({ ready: false, state: 'serving', models: [], load: load(0) });
    expect(told).toEqual([]);
    e.heartbeat({ ready: true, state: 'serving', models: ['m'], load: load(1) });
    expect(told).toEqual([3]);
    expect(e.health.models).toEqual(['m']);
    e.heartbeat({ ready: true, state: 'serving', models: ['m', 'n'], load: load(2) });
    expect(told).toEqual([3, 2]);
    expect(e.health.models).toEqual(['m', 'n']);
  });

  it('tells the free slots of a status probe, and that a probe let an ejected runner be tried again', () => {
    const { e, told } = entry();
    e.probed({ models: ['m'], load: load(2) });
    expect(told).toEqual([2]);
    e.breaker.failure();
    expect(e.breaker.state).toBe('open');
    e.probed({ models: ['m'], load: undefined });
    expect(e.breaker.state).toBe('half-open');
    expect(told).toEqual([2, 1]);
  });
});

describe("RunnerEntry's load from the cache feed", () => {
  it('takes it as a fresh report that placement reads, keeps the per-model counts, and tells its free slots', () => {
    const { e, told, clock } = entry();
    const models = { m: { running: 1, waiting: 0 } };
    e.register(registration({ ...load(1), models }));
    clock.advance(700);
    e.reported({ slotsInUse: 3, slots: 4, queue: 2, kvCacheUsage: 0.5 });
    expect(e.load()).toEqual({
      inFlight: 0,
      slots: 4,
      reported: { running: 3, waiting: 2, kvCacheUsage: 0.5, at: clock.now() },
    });
    expect(e.registration?.report?.load.models).toEqual(models);
    expect(told).toEqual([3, 1]);
    e.reported({ slotsInUse: 4, slots: 4, queue: 0 });
    expect(told).toEqual([3, 1]);
  });
});
