/**
 * A keyed gateway whose keys file is rewritten to `[]` stays keyed: every client call is refused
 * with 401 (whatever token it sends, or none), an error is logged once, `/readyz` lists
 * `no_client_keys` and `/healthz` still says `keys`; a key written back is taken again. Open or
 * keyed is settled at start-up from settings, never from how many keys there are.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KeyRing, hashToken, newKeyToken } from '../../gateway/access/keys.ts';
import { watchKeysFile } from '../../gateway/access/keys-file.ts';
import { bearer, chatBody, getJson, postJson } from '../support/fleet.ts';
import { readyReasons, recordingLogger, startKeyedGateway } from '../support/keyed-gateway.ts';
import type { LoggedLine } from '../support/keyed-gateway.ts';
import { serversForEach } from '../support/servers.ts';

const CHAT = '/v1/chat/completions';
const TOKEN = newKeyToken();
const entry = (name: string, token: string) => ({ name, hash: `sha256:${hashToken(token)}` });

const { cleanups } = serversForEach();

describe('a keys file rewritten to []', () => {
  it('refuses every client call with 401, logs an error once and says so on /readyz; a key written back is taken again', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-keys-emptied-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, 'keys.json');
    await writeFile(file, JSON.stringify([entry('ci', TOKEN)]));
    const lines: LoggedLine[] = [];
    const logger = recordingLogger(lines);
    const ring = new KeyRing({ logger });
    // As `sluice gateway --keys keys.json` starts: the file's keys in a ring. The spec reloads it
    // itself (as SIGHUP does); the watcher's own reload waits longer than the spec runs, so it
    // never races the spec's.
    const watch = await watchKeysFile(file, ring, { logger, debounceMs: 600_000 });
    cleanups.push(async () => watch.close());
    const { url } = await startKeyedGateway(cleanups, { clientKeys: ring, logger });

    expect((await postJson(url + CHAT, chatBody(), bearer(TOKEN))).status).toBe(200);
    expect(await readyReasons(url)).not.toContain('no_client_keys');

    await writeFile(file, '[]');
    // What a change of the file, or SIGHUP, does.
    expect(await watch.reload()).toEqual({ kind: 'loaded', keys: 0 });

    for (const headers of [{}, bearer(TOKEN), bearer(newKeyToken()), bearer('sk-anything')]) {
      const refused = await postJson(url + CHAT, chatBody(), headers);
      expect([refused.status, refused.json.error?.code]).toEqual([401, 'GW_UNAUTHORIZED']);
    }
    expect((await getJson(`${url}/v1/models`)).status).toBe(401);
    expect((await getJson(`${url}/healthz`)).json.clients).toBe('keys');
    const ready = await getJson(`${url}/readyz`);
    expect(ready.status).toBe(503);
    expect(ready.json.reasons).toContain('no_client_keys');
    await readyReasons(url);
    const errors = lines.filter((line) => line.level === 'error');
    expect(errors).toEqual([
      expect.objectContaining({ msg: 'no client key left; every client call is refused', reason: 'no_client_keys' }),
    ]);
    // Nothing the log holds is the key.
    expect(JSON.stringify(lines)).not.toContain(TOKEN);

    await writeFile(file, JSON.stringify([entry('ci', TOKEN)]));
    await watch.reload();
    expect((await postJson(url + CHAT, chatBody(), bearer(TOKEN))).status).toBe(200);
    expect(await readyReasons(url)).not.toContain('no_client_keys');
    expect((await postJson(url + CHAT, chatBody())).status).toBe(401);
    expect(lines.filter((line) => line.msg === 'client keys back; client calls taken again')).toHaveLength(1);
  });
});
