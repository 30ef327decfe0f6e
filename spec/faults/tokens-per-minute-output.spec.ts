/**
 * Fault: tokensPerMinute did not limit output. A call was counted at a quarter of its prompt's
 * bytes, and a streamed call that did not ask for `stream_options.include_usage` was never
 * settled, so eight streamed calls of ~150 tokens each all ran under a 300 tokens/min key;
 * `max_tokens` and `n` were not looked at. Real processes: a sim engine producing 150 tokens per
 * answer, a runner, and a gateway with a keys file.
 *
 * What must hold: admission reserves a call's worst case (its prompt estimate plus max_tokens ×
 * n, or the key's default cap, which the engine is given), so the output a key gets stays within
 * its limit; a streamed call always has its usage measured (the engine is asked for it) while the
 * client's stream carries no usage it did not ask for; and x-ratelimit-remaining-tokens is exact:
 * the calls before settled at the engine's usage, this one at its reservation.
 */
import { describe, expect, it } from 'vitest';
import { newKeyToken } from '../../gateway/access/keys.ts';
import { request } from 'undici';
import { sseEvents } from '../support/faults.ts';
import { bearer, chatBody, eventually, postJson } from '../support/fleet.ts';
import { keyedFleetForSuite } from '../support/keyed-fleet.ts';

const CHAT = '/v1/chat/completions';
const TIGHT = newKeyToken();
const WIDE = newKeyToken();
const EXACT = newKeyToken();
/** What admission counts a prompt at before usage: a quarter of its bytes, rounded up. */
const estimate = (body: string) => Math.ceil(Buffer.byteLength(body) / 4);

const suite = keyedFleetForSuite(
  [
    { name: 'tight', token: TIGHT, limits: { tokensPerMinute: 300 } },
    { name: 'wide', token: WIDE, limits: { tokensPerMinute: 1000 } },
    { name: 'exact', token: EXACT, limits: { tokensPerMinute: 100_000 } },
  ],
  {
    nodes: 1,
    // 150 tokens per answer unless max_tokens says fewer; 5 ms apart, so calls sent together overlap.
    engineArgs: ['--output-tokens', '150', '--ttft-ms', '0', '--itl-ms', '5', '--max-num-seqs', '16'],
    runnerArgs: ['--slots', '16'],
    // A window long enough that no count slides out while the spec runs.
    gatewayArgs: ['--key-limit-window', '1h'],
  },
);

/** The tokens of a chat stream's `data:` payloads: one per event with content. */
function contentTokens(events: string[]): number {
  return events.filter((e) => e.startsWith('{') && (JSON.parse(e) as any).choices?.[0]?.delta?.content).length;
}

/** POSTs a call and reads its whole answer as text. */
async function post(
  body: string,
  token: string,
): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  const res = await request(`${suite.gw}${CHAT}`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...bearer(token) },
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

describe('fault: tokensPerMinute against output', () => {
  it('keeps eight streamed calls without include_usage within a 300 tokens/min key, and strips the usage it asked for', async () => {
    const body = chatBody({ stream: true });
    let produced = 0;
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const { status, text } = await post(body, TIGHT);
      statuses.push(status);
      if (status !== 200) {
        expect(status).toBe(429);
        expect(JSON.parse(text).error).toMatchObject({ code: 'GW_RATE_LIMITED' });
        continue;
      }
      const events = sseEvents(text);
      // The client did not ask for usage: none reaches it, and the stream still ends as it should.
      expect(text).not.toContain('"usage"');
      expect(events.at(-1)).toBe('[DONE]');
      produced += contentTokens(events);
    }
    expect(statuses[0]).toBe(200);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    expect(produced).toBeLessThanOrEqual(300);
  }, 60_000);

  it('reserves max_tokens × n at admission, so calls sent together get only what fits', async () => {
    const body = chatBody({ max_tokens: 100, n: 3 });
    const answers = await Promise.all(
      Array.from({ length: 4 }, () => postJson(`${suite.gw}${CHAT}`, body, bearer(WIDE))),
    );
    const admitted = answers.filter((a) => a.status === 200);
    // Each reserves its prompt's estimate plus 300 of the 1000: three fit, the fourth does not.
    expect(admitted).toHaveLength(3);
    const remaining = admitted.map((a) => Number(a.headers['x-ratelimit-remaining-tokens'])).sort((a, b) => b - a);
    const reserve = estimate(body) + 300;
    expect(remaining).toEqual([1000 - reserve, 1000 - 2 * reserve, 1000 - 3 * reserve]);
    const refused = answers.find((a) => a.status !== 200)!;
    expect(refused.status).toBe(429);
    expect(refused.json.error.code).toBe('GW_RATE_LIMITED');
  }, 60_000);

  it('says exactly what remains: earlier calls at the usage the engine reported, streamed ones included, this one at its reservation', async () => {
    const plain = chatBody({ max_tokens: 40 });
    const streamed = chatBody({ max_tokens: 40, stream: true });
    const first = await postJson(`${suite.gw}${CHAT}`, plain, bearer(EXACT));
    expect(first.status).toBe(200);
    const used = first.json.usage.total_tokens as number;
    expect(first.headers['x-ratelimit-remaining-tokens']).toBe(String(100_000 - estimate(plain) - 40));
    // The same prompt streamed: the engine's usage settles it although the client never sees it.
    const stream = await post(streamed, EXACT);
    expect(stream.status).toBe(200);
    expect(stream.headers['x-ratelimit-remaining-tokens']).toBe(String(100_000 - used - estimate(streamed) - 40));
    expect(stream.text).not.toContain('"usage"');
    expect(contentTokens(sseEvents(stream.text))).toBe(40);
    const last = await postJson(`${suite.gw}${CHAT}`, plain, bearer(EXACT));
    expect(last.headers['x-ratelimit-remaining-tokens']).toBe(String(100_000 - 2 * used - estimate(plain) - 40));
  }, 60_000);

  it("keeps the usage it asked for out of a detached stream's stored result too", async () => {
    const accepted = await postJson(`${suite.gw}${CHAT}`, chatBody({ max_tokens: 20, stream: true }), {
      ...bearer(EXACT),
      prefer: 'respond-async',
    });
    expect(accepted.status).toBe(202);
    const monitor = `${suite.gw}/v1/calls/${accepted.json.id}`;
    const read = async (url: string) => (await request(url, { headers: bearer(EXACT) })).body.text();
    await eventually(async () => JSON.parse(await read(monitor)).status === 'succeeded', 10_000, 'the call to succeed');
    const stored = await read(`${monitor}/result`);
    expect(stored).not.toContain('"usage"');
    expect(contentTokens(sseEvents(stored))).toBe(20);
    expect(sseEvents(stored).at(-1)).toBe('[DONE]');
  }, 60_000);
});
