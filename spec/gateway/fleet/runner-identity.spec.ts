/**
 * One runner, one name: a static runner (from --runners) is known by its URL's `host:port` only
 * until its status says its own id, which the pool then takes, so the gateway's labels, spans and
 * logs name it as the runner's own do. Runners here are status pages on 127.0.0.1, port 0.
 */
import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { FleetPool } from '../../../gateway/fleet/pool.ts';
import type { LogFields, Logger } from '../../../placer/kernel/index.ts';
import { FakeClock } from '../../placer/fake.ts';
import { serversForEach } from '../../support/servers.ts';

const { cleanups, listen } = serversForEach();

/** A runner's status page saying `id` (none when undefined), serving `m`. */
function statusPage(id: string | undefined): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ...(id === undefined ? {} : { id }), ready: true, models: ['m'] }));
  });
  return listen(server);
}

/** A pool over `urls` and what it told: the ids placers were told to forget, and its log lines. */
function poolOver(urls: string[]): { pool: FleetPool; forgotten: string[]; lines: Array<[string, LogFields]> } {
  const forgotten: string[] = [];
  const lines: Array<[string, LogFields]> = [];
  const logger: Logger = {
    debug: () => {},
    info: (msg, fields) => void lines.push([msg, fields ?? {}]),
    warn: (msg, fields) => void lines.push([msg, fields ?? {}]),
    error: () => {},
    child: () => logger,
  };
  const pool = new FleetPool({
    urls: urls.map((url) => new URL(url)),
    connectTimeout: 1_000,
    responseTimeout: 1_000,
    streamIdleTimeout: 60_000,
    clock: new FakeClock(),
    statusInterval: 60_000,
    breaker: { threshold: 2, openFor: 30_000, closeAfter: 2 },
    logger,
    onRemove: (ids) => forgotten.push(...ids),
  });
  cleanups.push(() => pool.close({ abortCalls: true }));
  return { pool, forgotten, lines };
}

const hostOf = (url: string): string => new URL(url).host;

describe('FleetPool: a static runner takes the id its status says', () => {
  it('returns the runner under its own id after the first probe, the old one forgotten by placers', async () => {
    const url = await statusPage('runner-7');
    const { pool, forgotten, lines } = poolOver([url]);
    const before = pool.runnerList;
    expect(before.map((r) => r.id)).toEqual([hostOf(url)]);
    await pool.refresh();
    expect(pool.runnerList.map((r) => r.id)).toEqual(['runner-7']);
    // A new list, so placers keyed on the list's identity see the change.
    expect(pool.runnerList).not.toBe(before);
    expect(pool.get('runner-7')?.transport.url.href).toBe(`${url}/`);
    expect(pool.get(hostOf(url))).toBeUndefined();
    expect(forgotten).toEqual([hostOf(url)]);
    expect(lines).toContainEqual(['runner named', { runner: 'runner-7', was: hostOf(url), url }]);
    // The next probe changes nothing.
    await pool.refresh();
    expect(forgotten).toEqual([hostOf(url)]);
  });

  it('returns the host:port name for a runner whose status has no id', async () => {
    const url = await statusPage(undefined);
    const { pool, forgotten } = poolOver([url]);
    await pool.refresh();
    expect(pool.runnerList.map((r) => r.id)).toEqual([hostOf(url)]);
    expect(forgotten).toEqual([]);
  });

  it('keeps the host:port name, warned of once, when another runner of the pool holds the id', async () => {
    const first = await statusPage('twin');
    const second = await statusPage('twin');
    const { pool, lines } = poolOver([first, second]);
    await pool.refresh();
    await pool.refresh();
    expect(pool.runnerList.map((r) => r.id).sort()).toEqual(['twin', hostOf(second)].sort());
    expect(lines.filter(([msg]) => msg === 'runner id taken')).toEqual([
      ['runner id taken', { runner: hostOf(second), id: 'twin' }],
    ]);
  });
});
