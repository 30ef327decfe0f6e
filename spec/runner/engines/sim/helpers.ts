/**
 * Shared test helpers for the simulated engine: start one on port 0, read its counters, and
 * read an SSE body recording when each event arrived.
 */
import { request } from 'undici';
import { afterEach } from 'vitest';
import { createSimEngine, type SimEngine, type SimEngineOptions } from '../../../../runner/engines/sim/index.ts';
import { seededRandom } from '../../../../placer/kernel/index.ts';

const started: SimEngine[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((engine) => engine.close()));
});

/** Starts an engine on 127.0.0.1 port 0; it is closed after the test. */
export async function startEngine(options: SimEngineOptions = {}): Promise<{ engine: SimEngine; url: string }> {
  const engine = createSimEngine(options);
  started.push(engine);
  const { url } = await engine.listen(0, '127.0.0.1');
  return { engine, url };
}

/** POSTs JSON and returns the undici response. */
export function postJson(url: string, body: unknown, signal?: AbortSignal): ReturnType<typeof request> {
  return request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/**
 * Reads the `sluice_sim_*` counters and `vllm:*` families from `/metrics` into a map. Each sample
 * is there under its full name with labels (`x_total{status="429"}`) and under its bare name,
 * where the last sample of that name wins, which is enough for single-sample families.
 */
export async function readMetrics(url: string): Promise<Map<string, number>> {
  const { body } = await request(`${url}/metrics`);
  const values = new Map<string, number>();
  for (const line of (await body.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    const value = Number(line.slice(space + 1));
    values.set(line.slice(0, space), value);
    values.set(line.slice(0, space).replace(/\{.*\}$/, ''), value);
  }
  return values;
}

/** A prompt of exactly `count` tokens for /v1/completions: distinct words, each one token. */
export function words(count: number, prefix = 'w'): string {
  return Array.from({ length: count }, (_, index) => `${prefix}${index}`).join(' ');
}

/** A seeded uniform [0, 1) source, for tests that want many varied but repeatable draws. */
export { seededRandom };

/** A random source that returns `values` in order, then `rest` forever. */
export function scriptedRandom(values: readonly number[], rest = 0.5): () => number {
  let index = 0;
  return () => (index < values.length ? values[index++]! : rest);
}

/** One SSE `data:` event and the time (performance.now()) its bytes arrived. */
export interface TimedEvent {
  readonly data: string;
  readonly at: number;
}

/** Yields SSE events as they arrive, each stamped with the arrival time of the bytes that completed it. */
export async function* readEventsLive(body: AsyncIterable<Buffer | string>): AsyncGenerator<TimedEvent> {
  let pending = '';
  for await (const chunk of body) {
    const at = performance.now();
    pending += chunk.toString();
    let end: number;
    while ((end = pending.indexOf('\n\n')) !== -1) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (block.startsWith('data: ')) yield { data: block.slice('data: '.length), at };
    }
  }
}

/** Reads a whole SSE body into stamped events. */
export async function readEvents(body: AsyncIterable<Buffer | string>): Promise<TimedEvent[]> {
  const events: TimedEvent[] = [];
  for await (const event of readEventsLive(body)) events.push(event);
  return events;
}
