/**
 * A client key with a model list is refused a model outside it the same way whether any runner
 * serves that model or not (403 GW_FORBIDDEN, the same message but for the name), on the calls
 * and on `GET /v1/models/{id}`: the answer tells the key what it may call, never what exists.
 * A key without a list still gets 404 GW_UNKNOWN_MODEL for a model nobody serves.
 */
import { describe, expect, it } from 'vitest';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { bearer, chatBody, getJson, postJson } from '../support/fleet.ts';
import { keyRingOf, startKeyedGateway } from '../support/keyed-gateway.ts';
import { serversForEach } from '../support/servers.ts';

const LISTED = newKeyToken();
const ANY = newKeyToken();
const MODELS = ['sim-small', 'sim-other'];

const { cleanups } = serversForEach();

async function gateway(): Promise<string> {
  const clientKeys = keyRingOf([
    { name: 'listed', token: LISTED, models: ['sim-small'], limits: { requestsPerMinute: 100 } },
    { name: 'any', token: ANY },
  ]);
  return (await startKeyedGateway(cleanups, { clientKeys }, { models: MODELS })).url;
}

/** Status, code and message of an answer, with the model's name taken out of the message. */
const shape = (answer: { status: number; json: any }, model: string) => [
  answer.status,
  answer.json.error.code,
  (answer.json.error.message as string).replace(model, '<model>'),
];

describe('a key asking for a model outside its list', () => {
  it('gets the same answer on a call whether the model is served or unknown, with its x-ratelimit headers', async () => {
    const url = await gateway();
    for (const path of ['/v1/chat/completions', '/v1/completions']) {
      const served = await postJson(url + path, chatBody({ model: 'sim-other', prompt: 'hi' }), bearer(LISTED));
      const unknown = await postJson(url + path, chatBody({ model: 'no-such-model', prompt: 'hi' }), bearer(LISTED));
      expect(shape(served, 'sim-other'), path).toEqual(shape(unknown, 'no-such-model'));
      expect(served.status, path).toBe(403);
      expect(served.json.error.message).toBe(
        'client key "listed" may not call model "sim-other": its models are sim-small',
      );
      expect(unknown.headers['x-ratelimit-limit-requests'], path).toBe('100');
    }
    const invokeServed = await postJson(`${url}/invoke/sim-other`, '{}', bearer(LISTED));
    const invokeUnknown = await postJson(`${url}/invoke/no-such-model`, '{}', bearer(LISTED));
    expect(shape(invokeServed, 'sim-other')).toEqual(shape(invokeUnknown, 'no-such-model'));
    // A key without a list learns what is not served, as anyone would.
    expect(
      (await postJson(`${url}/v1/chat/completions`, chatBody({ model: 'no-such-model' }), bearer(ANY))).json.error.code,
    ).toBe('GW_UNKNOWN_MODEL');
    expect((await postJson(`${url}/v1/chat/completions`, chatBody({ model: 'sim-other' }), bearer(ANY))).status).toBe(
      200,
    );
  });

  it('gets the same answer from GET /v1/models/{id} whether the model is served or unknown', async () => {
    const url = await gateway();
    const served = await getJson(`${url}/v1/models/sim-other`, bearer(LISTED));
    const unknown = await getJson(`${url}/v1/models/no-such-model`, bearer(LISTED));
    expect(shape(served, 'sim-other')).toEqual(shape(unknown, 'no-such-model'));
    expect(served.status).toBe(403);
    expect((await getJson(`${url}/v1/models/sim-small`, bearer(LISTED))).status).toBe(200);
    expect((await getJson(`${url}/v1/models/sim-other`, bearer(ANY))).status).toBe(200);
    expect((await getJson(`${url}/v1/models/no-such-model`, bearer(ANY))).status).toBe(404);
  });
});
