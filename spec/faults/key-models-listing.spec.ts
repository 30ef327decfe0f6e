/**
 * `GET /v1/models` lists to a key with a model list only the models it may call (of those
 * served); a key without a list, and an open gateway's callers, see every model.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { getJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';

const LISTED = newKeyToken();
const ANY = newKeyToken();
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const MODELS = ['sim-small', 'sim-other'];

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!().catch(() => {});
});

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
