/**
 * The simulated engine's HTTP server: vLLM's OpenAI-compatible routes on plain node:http, so a
 * runner in front of it runs exactly the code it would run in front of vLLM. Routing, body
 * limits, client-abort detection and the server's lifecycle live here; what a call does lives
 * in the handlers, and how long it takes in the timing model.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { onCutShort } from '../../../placer/kernel/index.ts';
import { blockKey } from '../../protocol/index.ts';
import { handleInvoke } from './invoke.ts';
import type { SimCallContext } from './call.ts';
import { SimFaults, type FaultTotals } from './faults.ts';
import { handleEmbeddings } from './embeddings.ts';
import { generationHandler } from './generate.ts';
import { responsesHandler } from './responses.ts';
import { readJsonBody, readRawBody, sendError, sendJson } from './http.ts';
import { KvUsage } from './kv-usage.ts';
import { METRICS_CONTENT_TYPE, renderMetrics, TtftHistogram } from './metrics.ts';
import { resolveSimEngineOptions, type ResolvedSimEngineOptions, type SimEngineOptions } from './options.ts';
import { NO_KV_EVENTS, SimKvEventPublisher, type SimKvEvents } from './kv-events.ts';
import { PrefixCache, SimBlockNamer, type PrefixCacheTotals } from './prefix-cache.ts';
import { badRequest, internalError, notFound, refusal } from './refusals.ts';
import { SimScheduler, type SchedulerTotals } from './scheduler.ts';
import { createSimTiming } from './timing.ts';

/** Response header naming the engine that answered, on every response. */
export const ENGINE_ID_HEADER = 'sluice-engine-id';

/** Where a started engine listens. */
export interface SimEngineAddress {
  readonly port: number;
  readonly host: string;
  /** Base URL, e.g. `http://127.0.0.1:40123`. */
  readonly url: string;
}

/** Lifetime totals and current load. */
export interface SimEngineStats extends SchedulerTotals {
  readonly running: number;
  readonly waiting: number;
  /** KV blocks held by running sequences over `kvBlocks`, 0..1. */
  readonly kvUsage: number;
  /** Prefix-cache queries and hits, in tokens. */
  readonly prefix: PrefixCacheTotals;
  /** What the fault knobs did. */
  readonly faults: FaultTotals;
}

/** A simulated inference engine: a real HTTP server speaking vLLM's OpenAI-compatible API. */
export interface SimEngine {
  /** The underlying server, for callers that need its events. */
  readonly server: Server;
  /** The resolved options it runs with. */
  readonly options: ResolvedSimEngineOptions;
  /** Starts listening. @default port 0 (any free port), host `127.0.0.1` */
  listen(port?: number, host?: string): Promise<SimEngineAddress>;
  /**
   * Stops accepting, drops idle keep-alive sockets and aborts in-flight calls (counted as aborted);
   * resolves once every call has let go of its slot. Idempotent.
   */
  close(): Promise<void>;
  /** Totals and load now. */
  stats(): SimEngineStats;
  /**
   * The wire's keys (runner/protocol/block-hash.ts) of every block the prefix cache holds now:
   * what a runner's mirror of the engine's events should hold, and what an oracle placer reads.
   */
  cachedBlockKeys(): string[];
}

type Handler = (req: IncomingMessage, res: ServerResponse, signal: AbortSignal) => Promise<void> | void;

interface Route {
  readonly methods: readonly string[];
  /**
   * What the route answers while the model loads: `call` and `ready` routes answer 503, as vLLM's
   * do until it can serve; `call` routes also count toward `crashOnCall`. `/metrics` stays open so
   * that a scraper sees an engine that is up but idle.
   */
  readonly gate: 'call' | 'ready' | 'open';
  readonly handle: Handler;
}

const READ_METHODS = ['GET', 'HEAD'] as const;

/**
 * Creates a simulated engine; it does not listen until {@link SimEngine.listen}.
 * @throws {SimOptionError} when an option is out of range.
 */
export function createSimEngine(options: SimEngineOptions = {}): SimEngine {
  const resolved = resolveSimEngineOptions(options);
  const scheduler = new SimScheduler(resolved);
  const publisher = resolved.kvEvents
    ? new SimKvEventPublisher(resolved.kvEvents, () => resolved.clock.now())
    : undefined;
  const events: SimKvEvents = publisher ?? NO_KV_EVENTS;
  const { blockSize } = resolved;
  const ctx: SimCallContext = {
    options: resolved,
    scheduler,
    timing: resolved.timing ?? createSimTiming(resolved),
    prefixCache: new PrefixCache(resolved.cacheBlocks, {
      blockSize,
      listener: { evicted: (key) => events.removed(Buffer.from(key, 'hex')) },
    }),
    namer: new SimBlockNamer(resolved.hashSeed, blockSize),
    events,
    kv: new KvUsage(resolved.kvBlocks, blockSize),
    faults: new SimFaults(resolved),
    ttft: new TtftHistogram(),
  };

  /** A call route whose body is JSON: read and parsed here, 400/413 answered here. */
  const jsonCall = (
    handle: (body: Record<string, unknown>, res: ServerResponse, signal: AbortSignal) => Promise<void>,
  ): Route => ({
    methods: ['POST'],
    gate: 'call',
    handle: async (req, res, signal) => {
      const body = await readJsonBody(req, res, resolved.maxBodyBytes);
      if (body !== undefined) await handle(body, res, signal);
    },
  });

  const routes = new Map<string, Route>([
    ['/v1/chat/completions', jsonCall(generationHandler(ctx, 'chat'))],
    ['/v1/completions', jsonCall(generationHandler(ctx, 'text'))],
    ['/v1/responses', jsonCall(responsesHandler(ctx))],
    ['/v1/embeddings', jsonCall((body, res, signal) => handleEmbeddings(ctx, body, res, signal))],
    [
      '/v1/models',
      {
        methods: READ_METHODS,
        gate: 'ready',
        handle: (_req, res) => {
          const created = Math.floor(resolved.clock.now() / 1000);
          const data = resolved.models.map((id) => ({ id, object: 'model', created, owned_by: 'sluice-sim' }));
          sendJson(res, 200, { object: 'list', data });
        },
      },
    ],
    // vLLM's route (served in its dev mode): forget every cached block and say so in the events.
    [
      '/reset_prefix_cache',
      {
        methods: ['POST'],
        gate: 'ready',
        handle: (_req, res) => {
          ctx.prefixCache.clear();
          events.cleared();
          res.writeHead(200, { 'content-length': 0 }).end();
        },
      },
    ],
    // vLLM answers its health check with 200 and no body.
    [
      '/health',
      {
        methods: READ_METHODS,
        gate: 'ready',
        handle: (_req, res) => void res.writeHead(200, { 'content-length': 0 }).end(),
      },
    ],
    [
      '/metrics',
      {
        methods: READ_METHODS,
        gate: 'open',
        handle: (_req, res) => {
          const text = renderEngineMetrics(ctx);
          res
            .writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'content-length': Buffer.byteLength(text) })
            .end(text);
        },
      },
    ],
  ]);

  const invokeRoute = (fn: string): Route => ({
    methods: ['POST'],
    gate: 'call',
    handle: async (req, res, signal) => {
      const body = await readRawBody(req, res, resolved.maxBodyBytes);
      if (body !== undefined) await handleInvoke(ctx, fn, req.headers, body, res, signal);
    },
  });

  const onRequest = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    res.setHeader(ENGINE_ID_HEADER, resolved.engineId);
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const query = url.indexOf('?');
    const path = query === -1 ? url : url.slice(0, query);
    let route = routes.get(path);
    if (route === undefined && path.startsWith('/invoke/') && path.length > '/invoke/'.length) {
      let fn: string;
      try {
        fn = decodeURIComponent(path.slice('/invoke/'.length));
      } catch {
        sendError(res, badRequest(`malformed function name in ${path}`));
        return;
      }
      route = invokeRoute(fn);
    }
    if (route === undefined) {
      sendError(res, notFound(`Invalid URL (${method} ${path})`));
      return;
    }
    if (!route.methods.includes(method)) {
      sendError(res, refusal(405, `${method} is not allowed on ${path}`), { allow: route.methods.join(', ') });
      return;
    }
    if (route.gate !== 'open') {
      const loading = ctx.faults.loadingAnswer();
      if (loading !== undefined) {
        sendError(res, loading.error, loading.headers);
        return;
      }
    }
    if (route.gate === 'call' && ctx.faults.countCall()) {
      (resolved.onCrash ?? crash)();
      // A crash answers nothing: whatever onCrash did, this call's connection dies unanswered.
      res.destroy();
      return;
    }
    const controller = new AbortController();
    // 'close' also fires after a normal end; only a response cut short means the client left.
    onCutShort(res, () => controller.abort());
    await route.handle(req, res, controller.signal);
  };

  // Tracked so that close() resolves only once every call has released its slot and timers.
  const inFlight = new Set<Promise<void>>();
  const server = createServer((req, res) => {
    const call = onRequest(req, res)
      .catch((error: unknown) => {
        const message = error instanceof Error ? error.message : String(error);
        sendError(res, internalError(`sim engine failed: ${message}`));
      })
      .finally(() => inFlight.delete(call));
    inFlight.add(call);
  });

  let closing: Promise<void> | undefined;

  /** The default crash: no goodbye, every connection dropped mid-answer, nothing listening after. */
  const crash = (): void => {
    server.close();
    server.closeAllConnections();
  };

  return {
    server,
    options: resolved,
    async listen(port = 0, host = '127.0.0.1') {
      // The event socket first: a call's events must have somewhere to go.
      await publisher?.open();
      return new Promise<SimEngineAddress>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          const address = server.address() as AddressInfo;
          const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
          resolve({ port: address.port, host: address.address, url: `http://${shown}:${address.port}` });
        });
      });
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        // Resolves even when the server never listened: closing is idempotent by contract.
        server.close(() => resolve());
        // Destroying the sockets fires each in-flight response's 'close', which aborts its call
        // and clears its timers; idle keep-alive sockets would otherwise hold close() open.
        server.closeAllConnections();
      }).then(async () => {
        await Promise.allSettled([...inFlight]);
        await publisher?.close();
      });
      return closing;
    },
    stats() {
      return {
        ...scheduler.totals(),
        running: scheduler.running,
        waiting: scheduler.waiting,
        kvUsage: ctx.kv.fraction,
        prefix: ctx.prefixCache.totals(),
        faults: ctx.faults.totals(),
      };
    },
    cachedBlockKeys() {
      return ctx.prefixCache.keys().map((key) => blockKey(Buffer.from(key, 'hex')));
    },
  };
}

/** Renders one scrape of an engine's current state. */
function renderEngineMetrics(ctx: SimCallContext): string {
  return renderMetrics({
    modelName: ctx.options.models[0]!,
    running: ctx.scheduler.running,
    waiting: ctx.scheduler.waiting,
    totals: ctx.scheduler.totals(),
    kvUsage: ctx.kv.fraction,
    kvBlocks: ctx.options.kvBlocks,
    blockSize: ctx.options.blockSize,
    prefix: ctx.prefixCache.totals(),
    faults: ctx.faults.totals(),
    ttft: ctx.ttft,
  });
}
