/**
 * The argument lists of a simulated engine and a runner on port 0 (placer/kernel/service-args.ts):
 * each flag stands only when its value is given, and the caller's own flags come last.
 */
import { describe, expect, it } from 'vitest';
import { runnerArgs, simEngineArgs } from '../../../placer/kernel/service-args.ts';
import type { RunnerArgs, SimEngineArgs } from '../../../placer/kernel/service-args.ts';

describe('simEngineArgs', () => {
  it.each<[string, SimEngineArgs, string[], string[]]>([
    ['no id', {}, [], ['sim-engine', '--port', '0']],
    ['an id', { id: 'sim-1' }, [], ['sim-engine', '--port', '0', '--engine-id', 'sim-1']],
    [
      'an id and flags of its own',
      { id: 'h100-2' },
      ['--profile', 'h100-8b'],
      ['sim-engine', '--port', '0', '--engine-id', 'h100-2', '--profile', 'h100-8b'],
    ],
  ])('returns the engine on port 0 with %s', (_, engine, extra, expected) => {
    expect(simEngineArgs(engine, extra)).toEqual(expected);
  });
});

describe('runnerArgs', () => {
  const engine = 'http://127.0.0.1:9000';
  const gateway = 'http://127.0.0.1:8080';
  it.each<[string, RunnerArgs, string[], string[]]>([
    [
      'an engine, of kind sim when not told',
      { engine },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'sim'],
    ],
    [
      'an engine of the kind given and an id',
      { engine, kind: 'openai', id: 'r-1' },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'openai', '--id', 'r-1'],
    ],
    [
      'no engine (waiting for orders), a gateway, and flags of its own',
      { id: 'runner-2', gateway },
      ['--slots', '4'],
      ['runner', '--port', '0', '--id', 'runner-2', '--gateway', gateway, '--slots', '4'],
    ],
    [
      'an engine and a gateway',
      { engine, id: 'runner-tls', gateway },
      [],
      ['runner', '--port', '0', '--engine', engine, '--engine-kind', 'sim', '--id', 'runner-tls', '--gateway', gateway],
    ],
  ])('returns the runner on port 0 with %s', (_, runner, extra, expected) => {
    expect(runnerArgs(runner, extra)).toEqual(expected);
  });
});
