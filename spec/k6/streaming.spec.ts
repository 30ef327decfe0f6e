import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { distribution } from '../../k6/driver/index.ts';
import { cpuPerChunk, streaming, streamingRatios } from '../../k6/driver/scenarios/streaming.ts';
import type { ChunkCost, StreamingFigures } from '../../k6/driver/scenarios/streaming.ts';
import { createJsonLogger } from '../../placer/kernel/index.ts';
import { countEvents, gapsOf } from '../../k6/driver/stream-record.ts';
import { startService } from '../../gateway/cli/entry.ts';

describe('gapsOf', () => {
  it('returns the differences between consecutive arrivals', () => {
    expect(gapsOf([50, 70, 95, 95])).toEqual([20, 25, 0]);
  });

  it('returns no gaps for zero or one arrival', () => {
    expect(gapsOf([])).toEqual([]);
    expect(gapsOf([3])).toEqual([]);
  });
});

describe('countEvents', () => {
  it('returns one per data line that starts an event', () => {
    expect(countEvents('data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n')).toBe(3);
  });

  it('returns 0 for the tail of an event split across chunks, and ignores data: inside a payload', () => {
    expect(countEvents('1}\n\n')).toBe(0);
    expect(countEvents('data: {"text":"data: no"}\n\n')).toBe(1);
  });
});

describe('streamingRatios', () => {
  const figures = (target: string, first: number[], gaps: number[]): StreamingFigures => ({
    target,
    calls: first.length,
    chunks: first.length,
    errors: {},
    headers: distribution(first),
    firstChunk: distribution(first),
    gap: distribution(gaps),
    eventsPerChunk: 1,
  });

  it('returns subject over baseline for the first chunk and the gap', () => {
    const rows = streamingRatios([figures('direct', [50], [20]), figures('sluice', [55], [20])], 'sluice', 'direct');
    expect(rows.map((r) => [r.measure, r.p50])).toEqual([
      ['first chunk', 1.1],
      ['gap', 1],
    ]);
  });

  it('returns no rows when a target is missing', () => {
    expect(streamingRatios([figures('direct', [50], [20])], 'sluice', 'direct')).toEqual([]);
  });
});

describe('cpuPerChunk', () => {
  it('divides the gateway over the sluice chunks only, and the runner and engine over every chunk', () => {
    // 2 s measured: 10 % of a core is 200 ms of CPU.
    const rows = cpuPerChunk({ driver: 40, engine: 10, runner: 20, gateway: 15 }, 2_000, [
      { target: 'direct', chunks: 1_000 },
      { target: 'sluice', chunks: 1_000 },
    ]);
    expect(rows).toEqual([
      { process: 'engine', cpu: 10, chunks: 2_000, usPerChunk: 100 },
      { process: 'runner', cpu: 20, chunks: 2_000, usPerChunk: 200 },
      { process: 'gateway', cpu: 15, chunks: 1_000, usPerChunk: 300 },
    ]);
  });

  it('returns NaN per chunk for a process that relayed none', () => {
    expect(cpuPerChunk({ gateway: 5 }, 1_000, [{ target: 'direct', chunks: 10 }])[0]!.usPerChunk).toBeNaN();
  });
});

describe('streaming scenario on real processes', () => {
  it('prints the cpu per relayed chunk of the engine, the runner and the gateway', { timeout: 120_000 }, async () => {
    const out = await mkdtemp(join(tmpdir(), 'sluice-streaming-spec-'));
    let text = '';
    try {
      // The shortest bounded run: 1 s, 2 streams at once, no warm-up.
      await streaming.run(
        { duration: 1_000, warmup: 0, connections: 2, out, logLevel: 'warn' },
        {
          env: process.env,
          startService,
          logger: createJsonLogger({ level: 'silent' }),
          write: (t) => void (text += t),
          progress: () => undefined,
        },
      );
      expect(text).toMatch(/^process\s+cpu %\s+chunks\s+us\/chunk$/m);
      const [json] = text.match(/\S+streaming-\S+\.json/) ?? [];
      const report = JSON.parse(await readFile(json!, 'utf8')) as {
        figures: StreamingFigures[];
        cpuPerChunk: ChunkCost[];
      };
      const chunks = Object.fromEntries(report.figures.map((f) => [f.target, f.chunks]));
      expect(chunks.direct).toBeGreaterThan(0);
      expect(chunks.sluice).toBeGreaterThan(0);
      const byProcess = Object.fromEntries(report.cpuPerChunk.map((r) => [r.process, r]));
      expect(Object.keys(byProcess).sort()).toEqual(['engine', 'gateway', 'runner']);
      expect(byProcess.gateway!.chunks).toBe(chunks.sluice);
      expect(byProcess.runner!.chunks).toBe(chunks.direct! + chunks.sluice!);
      for (const r of report.cpuPerChunk) expect(r.usPerChunk, r.process).toBeGreaterThan(0);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});
