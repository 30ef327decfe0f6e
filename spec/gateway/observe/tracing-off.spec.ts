/**
 * gateway/observe/tracing.ts with tracing off (no tracer provider registered, as when no OTEL_* variable
 * names an endpoint): nothing is recorded, and a client's `traceparent` reaches the runner and
 * the engine unchanged, as any forwarded header does.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { tracesExporter } from '../../../gateway/cli/telemetry.ts';
import { createGateway } from '../../../gateway/server.ts';
import { startCallTrace } from '../../../gateway/observe/tracing.ts';
import { createRunner } from '../../../runner/server.ts';
import { startRunnerTrace } from '../../../runner/tracing.ts';
import { chatBody, postJson } from '../../support/fleet.ts';
import { serversForEach } from '../../support/servers.ts';

const { cleanups, listen } = serversForEach();

describe('tracing off', () => {
  it('starts no trace on either side', () => {
    const incoming = {
      headers: {},
      method: 'POST',
      url: '/v1/chat/completions',
      socket: {},
    } as unknown as IncomingMessage;
    const out = { once: () => out } as unknown as ServerResponse;
    expect(startCallTrace(incoming, out, '/v1/chat/completions', 'chat')).toBeUndefined();
    expect(startRunnerTrace(incoming, out, 'runner-1')).toBeUndefined();
  });

  it("forwards the client's traceparent to the engine unchanged", async () => {
    const seen: IncomingHttpHeaders[] = [];
    const engine = await listen(
      createServer((req, res) => {
        if (req.url === '/health') return res.end();
        if (req.url === '/v1/models') return res.end(JSON.stringify({ data: [{ id: 'sim-small' }] }));
        seen.push(req.headers);
        req.resume();
        req.on('end', () => res.end(JSON.stringify({ choices: [] })));
      }),
    );
    const runner = createRunner({ engine });
    const { url: runnerUrl } = await runner.listen();
    cleanups.push(() => runner.close({ drainTimeout: 0 }));
    const gateway = createGateway({ runners: [runnerUrl] });
    const { url } = await gateway.listen();
    cleanups.push(() => gateway.close());
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    expect((await postJson(`${url}/v1/chat/completions`, chatBody(), { traceparent })).status).toBe(200);
    expect(seen[0]?.traceparent).toBe(traceparent);
  });
});

describe('tracesExporter', () => {
  it('returns none when no variable names an exporter or an endpoint', () => {
    expect(tracesExporter({})).toBe('none');
    expect(tracesExporter({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBe('none');
  });

  it('returns otlp when an OTLP endpoint is given, for traces or for all signals', () => {
    expect(tracesExporter({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe('otlp');
    expect(tracesExporter({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe('otlp');
  });

  it('returns OTEL_TRACES_EXPORTER when set, endpoint or not', () => {
    expect(tracesExporter({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(
      'none',
    );
    expect(tracesExporter({ OTEL_TRACES_EXPORTER: 'console' })).toBe('console');
  });
});
