import { describe, expect, it } from 'vitest';
import { BenchOptionError } from '../../k6/driver/index.ts';
import { phaseMemory } from '../../k6/driver/memory-sampler.ts';
import type { MemorySample } from '../../k6/driver/memory-sampler.ts';
import { nginxConfig } from '../../k6/driver/nginx.ts';
import {
  parseOpenFileLimit,
  parseStatusMemory,
  readOpenFileLimit,
  readProcessMemory,
  streamCeiling,
} from '../../k6/driver/process-memory.ts';
import {
  DEFAULT_STREAM_LEVELS,
  MEMORY_ENGINE,
  capNote,
  extrapolateKiB,
  perStreamKiB,
  planLevels,
  resolveStreamLevels,
  tokensUntil,
} from '../../k6/driver/scenarios/memory.ts';

// A real /proc/<pid>/status, trimmed: the fields around VmRSS share its shape, so a loose
// pattern would pick the wrong one.
const STATUS = `Name:\tnode
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t 1236440 kB
VmSize:\t 1170904 kB
VmLck:\t       0 kB
VmHWM:\t  179772 kB
VmRSS:\t  146148 kB
RssAnon:\t   98304 kB
RssFile:\t   47844 kB
VmData:\t  214628 kB
Threads:\t11
`;

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max file size             unlimited            unlimited            bytes
Max open files            20000                40000                files
Max locked memory         8388608              8388608              bytes
`;

describe('parseStatusMemory', () => {
  it('returns VmRSS and VmHWM in KiB, not the neighbouring Vm or Rss fields', () => {
    expect(parseStatusMemory(STATUS)).toEqual({ rssKiB: 146_148, hwmKiB: 179_772 });
  });

  it('returns undefined when a field is missing, as for a kernel thread', () => {
    expect(parseStatusMemory('Name:\tkthreadd\nState:\tS (sleeping)\n')).toBeUndefined();
    expect(parseStatusMemory(STATUS.replace(/^VmHWM:.*\n/m, ''))).toBeUndefined();
  });

  it('reads this process, whose RSS is at most its high-water mark', () => {
    const own = readProcessMemory(process.pid);
    expect(own).toBeDefined();
    expect(own!.rssKiB).toBeGreaterThan(1_024);
    expect(own!.rssKiB).toBeLessThanOrEqual(own!.hwmKiB);
  });

  it('returns undefined for a process that does not exist', () => {
    expect(readProcessMemory(2 ** 30)).toBeUndefined();
    expect(readProcessMemory(undefined)).toBeUndefined();
  });
});

describe('parseOpenFileLimit', () => {
  it('returns the soft limit, the one a process hits', () => {
    expect(parseOpenFileLimit(LIMITS)).toBe(20_000);
  });

  it('returns Infinity for unlimited and undefined when the line is missing', () => {
    expect(parseOpenFileLimit(LIMITS.replace('20000                40000', 'unlimited            unlimited'))).toBe(
      Number.POSITIVE_INFINITY,
    );
    expect(parseOpenFileLimit('Limit  Soft Limit  Hard Limit  Units\n')).toBeUndefined();
  });

  it('reads a positive limit for this process', () => {
    expect(readOpenFileLimit()).toBeGreaterThan(0);
  });
});

describe('streamCeiling', () => {
  it('returns (limit - reserve) / 2, rounded down: two sockets per stream', () => {
    expect(streamCeiling(20_000)).toBe(9_950);
    expect(streamCeiling(20_001, 100, 2)).toBe(9_950);
    expect(streamCeiling(1_024, 100, 2)).toBe(462);
  });

  it('returns 0 when the reserve takes the whole limit, and Infinity for no limit', () => {
    expect(streamCeiling(64)).toBe(0);
    expect(streamCeiling(Number.POSITIVE_INFINITY)).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('planLevels', () => {
  it('caps only the levels above the ceiling and marks them', () => {
    expect(planLevels([1_000, 10_000], 9_950)).toEqual([
      { requested: 1_000, streams: 1_000, capped: false },
      { requested: 10_000, streams: 9_950, capped: true },
    ]);
  });

  it('leaves a level exactly at the ceiling uncapped', () => {
    expect(planLevels([9_950], 9_950)).toEqual([{ requested: 9_950, streams: 9_950, capped: false }]);
  });
});

describe('capNote', () => {
  it('says what was asked, what was measured and the arithmetic behind it', () => {
    const note = capNote(planLevels([1_000, 10_000], 9_950), 20_000);
    expect(note).toContain('10000 streams asked for, 9950 measured');
    expect(note).toContain('(20000 - 100 reserved) / 2 = 9950');
    expect(note).not.toContain('1000 streams asked for');
  });

  it('returns nothing when no level was capped', () => {
    expect(capNote(planLevels([1_000], 9_950), 20_000)).toBe('');
  });
});

describe('perStreamKiB and extrapolateKiB', () => {
  it('returns the growth over idle divided by the streams', () => {
    expect(perStreamKiB(140_000, 460_000, 10_000)).toBe(32);
    expect(perStreamKiB(140_000, 130_000, 1_000)).toBe(-10);
  });

  it('returns NaN when there are no streams or a reading is missing', () => {
    expect(perStreamKiB(140_000, 460_000, 0)).toBeNaN();
    expect(perStreamKiB(Number.NaN, 460_000, 10)).toBeNaN();
    expect(perStreamKiB(140_000, Number.NaN, 10)).toBeNaN();
  });

  it('extrapolates linearly from idle, and gives back the measured figure at the measured count', () => {
    expect(extrapolateKiB(140_000, 32, 10_000)).toBe(460_000);
    const per = perStreamKiB(140_000, 458_400, 9_950);
    expect(extrapolateKiB(140_000, per, 9_950)).toBeCloseTo(458_400, 6);
  });
});

describe('tokensUntil', () => {
  const engine = { ttftMs: 200, itlMs: 5_000 };
  const lastTokenAt = (now: number, tokens: number): number => now + engine.ttftMs + (tokens - 1) * engine.itlMs;

  it.each([0, 1, 4_799, 4_800, 12_345, 59_800])(
    'lands the last token in (end - itl, end] when sent at %d ms for an end at 60000',
    (sentAt) => {
      const endAt = 60_000;
      const tokens = tokensUntil(endAt, sentAt, engine);
      expect(lastTokenAt(sentAt, tokens)).toBeLessThanOrEqual(endAt);
      expect(lastTokenAt(sentAt, tokens)).toBeGreaterThan(endAt - engine.itlMs);
    },
  );

  it('asks for at least one token when the end is already past', () => {
    expect(tokensUntil(1_000, 5_000, engine)).toBe(1);
  });

  it('is built on the engine the scenario starts', () => {
    expect(tokensUntil(MEMORY_ENGINE.ttftMs + 2 * MEMORY_ENGINE.itlMs, 0, MEMORY_ENGINE)).toBe(3);
  });
});

describe('resolveStreamLevels', () => {
  it('returns 1,000 and 10,000 when given nothing', () => {
    expect(resolveStreamLevels(undefined)).toEqual([1_000, 10_000]);
    expect(resolveStreamLevels(undefined)).toBe(DEFAULT_STREAM_LEVELS);
  });

  it('returns the counts ascending and frozen when given the CLI list of strings', () => {
    const levels = resolveStreamLevels(['5000', ' 20', '1000']);
    expect(levels).toEqual([20, 1_000, 5_000]);
    expect(Object.isFrozen(levels)).toBe(true);
  });

  it.each<[unknown, string]>([
    [[], 'streams must be a list of 1 to 4 stream counts, e.g. 1000,10000, got 0 counts'],
    [[1, 2, 3, 4, 5], 'streams must be a list of 1 to 4 stream counts, e.g. 1000,10000, got 5 counts'],
    ['1000', 'streams must be a list of 1 to 4 stream counts, e.g. 1000,10000, got "1000"'],
    [['1000', '10001'], 'streams must be between 1 and 10000, got 10001'],
    [[0], 'streams must be between 1 and 10000, got 0'],
    [['1k'], 'streams must be an integer, got "1k"'],
    [[2.5], 'streams must be an integer, got 2.5'],
    [['1000', 1000], 'streams must not repeat a count, got 1000 twice'],
  ])('throws BenchOptionError naming streams when given %j', (value, message) => {
    expect(() => resolveStreamLevels(value)).toThrow(BenchOptionError);
    expect(() => resolveStreamLevels(value)).toThrow(message);
  });
});

describe('phaseMemory', () => {
  const sample = (phase: string, rssKiB: number, open: number, hwmKiB = rssKiB): MemorySample => ({
    ms: 0,
    phase,
    rssKiB,
    hwmKiB,
    open,
  });

  it('summarises only the phase asked for: median, max, last, highest hwm, fewest open', () => {
    const samples = [
      sample('idle', 1, 0),
      sample('plateau', 30, 990),
      sample('plateau', 10, 1_000, 50),
      sample('plateau', 20, 1_000),
      sample('ended', 99, 0),
    ];
    expect(phaseMemory(samples, 'plateau')).toEqual({
      samples: 3,
      medianKiB: 20,
      maxKiB: 30,
      lastKiB: 20,
      hwmKiB: 50,
      fewestOpen: 990,
    });
  });

  it('returns NaN figures for a phase with no samples', () => {
    expect(phaseMemory([sample('idle', 1, 0)], 'plateau')).toMatchObject({
      samples: 0,
      medianKiB: Number.NaN,
      fewestOpen: Number.NaN,
    });
  });
});

describe('nginx holding many streams', () => {
  const config = nginxConfig('/tmp/x', 8080, [new URL('http://127.0.0.1:9001'), new URL('http://127.0.0.1:9002')], {
    buffering: false,
    files: 20_000,
  });

  it('gives the one worker the open-file limit it is given, and connection slots beyond it', () => {
    expect(config).toContain('worker_processes 1;');
    expect(config).toContain('worker_rlimit_nofile 20000;');
    expect(config).toContain('worker_connections 40000;');
  });

  it('balances over every runner and passes tokens on unbuffered', () => {
    expect(config).toMatch(/server 127\.0\.0\.1:9001;\n\s+server 127\.0\.0\.1:9002;/);
    expect(config).toContain('proxy_buffering off;');
    expect(config).toContain('listen 127.0.0.1:8080;');
  });
});
