/**
 * `GET /v1/models` lists to a key with a model list only the models it may call (of those
 * served); a key without a list, and an open gateway's callers, see every model.
 */
import { describe, expect, it } from 'vitest';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { bearer, getJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';
import { serversForEach } from '../support/servers.ts';

const LISTED = newKeyToken();
const ANY = newKeyToken();
const MODELS = ['sim-small', 'sim-other'];

const { cleanups } = serversForEach();

const ids = (answer: { json: any }): string[] => (answer.json.data as Array<{ id: string }>).map((m) => m.id);

describe('GET /v1/models', () => {
  it('lists to a key with a model list only the models it may call', async () => {
    const clientKeys = keyRingOf([
      { name: 'listed', token: LISTED, models: ['sim-small', 'not-served'] },
      { name: 'any', token: ANY },
    ]);
    const { url } = await startKeyedGateway(cleanups, { clientKeys }, { models: MODELS });
    expect(ids(await getJson(`${url}/v1/models`, bearer(LISTED)))).toEqual(['sim-small']);
    expect(ids(await getJson(`${url}/v1/models`, bearer(ANY)))).toEqual(['sim-other', 'sim-small']);
  });

  it('lists every model on an open gateway', async () => {
    const { url } = await startKeyedGateway(cleanups, {}, { models: MODELS });
    expect(ids(await getJson(`${url}/v1/models`))).toEqual(['sim-other', 'sim-small']);
  });
});
