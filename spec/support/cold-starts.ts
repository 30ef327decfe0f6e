/**
 * A stand-in for the gateway's control plane in cold-start specs: {@link ColdStarts} over a fixed
 * set of deployed models, starting nothing and recording every wake.
 */
import type { ColdStarts, StartFailure } from '../../gateway/control/cold-start.ts';

/** A {@link ColdStarts} over a fixed set of models that records its wakes; see {@link recordingColdStarts}. */
export interface RecordingColdStarts extends ColdStarts {
  /** The deployed models: add or delete to change what {@link ColdStarts.deployed} answers. */
  readonly models: Set<string>;
  /** Every wake, in order, by model. */
  readonly wakes: string[];
  /** What {@link ColdStarts.failed} answers, by model: set one to fail a model's start. */
  readonly failures: Map<string, StartFailure>;
}

/**
 * Cold starts over a fixed set of deployed models, starting nothing: each wake is recorded and
 * handed to `onWake` (a spec starts a runner there, or later).
 */
export function recordingColdStarts(models: Iterable<string>, onWake?: (model: string) => void): RecordingColdStarts {
  const deployed = new Set(models);
  const wakes: string[] = [];
  const failures = new Map<string, StartFailure>();
  return {
    models: deployed,
    wakes,
    failures,
    deployed: (model) => deployed.has(model),
    failed: (model) => failures.get(model),
    wake(model) {
      wakes.push(model);
      onWake?.(model);
    },
  };
}
