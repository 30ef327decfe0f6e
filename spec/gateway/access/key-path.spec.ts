/**
 * A client key's limits on a real gateway's call path (a real runner and simulated engine): the
 * tokens a call is counted at are settled to the usage the engine reports, for a JSON answer and
 * for a stream, and the concurrent call is given back at the end. The limiter's clock stands still,
 * so every count is exact.
 */
import { describe, expect, it } from 'vitest';
import { KeyRing, hashToken } from '../../../gateway/access/keys.ts';
import { parseKeysFile } from '../../../gateway/access/keys-file.ts';
import { createMemoryLimiter } from '../../../gateway/access/limits.ts';
import { estimateTokens } from '../../../gateway/access/limits.ts';
import { createGateway } from '../../../gateway/server.ts';
import { chatBody, eventually, postJson } from '../../support/fleet.ts';
import { T0 } from './limits-contract.ts';
import { serversForEach } from '../../support/servers.ts';
import { startSimRunner } from '../../support/sim-runner.ts';

const TOKEN = `sk-sluice-${'p'.repeat(43)}`;
const LIMITS = { tokensPerMinute: 1_000_000, concurrentCalls: 1 };

const { cleanups } = serversForEach();

async function keyedGateway(limits: Record<string, number> = LIMITS) {
  const { runnerUrl } = await startSimRunner(cleanups, { id: 'r1' });
  const ring = new KeyRing();
  ring.setFileKeys(
    parseKeysFile(JSON.stringify([{ name: 'p', hash: `sha256:${hashToken(TOKEN)}`, limits }]), 'keys.json'),
  );
  const limiter = createMemoryLimiter({ clock: { now: () => T0 } });
  const gw = createGateway({
    runners: [runnerUrl],
    operatorTokens: ['operator-token-0123456789abcdef'],
    clientKeys: ring,
    limiter,
  });
  const { url } = await gw.listen();
  cleanups.push(() => gw.close());
  const id = ring.lookup(TOKEN)!.id;
  // A zero-token check reads the window without changing it.
  const remaining = async () => (await limiter.admitTokens(id, limits, 0)).window!.remaining;
  return { url, remaining };
}

describe('a client key on the call path', () => {
  it("settles a JSON answer's tokens to its usage, and gives the concurrent call back", async () => {
    const { url, remaining } = await keyedGateway();
    const body = chatBody({ max_tokens: 5 });
    const first = await postJson(`${url}/v1/chat/completions`, body, { authorization: `Bearer ${TOKEN}` });
    expect(first.status).toBe(200);
    // Counted at its worst case: the prompt's estimate and its max_tokens.
    const reserved = estimateTokens(Buffer.byteLength(body)) + 5;
    expect(first.headers['x-ratelimit-remaining-tokens']).toBe(String(1_000_000 - reserved));
    const used = first.json.usage.total_tokens as number;
    // Not what the call was counted at, so only a settle explains the count below.
    expect(used).not.toBe(reserved);
    await eventually(
      async () => (await remaining()) === 1_000_000 - used,
      5000,
      'the tokens to be settled to the usage',
    );
    // concurrentCalls 1: the next call gets in, so the first gave its call back.
    expect((await postJson(`${url}/v1/chat/completions`, body, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
  });

  it("settles a stream's tokens from its usage chunk", async () => {
    const { url, remaining } = await keyedGateway();
    const body = chatBody({ max_tokens: 5, stream: true, stream_options: { include_usage: true } });
    const streamed = await postJson(`${url}/v1/chat/completions`, body, { authorization: `Bearer ${TOKEN}` });
    expect(streamed.status).toBe(200);
    const usage = /"total_tokens":(\d+)/.exec(streamed.text);
    expect(usage).not.toBeNull();
    expect(Number(usage![1])).not.toBe(estimateTokens(Buffer.byteLength(body)));
    await eventually(
      async () => (await remaining()) === 1_000_000 - Number(usage![1]),
      5000,
      'the tokens to be settled from the stream',
    );
  });

  it("refuses a detached call while the key's stored results fill its storedBytes, and counts each result", async () => {
    const { url } = await keyedGateway({ storedBytes: 1 });
    const asKey = { authorization: `Bearer ${TOKEN}`, prefer: 'respond-async' };
    const made = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), {
      ...asKey,
      'idempotency-key': 'first',
    });
    expect(made.status).toBe(202);
    await eventually(
      async () => (await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), asKey)).status === 429,
      5000,
      "the key's stored result to count",
    );
    const refused = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), asKey);
    expect(refused.json.error).toMatchObject({ code: 'GW_RATE_LIMITED' });
    expect(refused.json.error.message).toContain('its storedBytes (1) of detached results kept');
    // A replay of the first call needs no room: it is answered the first call, not refused.
    const replay = await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), {
      ...asKey,
      'idempotency-key': 'first',
    });
    expect(replay.status).toBe(202);
    expect(replay.json.id).toBe(made.json.id);
    // A sync call of the same key is not a stored result: it still runs.
    expect(
      (await postJson(`${url}/v1/chat/completions`, chatBody({ max_tokens: 2 }), { authorization: `Bearer ${TOKEN}` }))
        .status,
    ).toBe(200);
  });
});
