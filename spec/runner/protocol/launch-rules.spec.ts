/** runner/protocol/launch-rules.ts: reserved options reached in every spelling the kind's parser reads. */
import { describe, expect, it } from 'vitest';
import { reservedFlagOf } from '../../../runner/protocol/index.ts';
import type { ProfileKind } from '../../../runner/protocol/index.ts';

describe('reservedFlagOf', () => {
  it.each([
    // argparse (vLLM, SGLang): any prefix of a long option, `=` forms, `_` for `-`, attached and prefixed short forms.
    ['vllm', '--host', '--host'],
    ['vllm', '--ho=0.0.0.0', '--host'],
    ['vllm', '--h', '--host'],
    ['vllm', '--po', '--port'],
    ['vllm', '--tensor_parallel_size=2', '--tensor-parallel-size'],
    ['vllm', '-tp2', '-tp'],
    ['vllm', '-tp=2', '-tp'],
    ['vllm', '-t', '-tp'],
    ['vllm', '--conf=x.yaml', '--config'],
    ['vllm', '--ud', '--uds'],
    ['sglang', '--model-p', '--model-path'],
    ['sglang', '--tp', '--tp'],
    // clap (TGI): exact long names, `=`, `-p8000`, `-p=8000`, clustered one-letter options.
    ['tgi', '--hostname=0.0.0.0', '--hostname'],
    ['tgi', '-p8000', '-p'],
    ['tgi', '-p=8000', '-p'],
    ['tgi', '-xp8000', '-p'],
    // llama.cpp: exact names, `_` read as `-`, `=` refused too.
    ['llamacpp', '--port=1', '--port'],
    ['llamacpp', '-m', '-m'],
    ['llamacpp', '--hf_repo', '--hf-repo'],
    ['sim', '--config', '--config'],
  ] as const)('%s reads %s as %s', (kind, arg, flag) => {
    expect(reservedFlagOf(kind as ProfileKind, arg)?.flag).toBe(flag);
  });

  it.each([
    ['vllm', '--max-model-len'],
    ['vllm', '0.0.0.0'],
    ['vllm', '-1'],
    ['vllm', '--'],
    ['vllm', '--hostile-but-no-such-prefix'],
    ['vllm', '-pp'],
    ['tgi', '--hostnam'],
    ['tgi', '--max-input-tokens'],
    ['llamacpp', '--po'],
    ['llamacpp', '-mg'],
    ['llamacpp', '-ngl'],
    ['sim', '--ttft-ms=0'],
  ] as const)('%s reads %s as no reserved option', (kind, arg) => {
    expect(reservedFlagOf(kind as ProfileKind, arg)).toBeUndefined();
  });
});
