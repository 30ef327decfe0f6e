/**
 * Fault: an engine answering a status that has no body (204 No Content, 304 Not Modified). The
 * runner declared its trailers on every sync answer, Node refuses trailers on a bodiless answer
 * (ERR_HTTP_TRAILER_INVALID), and the throw was uncaught: the runner process died. Now a bodiless
 * answer carries the execution time as a header instead, the client gets the engine's status, and
 * the runner keeps serving.
 */
import { describe, expect, it } from 'vitest';
import { childFrontForSuite, startScriptedEngine } from '../support/scripted-engine.ts';

/** An engine that answers POST /invoke/... with the status named in the path, and no body. */
const bodilessEngine = () =>
  startScriptedEngine(['quiet'], (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(req.url?.endsWith('304') ? 304 : 204, { etag: '"v1"' });
      res.end();
    });
  });

describe('an engine answering a status without a body', () => {
  const front = childFrontForSuite(bodilessEngine);

  it.each([204, 304])('relays %i once, and the runner lives on', async (status) => {
    const before = front.engine.calls();
    const res = await fetch(`${front.gateway.url}/invoke/quiet-${status}`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(status);
    expect(await res.text()).toBe('');
    expect(res.headers.get('etag')).toBe('"v1"');
    expect(front.engine.calls()).toBe(before + 1);
    const status2 = await fetch(`${front.runner.url}/status`);
    expect(status2.status).toBe(200);
  });

  it('keeps serving calls after them', async () => {
    const res = await fetch(`${front.gateway.url}/invoke/quiet-204`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(204);
  });
});
