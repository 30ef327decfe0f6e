/**
 * Fault: OpenAI routes a client expects were missing. `GET /v1/models/{id}` answered 404
 * GW_ROUTE_NOT_FOUND; `POST /v1/responses` (vLLM serves it; the Vercel AI SDK's default provider
 * calls it) was never relayed; answers carried no `x-request-id`, which OpenAI's SDK reads into
 * `_request_id` and error.requestID. Driven here with the official OpenAI SDK, as a client would.
 */
import type { IncomingHttpHeaders } from 'node:http';
import OpenAI from 'openai';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { chatBody, postJson } from '../support/fleet.ts';
import { startInProcessFront, startScriptedEngine } from '../support/scripted-engine.ts';
import type { InProcessFront, ScriptedEngine } from '../support/scripted-engine.ts';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

const MODELS = ['sim-small', 'org/model-x'];
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** An engine that serves /v1/responses as vLLM does (in short), and records every call. */
const responsesEngine = (seen: Seen[]) =>
  startScriptedEngine(MODELS, (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.once('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const model = (JSON.parse(body) as { model: string }).model;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `resp_${seen.length}`,
          object: 'response',
          created_at: 1,
          model,
          status: 'completed',
          output: [
            {
              type: 'message',
              id: 'msg_1',
              role: 'assistant',
              status: 'completed',
              content: [{ type: 'output_text', text: 'hi there', annotations: [] }],
            },
          ],
        }),
      );
    });
  });

describe('fault: OpenAI routes and x-request-id', () => {
  const seen: Seen[] = [];
  let front: InProcessFront;
  let gw: string;
  let client: OpenAI;

  beforeAll(async () => {
    front = await startInProcessFront(await responsesEngine(seen));
    gw = front.url;
    client = new OpenAI({ baseURL: `${gw}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => front?.close());
  beforeEach(() => {
    seen.length = 0;
  });

  it('relays POST /v1/responses to the engine once, with the call id as x-request-id both ways', async () => {
    const { data, response } = await client.responses
      .create({ model: 'sim-small', instructions: 'Be brief.', input: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    // withResponse's data type does not declare the id the SDK attaches; read it as it is.
    const requestId = (data as { _request_id?: string | null })._request_id;
    expect(data.output_text).toBe('hi there');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ method: 'POST', url: '/v1/responses' });
    expect(JSON.parse(seen[0]!.body)).toMatchObject({ model: 'sim-small', instructions: 'Be brief.' });
    const callId = response.headers.get('sluice-call-id');
    expect(callId).toMatch(UUID_V7);
    expect(requestId).toBe(callId);
    expect(response.headers.get('x-request-id')).toBe(callId);
    expect(seen[0]!.headers['x-request-id']).toBe(callId);
  });

  it("keeps the client's own x-request-id, answers with it and forwards it to the engine", async () => {
    const data = await client.responses.create(
      { model: 'sim-small', input: 'hello' },
      { headers: { 'x-request-id': 'client-trace-7' } },
    );
    expect(data._request_id).toBe('client-trace-7');
    expect(seen.map((s) => s.headers['x-request-id'])).toEqual(['client-trace-7']);
  });

  it.each([
    ['too long', 'x'.repeat(201)],
    ['not visible ASCII', 'has space'],
  ])('replaces a client x-request-id that is %s with the call id, toward the engine too', async (_why, id) => {
    const res = await postJson(`${gw}/v1/chat/completions`, chatBody(), { 'x-request-id': id });
    expect(res.status).toBe(200);
    expect(res.headers['x-request-id']).toBe(res.headers['sluice-call-id']);
    expect(seen.map((s) => s.headers['x-request-id'])).toEqual([res.headers['sluice-call-id']]);
  });

  it('answers GET /v1/models/{id} with the model object, slashes in the name included', async () => {
    const model = await client.models.retrieve('sim-small');
    expect(model).toMatchObject({ id: 'sim-small', object: 'model', owned_by: 'sluice' });
    expect(model._request_id).toMatch(UUID_V7);
    // The SDK percent-encodes the slash; a hand-written client may not.
    expect(await client.models.retrieve('org/model-x')).toMatchObject({ id: 'org/model-x', object: 'model' });
    const raw = await request(`${gw}/v1/models/org/model-x`);
    expect(raw.statusCode).toBe(200);
    expect(await raw.body.json()).toMatchObject({ id: 'org/model-x', object: 'model' });
  });

  it('answers GET /v1/models/{id} of a model no runner serves with 404 GW_UNKNOWN_MODEL, request id included', async () => {
    const error = await client.models.retrieve('gpt-9').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    const notFound = error as InstanceType<typeof OpenAI.NotFoundError>;
    expect(notFound.code).toBe('GW_UNKNOWN_MODEL');
    expect(notFound.type).toBe('not_found_error');
    expect(notFound.requestID).toMatch(UUID_V7);
  });

  it.each([
    ['GET', '/healthz', 200],
    ['GET', '/v1/models', 200],
    ['GET', '/no/such/route', 404],
    ['GET', '/v1/chat/completions', 405],
    ['GET', '/v1/calls/unknown-id', 404],
  ])('puts x-request-id on %s %s (%i), and echoes a sane client id', async (method, path, status) => {
    const fresh = await request(`${gw}${path}`, { method: method as 'GET' });
    await fresh.body.dump();
    expect(fresh.statusCode).toBe(status);
    expect(fresh.headers['x-request-id']).toMatch(UUID_V7);
    const echoed = await request(`${gw}${path}`, { method: method as 'GET', headers: { 'x-request-id': 'abc-123' } });
    await echoed.body.dump();
    expect(echoed.headers['x-request-id']).toBe('abc-123');
  });

  it('puts the call id in x-request-id on a call refused before placement', async () => {
    const res = await postJson(`${gw}/v1/chat/completions`, '{not json');
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe('GW_INVALID_JSON');
    expect(res.headers['x-request-id']).toMatch(UUID_V7);
    expect(seen).toEqual([]);
  });
});

describe('fault: /v1/responses in front of an engine that does not serve it', () => {
  let engine: ScriptedEngine;
  let front: InProcessFront;
  let gw: string;

  beforeAll(async () => {
    // An engine older than the Responses API: vLLM's 404 for a path it does not know.
    engine = await startScriptedEngine(MODELS, (req, res) => {
      req.resume();
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ error: { message: `Invalid URL (POST ${req.url})`, type: 'NotFoundError', code: 404 } }),
      );
    });
    front = await startInProcessFront(engine);
    gw = front.url;
  });
  afterAll(() => front?.close());

  it("relays the engine's own 404 once, not retried elsewhere", async () => {
    const res = await postJson(`${gw}/v1/responses`, JSON.stringify({ model: 'sim-small', input: 'hello' }));
    expect(res.status).toBe(404);
    // The engine's code, not the gateway's GW_ROUTE_NOT_FOUND: the call was routed and relayed.
    expect(res.json.error).toMatchObject({ type: 'NotFoundError', code: 404 });
    expect(res.headers['sluice-runner-id']).toBeDefined();
    expect(res.headers['x-request-id']).toBe(res.headers['sluice-call-id']);
    expect(engine.calls()).toBe(1);
  });
});
