/**
 * OpenAI's Batch API: POST /v1/batches, GET /v1/batches, GET /v1/batches/{id} and POST
 * /v1/batches/{id}/cancel. A batch answers to the client key that created it and to operators,
 * as its files do (file-routes.ts). Refusals are thrown and answered by the app's onError.
 */
import type { Hono } from 'hono';
import type { Caller, GatewayEnv } from '../access/index.ts';
import { FINAL_BATCH_STATUSES } from '../store/index.ts';
import type { BatchRecord, BatchStore } from '../store/index.ts';
import type { BatchRunner } from './batch-runner.ts';
import { BatchNotCancellableError, BatchNotFoundError, FileNotFoundError, InvalidBatchError } from './errors.ts';
import { newObjectId } from './files.ts';
import { owns, registerReads } from './file-routes.ts';
import { BATCH_ENDPOINTS } from './jsonl.ts';
import { batchView } from './views.ts';
import { runAsOf } from './batch-state.ts';
import type { Clock } from '../../placer/kernel/index.ts';

/** The one completion window OpenAI offers, and its length. */
const COMPLETION_WINDOWS: Readonly<Record<string, number>> = { '24h': 24 * 3_600_000 };
/** OpenAI's bounds on a batch's metadata: pairs, and characters of a key and of a value. */
const METADATA = Object.freeze({ pairs: 16, key: 64, value: 512 });

/** The batch list's default and largest `limit`, as OpenAI's. */
const PAGES = Object.freeze({ byDefault: 20, max: 100 });

/** What the batch routes work with. */
export interface BatchRoutesSettings {
  store: BatchStore;
  runner: BatchRunner;
  clock: Pick<Clock, 'now'>;
  /** This gateway's id: the owner of the batches it creates. */
  gatewayId: string;
}

/** Adds the batch routes to `app`. */
export function registerBatchRoutes(app: Hono<GatewayEnv>, settings: BatchRoutesSettings): void {
  const { store, runner, clock, gatewayId } = settings;
  const found = async (caller: Caller, id: string): Promise<BatchRecord> => {
    const record = await store.getBatch(id);
    if (!record || !owns(caller, record)) throw unknownBatch(id);
    return runner.settled(record);
  };

  registerReads(app, '/v1/batches', { list: store.listBatches.bind(store), found, view: batchView, pages: PAGES });

  app.post('/v1/batches', async (c) => {
    const caller = c.get('caller');
    const asked = batchRequest(await c.req.json().catch(() => undefined));
    const input = await store.getFile(asked.inputFileId);
    if (!input || !owns(caller, input))
      throw new FileNotFoundError(`no file ${JSON.stringify(asked.inputFileId)} for input_file_id`);
    if (input.purpose !== 'batch')
      throw new InvalidBatchError(`input_file_id must name a file uploaded with purpose "batch", not ${input.purpose}`);
    const createdAt = clock.now();
    const record: BatchRecord = {
      id: newObjectId('batch'),
      ...(caller.kind === 'client' ? { client: caller.key.id } : {}),
      owner: gatewayId,
      endpoint: asked.endpoint,
      inputFileId: input.id,
      completionWindow: asked.completionWindow,
      status: 'validating',
      createdAt,
      expiresAt: createdAt + COMPLETION_WINDOWS[asked.completionWindow]!,
      requestCounts: { total: 0, completed: 0, failed: 0 },
      ...(asked.metadata ? { metadata: asked.metadata } : {}),
      runAs: runAsOf(caller),
    };
    await store.putBatch(record);
    runner.start(record, caller);
    return c.json(batchView(record));
  });

  app.post('/v1/batches/:id/cancel', async (c) => {
    const record = await found(c.get('caller'), c.req.param('id'));
    if (FINAL_BATCH_STATUSES.has(record.status))
      throw new BatchNotCancellableError(`batch ${record.id} is already ${record.status}`);
    const after = await runner.cancel(record.id);
    if (!after) throw unknownBatch(record.id);
    return c.json(batchView(after));
  });
}

/** What POST /v1/batches asks for. */
interface BatchRequest {
  inputFileId: string;
  endpoint: string;
  completionWindow: string;
  metadata?: Record<string, string>;
}

/**
 * The request in a POST /v1/batches body.
 * @throws InvalidBatchError naming the first bad field.
 */
function batchRequest(body: unknown): BatchRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new InvalidBatchError('the body must be a JSON object with input_file_id, endpoint and completion_window');
  const { input_file_id, endpoint, completion_window, metadata } = body as Record<string, unknown>;
  if (typeof input_file_id !== 'string' || input_file_id === '')
    throw new InvalidBatchError('input_file_id must name an uploaded file');
  if (typeof endpoint !== 'string' || !BATCH_ENDPOINTS.includes(endpoint))
    throw new InvalidBatchError(
      `endpoint must be one of ${BATCH_ENDPOINTS.join(', ')}, got ${JSON.stringify(endpoint ?? null)}`,
    );
  if (typeof completion_window !== 'string' || !(completion_window in COMPLETION_WINDOWS))
    throw new InvalidBatchError(`completion_window must be "24h", got ${JSON.stringify(completion_window ?? null)}`);
  return {
    inputFileId: input_file_id,
    endpoint,
    completionWindow: completion_window,
    ...(metadata === undefined || metadata === null ? {} : { metadata: checkMetadata(metadata) }),
  };
}

/** Metadata as OpenAI bounds it: at most 16 string pairs, keys up to 64 characters, values up to 512. */
function checkMetadata(metadata: unknown): Record<string, string> {
  if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata))
    throw new InvalidBatchError('metadata must be an object of strings');
  const entries = Object.entries(metadata as Record<string, unknown>);
  if (entries.length > METADATA.pairs)
    throw new InvalidBatchError(`metadata holds at most ${METADATA.pairs} pairs, got ${entries.length}`);
  for (const [key, value] of entries) {
    if (key.length > METADATA.key) throw new InvalidBatchError(`metadata keys are at most ${METADATA.key} characters`);
    if (typeof value !== 'string' || value.length > METADATA.value)
      throw new InvalidBatchError(`metadata.${key} must be a string of at most ${METADATA.value} characters`);
  }
  return Object.fromEntries(entries) as Record<string, string>;
}

function unknownBatch(id: string): BatchNotFoundError {
  return new BatchNotFoundError(`no batch ${JSON.stringify(id)}: the id is unknown or the batch was forgotten`);
}
