/**
 * Doubles and fixtures for the control plane's specs: deployments, a fleet of mutable runners, a
 * lease the test flips, timers the test fires, and a runner stand-in that does what its order says.
 */
import type { Deployment } from '../../../gateway/control/deployments.ts';
import { checkDeployment } from '../../../gateway/control/deployments.ts';
import type { FleetRunner, FleetView, Lease } from '../../../gateway/control/fleet.ts';
import type { ReconcilerTimers } from '../../../gateway/control/reconciler-options.ts';
import type { Reconciler } from '../../../gateway/control/reconciler.ts';
import type { Capacity, HostedEngine, HostedState, LaunchPolicy } from '../../../runner/protocol/index.ts';
import { resolveLaunchPolicy } from '../../../runner/protocol/index.ts';
import { request } from 'undici';
import { asOperator } from '../../support/fleet.ts';

const SPEC_POLICY: LaunchPolicy = (() => {
  const resolved = resolveLaunchPolicy({ envAllow: ['sim=SIM_TOKEN'] });
  if (resolved.kind !== 'ok') throw new Error(resolved.problem);
  return resolved.policy;
})();

/** A runner whose every field the test may change. */
export interface MutableRunner {
  id: string;
  capacity: Capacity | undefined;
  hosted: HostedEngine | undefined;
  placeable: boolean;
  slotsInUse: number;
}

/** A runner that takes orders, launches `sim`, has no GPUs and no labels, unless told otherwise. */
export function runner(
  id: string,
  capacity: Partial<Capacity> = {},
  rest: Partial<Omit<MutableRunner, 'id' | 'capacity'>> = {},
): MutableRunner {
  return {
    id,
    capacity: { labels: {}, freeGpus: [], engineKinds: ['sim'], orders: true, ...capacity },
    hosted: undefined,
    placeable: true,
    slotsInUse: 0,
    ...rest,
  };
}

/** A vLLM profile of one GPU, with an engine flag and a secret in its env, as an operator writes it. */
export const LLAMA_PROFILE = Object.freeze({
  kind: 'vllm',
  model: 'meta-llama/Llama-3.1-8B-Instruct',
  gpus: 1,
  args: ['--max-model-len', '8192'],
  env: { HF_TOKEN: 'hf_secret_value' },
});

/** PUTs a deployment of org/llama on {@link LLAMA_PROFILE} to the gateway at `url` as the operator; resolves with the status. */
export async function putLlama(url: string): Promise<number> {
  const answer = await request(`${url}/v1/deployments/org/llama`, {
    method: 'PUT',
    headers: { ...asOperator, 'content-type': 'application/json' },
    body: JSON.stringify({ profile: LLAMA_PROFILE, maxReplicas: 2 }),
  });
  await answer.body.dump();
  return answer.statusCode;
}

/** A checked deployment of `model`, on the simulated engine unless `extra` names a profile; throws on a bad one. */
export function deployment(model: string, extra: Record<string, unknown> = {}): Deployment {
  // The specs' deployments may set SIM_TOKEN, a variable this policy adds for kind sim.
  const checked = checkDeployment({ model, profile: { kind: 'sim' }, ...extra }, undefined, SPEC_POLICY);
  if (checked.kind !== 'valid') throw new Error(checked.problems.join('\n'));
  return checked.deployment;
}

/** A fleet the test edits: `runners` and `waitingBy` are read live. */
export class FakeFleet implements FleetView {
  readonly list: MutableRunner[];
  readonly waitingBy = new Map<string, number>();

  constructor(runners: MutableRunner[]) {
    this.list = runners;
  }

  runners(): readonly FleetRunner[] {
    return this.list;
  }

  waiting(model: string): number {
    return this.waitingBy.get(model) ?? 0;
  }

  get(id: string): MutableRunner {
    const r = this.list.find((x) => x.id === id);
    if (!r) throw new Error(`no runner ${id}`);
    return r;
  }

  remove(id: string): void {
    this.list.splice(this.list.indexOf(this.get(id)), 1);
  }
}

/** A lease held while `held` is true. */
export class FakeLease implements Lease {
  held = true;
  released = 0;
  readonly ttl = 15_000;

  async hold(): Promise<boolean> {
    return this.held;
  }

  async release(): Promise<void> {
    this.released++;
  }
}

/** Timers that fire only when the test says. */
export class ManualTimers implements ReconcilerTimers {
  readonly pending = new Map<number, { callback: () => void; ms: number }>();
  #next = 0;

  setTimeout(callback: () => void, ms: number): unknown {
    const id = ++this.#next;
    this.pending.set(id, { callback, ms });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.pending.delete(handle as number);
  }

  /** The delays of the timers pending, in the order they were set. */
  get delays(): number[] {
    return [...this.pending.values()].map((t) => t.ms);
  }

  /** Fires every pending timer of `ms` (all when undefined). */
  fire(ms?: number): void {
    for (const [id, t] of [...this.pending]) {
      if (ms !== undefined && t.ms !== ms) continue;
      this.pending.delete(id);
      t.callback();
    }
  }
}

/**
 * Every order-taking runner does what the reconciler orders, as a real runner would by its next
 * heartbeat: an order's replica is reported in `state`; null clears what it hosts.
 */
export function obey(fleet: FakeFleet, reconciler: Reconciler, now: number, state: HostedState = 'ready'): void {
  for (const r of fleet.list) {
    const order = reconciler.orderFor(r.id);
    if (order === undefined) continue;
    if (order === null) r.hosted = undefined;
    else if (r.hosted?.replica !== order.replica || r.hosted.state !== state)
      r.hosted = {
        replica: order.replica,
        model: order.model,
        ...(order.revision ? { revision: order.revision } : {}),
        state,
        since: now,
      };
  }
}

/** `runner` reports `replica` of `model` in `state`. */
export function host(
  r: MutableRunner,
  model: string,
  replica: string,
  state: HostedState,
  since: number,
  extra: Partial<HostedEngine> = {},
): void {
  r.hosted = { replica, model, state, since, ...extra };
}
