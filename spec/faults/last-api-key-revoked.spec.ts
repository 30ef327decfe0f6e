/**
 * Revoking the last key made through /v1/keys never opens a gateway. A gateway started with
 * `requireKeys` (`--require-keys`) with no key yet refuses client calls and says why on
 * `/readyz`; once its last key is revoked it refuses them again (401, an error logged once).
 * A gateway started open stays open, and refuses to make a key (409 GW_CLIENTS_OPEN) rather
 * than let an operator believe the key closed it.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { bearer, chatBody, getJson, postJson } from '../support/fleet.ts';
import { asKeyedOperator, readyReasons, recordingLogger, startKeyedGateway } from '../support/keyed-gateway.ts';
import type { LoggedLine } from '../support/keyed-gateway.ts';
import { serversForEach } from '../support/servers.ts';

const CHAT = '/v1/chat/completions';

const { cleanups } = serversForEach();

describe('the last API key revoked', () => {
  it('leaves a gateway started with requireKeys refusing every client call, logged once and on /readyz', async () => {
    const lines: LoggedLine[] = [];
    const { url } = await startKeyedGateway(cleanups, { requireKeys: true, logger: recordingLogger(lines) });
    // Started keyed with no key yet: a warning, not an error, and not ready for clients.
    expect(
      lines.filter((l) => l.msg === 'no client key yet; every client call is refused until one is made'),
    ).toHaveLength(1);
    expect(await readyReasons(url)).toContain('no_client_keys');
    expect((await postJson(url + CHAT, chatBody())).status).toBe(401);

    const made = await postJson(`${url}/v1/keys`, JSON.stringify({ name: 'only' }), asKeyedOperator);
    expect(made.status).toBe(201);
    const token = made.json.key as string;
    expect((await postJson(url + CHAT, chatBody(), bearer(token))).status).toBe(200);
    expect(await readyReasons(url)).not.toContain('no_client_keys');

    const revoked = await request(`${url}/v1/keys/${made.json.id}`, { method: 'DELETE', headers: asKeyedOperator });
    expect(revoked.statusCode).toBe(204);
    await revoked.body.dump();
    for (const headers of [{}, bearer(token), bearer('sk-anything')]) {
      const refused = await postJson(url + CHAT, chatBody(), headers);
      expect([refused.status, refused.json.error?.code]).toEqual([401, 'GW_UNAUTHORIZED']);
    }
    expect(await readyReasons(url)).toContain('no_client_keys');
    expect(await readyReasons(url)).toContain('no_client_keys');
    expect(lines.filter((l) => l.level === 'error')).toEqual([
      expect.objectContaining({ msg: 'no client key left; every client call is refused' }),
    ]);
    expect((await getJson(`${url}/healthz`)).json.clients).toBe('keys');
    expect(JSON.stringify(lines)).not.toContain(token);
  });

  it('cannot happen on a gateway started open: it refuses to make a key, and stays open', async () => {
    const { url } = await startKeyedGateway(cleanups, {});
    const made = await postJson(`${url}/v1/keys`, JSON.stringify({ name: 'would-close' }), asKeyedOperator);
    expect([made.status, made.json.error?.code]).toEqual([409, 'GW_CLIENTS_OPEN']);
    expect(made.json.error.message).toContain('--require-keys');
    expect(made.text).not.toContain('sk-sluice-');
    expect((await postJson(url + CHAT, chatBody())).status).toBe(200);
    expect((await getJson(`${url}/healthz`)).json.clients).toBe('open');
    expect(await readyReasons(url)).not.toContain('no_client_keys');
  });
});
