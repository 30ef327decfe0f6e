/**
 * `/invoke/{fn}` checks a key's model list against the body's `model` too, since the runner's
 * engine runs what the body names: a key limited to one model cannot reach another by naming
 * an allowed function in the path. A body the gateway cannot read as an engine would (JSON that
 * JSON.parse refuses, UTF-16) is refused to such a key; a body that is not JSON passes on the
 * path's check alone.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { postJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';
import { serversForEach } from '../support/servers.ts';

const LISTED = newKeyToken();
const ANY = newKeyToken();
const MODELS = ['sim-small', 'sim-other'];

const { cleanups } = serversForEach();

async function invoke(
  url: string,
  token: string,
  body: string | Buffer,
  contentType = 'application/json',
): Promise<[number, string | undefined]> {
  const res = await request(`${url}/invoke/sim-small`, {
    method: 'POST',
    body,
    headers: { authorization: `Bearer ${token}`, 'content-type': contentType },
  });
  const text = await res.body.text();
  return [res.statusCode, res.statusCode === 200 ? undefined : (JSON.parse(text).error.code as string)];
}

describe('/invoke/{fn} for a key with a model list', () => {
  it("refuses a body naming a model outside the list, whatever the path's function", async () => {
    const clientKeys = keyRingOf([
      { name: 'listed', token: LISTED, models: ['sim-small'] },
      { name: 'any', token: ANY },
    ]);
    const { url } = await startKeyedGateway(cleanups, { clientKeys }, { models: MODELS });
    const other = JSON.stringify({ model: 'sim-other', prompt: 'hi' });
    expect(await invoke(url, LISTED, other)).toEqual([403, 'GW_FORBIDDEN']);
    const refused = await postJson(`${url}/invoke/sim-small`, other, { authorization: `Bearer ${LISTED}` });
    expect(refused.json.error.message).toBe(
      'client key "listed" may not call model "sim-other": its models are sim-small',
    );
    expect(await invoke(url, LISTED, JSON.stringify({ model: 42 }))).toEqual([403, 'GW_FORBIDDEN']);
    // What a Python engine would still read: NaN, a byte-order mark, UTF-16.
    expect(await invoke(url, LISTED, '{"model": "sim-other", "temperature": NaN}')).toEqual([403, 'GW_FORBIDDEN']);
    expect(await invoke(url, LISTED, Buffer.from(`\ufeff${other}`, 'utf8'))).toEqual([403, 'GW_FORBIDDEN']);
    expect(await invoke(url, LISTED, Buffer.from(other, 'utf16le'))).toEqual([403, 'GW_FORBIDDEN']);
    // Allowed: the list's model, no model, and a body that is not JSON.
    expect(await invoke(url, LISTED, JSON.stringify({ model: 'sim-small', prompt: 'hi' }))).toEqual([200, undefined]);
    expect(await invoke(url, LISTED, JSON.stringify({ prompt: 'hi' }))).toEqual([200, undefined]);
    expect(await invoke(url, LISTED, Buffer.from([1, 2, 3, 4, 5]), 'application/octet-stream')).toEqual([
      200,
      undefined,
    ]);
    // A key without a list is not read.
    expect(await invoke(url, ANY, other)).toEqual([200, undefined]);
  });
});
