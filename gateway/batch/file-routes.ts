/**
 * OpenAI's Files API for batches: POST /v1/files (multipart: `file` and `purpose=batch`), GET
 * /v1/files, GET /v1/files/{id}, GET /v1/files/{id}/content and DELETE /v1/files/{id}. A file
 * answers only to the client key that uploaded it (a file uploaded without a key, only to
 * callers without one) and to operators; to anyone else it does not exist. Refusals are thrown
 * and answered by the app's onError.
 */
import type { Context, Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Caller, GatewayEnv } from '../access/index.ts';
import type { FileRecord, Owner, Page } from '../store/index.ts';
import { errorResponse } from '../errors.ts';
import { FileNotFoundError, FileTooLargeError, InvalidBatchError, InvalidFileError } from './errors.ts';
import type { FileKeeper } from './files.ts';
import { jsonlProblem } from './jsonl.ts';
import type { BatchStore } from '../store/index.ts';
import { fileView, listView } from './views.ts';

/** What a multipart upload may add to its file's bytes: the parts' headers and the purpose field. */
const MULTIPART_SLACK_BYTES = 64 * 1024;
/** Longest file name kept. */
const MAX_FILENAME_LENGTH = 255;

/** What the file routes work with. */
export interface FileRoutesSettings {
  store: BatchStore;
  files: FileKeeper;
  maxFileBytes: number;
}

/** True when `caller` may see `record`: its own, or any for an operator. */
export function owns(caller: Caller, record: { client?: string }): boolean {
  if (caller.kind === 'operator') return true;
  return record.client === (caller.kind === 'client' ? caller.key.id : undefined);
}

/** Whose records a listing by `caller` shows. */
export function ownerOf(caller: Caller): Owner {
  if (caller.kind === 'operator') return { kind: 'all' };
  return { kind: 'client', client: caller.kind === 'client' ? caller.key.id : undefined };
}

/**
 * The `after` and `limit` of a list route: limit a whole number from 1 to `max`.
 * @throws InvalidBatchError naming the bad parameter.
 */
export function pageQuery(c: Context<GatewayEnv>, byDefault: number, max: number): { after?: string; limit: number } {
  const after = c.req.query('after');
  const raw = c.req.query('limit');
  const limit = raw === undefined ? byDefault : Number(raw);
  if (!Number.isInteger(limit) || limit < 1 || limit > max)
    throw new InvalidBatchError(`limit must be a whole number from 1 to ${max}, got ${JSON.stringify(raw)}`);
  return { ...(after ? { after } : {}), limit };
}

/** How a kind of record is listed and found for a caller, and shown. */
export interface Reads<T extends { id: string }> {
  list(owner: Owner, after: string | undefined, limit: number): Promise<Page<T>>;
  /** The caller's record by id; throws the kind's not-found error for anyone else's. */
  found(caller: Caller, id: string): Promise<T>;
  view(record: T): Record<string, unknown>;
  /** The list's default and largest `limit`. */
  pages: { byDefault: number; max: number };
}

/** Adds `GET <path>` (the caller's records, paged) and `GET <path>/:id`. */
export function registerReads<T extends { id: string }>(app: Hono<GatewayEnv>, path: string, reads: Reads<T>): void {
  app.get(path, async (c) => {
    const { after, limit } = pageQuery(c, reads.pages.byDefault, reads.pages.max);
    return c.json(listView(await reads.list(ownerOf(c.get('caller')), after, limit), reads.view));
  });
  app.get(`${path}/:id`, async (c) => c.json(reads.view(await reads.found(c.get('caller'), c.req.param('id')))));
}

/** Adds the file routes to `app`. */
export function registerFileRoutes(app: Hono<GatewayEnv>, settings: FileRoutesSettings): void {
  const { store, files, maxFileBytes } = settings;
  const tooLarge = () =>
    new FileTooLargeError(`the file is larger than the gateway takes (maxFileBytes ${maxFileBytes} bytes)`);
  const found = async (caller: Caller, id: string): Promise<FileRecord> => {
    const record = await store.getFile(id);
    if (!record || !owns(caller, record)) throw unknownFile(id);
    return record;
  };

  app.post(
    '/v1/files',
    bodyLimit({ maxSize: maxFileBytes + MULTIPART_SLACK_BYTES, onError: (c) => errorResponse(c, tooLarge()) }),
    async (c) => {
      const form = await c.req.parseBody().catch((error: unknown) => {
        throw new InvalidFileError('the body must be multipart/form-data with a `file` part and `purpose`', {
          cause: error,
        });
      });
      const { file, purpose } = form;
      if (purpose !== 'batch')
        throw new InvalidFileError(`purpose must be "batch", got ${JSON.stringify(purpose ?? null)}`);
      if (!(file instanceof File)) throw new InvalidFileError('the body has no `file` part holding a file');
      if (file.size > maxFileBytes) throw tooLarge();
      const content = Buffer.from(await file.arrayBuffer());
      const problem = jsonlProblem(content);
      if (problem) throw new InvalidFileError(`the file is not JSONL: ${problem}`);
      const record = await files.keep({
        caller: c.get('caller'),
        filename: (file.name || 'upload.jsonl').slice(0, MAX_FILENAME_LENGTH),
        purpose: 'batch',
        content,
      });
      return c.json(fileView(record));
    },
  );

  registerReads(app, '/v1/files', {
    list: (owner, after, limit) => store.listFiles(owner, after, limit),
    found,
    view: fileView,
    pages: { byDefault: 100, max: 10_000 },
  });

  app.get('/v1/files/:id/content', async (c) => {
    const record = await found(c.get('caller'), c.req.param('id'));
    const content = await store.fileContent(record.id);
    if (!content) throw unknownFile(record.id);
    return c.body(new Uint8Array(content), 200, { 'content-type': 'application/jsonl' });
  });

  app.delete('/v1/files/:id', async (c) => {
    const record = await found(c.get('caller'), c.req.param('id'));
    await files.delete(record);
    return c.json({ id: record.id, object: 'file', deleted: true });
  });
}

function unknownFile(id: string): FileNotFoundError {
  return new FileNotFoundError(`no file ${JSON.stringify(id)}: the id is unknown, deleted or expired`);
}
