import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { registerKeyRoutes } from '../../../gateway/access/key-routes.ts';
import { KeyRing, hashToken } from '../../../gateway/access/keys.ts';
import { parseKeysFile } from '../../../gateway/access/keys-file.ts';
import { errorResponse } from '../../../gateway/errors.ts';
import { SluiceError } from '../../../placer/kernel/index.ts';

const FILE_TOKEN = `sk-sluice-${'f'.repeat(43)}`;

function app() {
  const keys = new KeyRing({ clock: { now: () => 42 } });
  keys.setFileKeys(
    parseKeysFile(JSON.stringify([{ name: 'from-file', hash: `sha256:${hashToken(FILE_TOKEN)}` }]), 'k'),
  );
  const hono = new Hono();
  registerKeyRoutes(hono as never, keys);
  hono.onError((error, c) => (error instanceof SluiceError ? errorResponse(c, error) : c.text('unexpected', 500)));
  return { hono, keys };
}

const post = (body: string) => ({ method: 'POST', body, headers: { 'content-type': 'application/json' } });

describe('/v1/keys', () => {
  it('makes a key, answers its token once with no-store, and the key works at once', async () => {
    const { hono, keys } = app();
    const res = await hono.request(
      '/v1/keys',
      post(JSON.stringify({ name: 'ci', models: ['m1'], limits: { requestsPerMinute: 10 } })),
    );
    expect(res.status).toBe(201);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const created = (await res.json()) as Record<string, unknown>;
    expect(created).toEqual({
      object: 'client_key',
      key: expect.stringMatching(/^sk-sluice-/),
      id: expect.any(String),
      name: 'ci',
      models: ['m1'],
      limits: { requestsPerMinute: 10 },
      source: 'api',
      createdAt: 42,
    });
    expect(keys.lookup(created.key as string)?.id).toBe(created.id);
    const list = (await (await hono.request('/v1/keys')).json()) as { data: Record<string, unknown>[] };
    expect(list.data.map((k) => [k.name, k.source])).toEqual([
      ['from-file', 'file'],
      ['ci', 'api'],
    ]);
    expect(JSON.stringify(list)).not.toContain(created.key as string);
    expect(JSON.stringify(list)).not.toContain(hashToken(created.key as string));
    expect(await (await hono.request(`/v1/keys/${created.id}`)).json()).toMatchObject({ id: created.id, name: 'ci' });
  });

  it('revokes an API key, and refuses a file key, an unknown id and a bad body with their codes', async () => {
    const { hono, keys } = app();
    const created = (await (await hono.request('/v1/keys', post('{"name":"gone"}'))).json()) as {
      id: string;
      key: string;
    };
    expect((await hono.request(`/v1/keys/${created.id}`, { method: 'DELETE' })).status).toBe(204);
    expect(keys.lookup(created.key)).toBeUndefined();
    const codeOf = async (res: Response) => [
      res.status,
      ((await res.json()) as { error: { code: string } }).error.code,
    ];
    expect(await codeOf(await hono.request(`/v1/keys/${created.id}`, { method: 'DELETE' }))).toEqual([
      404,
      'GW_KEY_NOT_FOUND',
    ]);
    expect(await codeOf(await hono.request(`/v1/keys/${created.id}`))).toEqual([404, 'GW_KEY_NOT_FOUND']);
    const fileId = keys.list()[0]!.id;
    expect(await codeOf(await hono.request(`/v1/keys/${fileId}`, { method: 'DELETE' }))).toEqual([
      409,
      'GW_KEY_IN_FILE',
    ]);
    expect(await codeOf(await hono.request('/v1/keys', post('{"name":')))).toEqual([400, 'GW_INVALID_JSON']);
    expect(await codeOf(await hono.request('/v1/keys', post('{"name":"x","limits":{"rpm":1}}')))).toEqual([
      400,
      'GW_INVALID_BODY',
    ]);
  });
});
