/**
 * Small files in bulk (docs/protocol.md "Bulk transfers of small files"): many whole files up
 * in one request and one group commit (`POST /api/files/bulk`), and many down in one answer
 * (`POST /api/files/bulk-read`). files-api.ts mounts both; a file above BULK_FILE_MAX, or one
 * whose other side holds a basis worth a delta, goes through a delta session instead.
 */
import type express from 'express';
import { BULK_ENTRIES, BULK_FILE_MAX, BULK_HEADER_BYTES, BULK_REQUEST_BYTES, MAX_MODIFIED_MS, MAX_NAME_BYTES } from '../../../shared/src/base/limits.ts';
import '../../../shared/src/chunking/wasm.ts';
import { bufferSource, chunkSource } from '../../../shared/src/chunking/chunk-index.ts';
import { type BulkFrame, bulkFrame, readBulkFrames } from '../../../shared/src/wire/bulk.ts';
import { validateName } from '../../../shared/src/wire/names.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS, ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { clientLabel } from './guard.ts';
import type { Store } from '../store/store.ts';
import type { BulkEntry } from '../store/writer.ts';

type Req = express.Request & { user?: string };

/** The longest body of a bulk upload: its files' bytes and a header for each. */
const MAX_BODY = BULK_REQUEST_BYTES + BULK_ENTRIES * (4 + BULK_HEADER_BYTES);
/** The longest body of a bulk read (JSON names and versions). */
export const BULK_READ_BODY_BYTES = BULK_ENTRIES * (4 * MAX_NAME_BYTES + 64);
/** Versions a bulk read reads from the store at once (each is a few reads, written in order). */
const READ_AHEAD = 8;

const malformed = (why: string) => new ProtocolError(ErrorCode.Malformed, why);
const HEADER_KEYS = new Set(['name', 'expect', 'modified', 'size', 'root']);

/** The entry a bulk upload's frame names, checked (every byte is hostile input). */
function entryOf(f: BulkFrame, k: number): Omit<BulkEntry, 'index'> & { root: string } {
  const { name, expect, modified, root } = f.header;
  for (const key of Object.keys(f.header)) if (!HEADER_KEYS.has(key)) throw malformed(`bulk entry ${k + 1}: unknown field ${JSON.stringify(key)}`);
  if (typeof name !== 'string' || validateName(name) !== name) throw new ProtocolError(ErrorCode.BadName, `bulk entry ${k + 1}: invalid file name ${JSON.stringify(name)}: not as the server keeps names`);
  if (typeof expect !== 'number' || !Number.isSafeInteger(expect) || expect < 0) throw malformed(`bulk entry ${k + 1} (${name}): expect is the latest version it replaces, 0 for none`);
  if (modified !== undefined && (typeof modified !== 'number' || !Number.isSafeInteger(modified) || modified < 0 || modified > MAX_MODIFIED_MS)) throw malformed(`bulk entry ${k + 1} (${name}): modified is ms since the epoch, 0 to ${MAX_MODIFIED_MS}`);
  if (typeof root !== 'string' || !/^[0-9a-f]{64}$/.test(root)) throw malformed(`bulk entry ${k + 1} (${name}): root is the 64 hex digits of its root hash`);
  return { name, expect, ...(modified !== undefined && { modified }), bytes: f.bytes, root };
}

/** The name of a ProtocolError code ("StaleBasis", …). */
const codeName = (code: number) => Object.entries(ErrorCode).find(([, c]) => c === code)?.[0];

/** An entry's refusal as the answer says it: `conflict` for a head that moved (StaleBasis). */
function refusal(name: string, e: unknown) {
  if (e instanceof ProtocolError) return { name, error: e.message, code: codeName(e.code), ...(e.code === ErrorCode.StaleBasis && { conflict: true }) };
  return { name, error: `the store failed: ${(e as Error)?.message ?? String(e)}`, code: 'Internal' };
}

/**
 * `POST /api/files/bulk`: the body is bulk frames (shared/src/wire/bulk.ts), one per file, its
 * header `{name, expect, modified?, size, root}`. The whole body is read and checked first (its
 * frames, every name, the root hash of every file's bytes against `root`): anything wrong
 * refuses the request and stores nothing. Then every entry is written and committed at once
 * (Store.bulk), each against its own `expect`; the answer is `{results: [...]}` in the body's
 * order, each `{name, version}` or `{name, error, code, conflict?}`.
 */
export async function bulkWrite(req: Req, res: express.Response, store: Store): Promise<void> {
  const length = Number(req.headers['content-length']);
  if (Number.isFinite(length) && length > MAX_BODY) {
    res.setHeader('Connection', 'close');
    throw new ProtocolError(ErrorCode.Malformed, `a bulk body is at most ${MAX_BODY} bytes`);
  }
  const entries: BulkEntry[] = [];
  const names = new Set<string>();
  try {
    let k = 0;
    for await (const f of readBulkFrames(req, { maxEntries: BULK_ENTRIES, maxBytes: BULK_REQUEST_BYTES })) {
      const e = entryOf(f, k++);
      if (names.has(e.name)) throw malformed(`bulk entry ${k}: ${e.name} comes twice`);
      names.add(e.name);
      // the digest the client sent is the root of the bytes: a mismatch (a lying length, bytes
      // changed on the way) refuses the request
      const index = await chunkSource(bufferSource(e.bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
      if (Buffer.from(index.root).toString('hex') !== e.root) throw new ProtocolError(ErrorCode.VerifyFailed, `bulk entry ${k} (${e.name}): its bytes do not match their root hash: nothing stored`);
      entries.push({ name: e.name, expect: e.expect, modified: e.modified, bytes: e.bytes, index });
    }
  } catch (e) {
    // the rest of a refused body is not read
    if (!req.readableEnded) res.setHeader('Connection', 'close');
    throw e;
  }
  if (!entries.length) throw malformed('a bulk body holds 1 to BULK_ENTRIES files');
  const client = clientLabel(typeof req.query.client === 'string' ? req.query.client : null);
  const out = await store.bulk(entries, client);
  // a test hook (server/test/store-durable.test.ts): a process whose DSYNC_TEST_DIE_AFTER_BULK
  // is set kills itself (SIGKILL) once a bulk upload's answer is handed to the system
  if (process.env.DSYNC_TEST_DIE_AFTER_BULK) res.once('finish', () => process.kill(process.pid, 'SIGKILL'));
  res.json({ results: out.map((o, k) => ('version' in o ? { name: entries[k].name, version: o.version } : refusal(entries[k].name, o.error))) });
}

/** The names and versions of a bulk read's body, checked. */
function wanted(body: unknown): { name: string; version: number }[] {
  const files = (body as { files?: unknown } | null)?.files;
  if (!Array.isArray(files) || !files.length || files.length > BULK_ENTRIES) throw malformed(`bulk-read takes {files: [{name, version}, …]}, 1 to ${BULK_ENTRIES} of them`);
  return files.map((f: { name?: unknown; version?: unknown } | null, k) => {
    const name = f?.name;
    const version = f?.version;
    if (typeof name !== 'string' || validateName(name) !== name) throw new ProtocolError(ErrorCode.BadName, `bulk-read entry ${k + 1}: invalid file name ${JSON.stringify(name)}`);
    if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) throw malformed(`bulk-read entry ${k + 1} (${name}): version is a positive integer`);
    return { name, version };
  });
}

/**
 * `POST /api/files/bulk-read` with `{files: [{name, version}, …]}`: an answer of bulk frames
 * in the order asked, each `{name, version, size, root, algo, params, modified?}` and the
 * version's bytes (read through the store's verified reads), or `{name, size: 0, error, code}`
 * for a version that is gone, damaged or above BULK_FILE_MAX. The client checks each file's
 * bytes against `root` again.
 */
export async function bulkRead(req: Req, res: express.Response, store: Store): Promise<void> {
  const files = wanted(req.body);
  const read = async ({ name, version }: { name: string; version: number }): Promise<Uint8Array[]> => {
    try {
      const head = await store.head(name);
      const entry = head?.versions.find((v) => v.version === version);
      if (!entry) throw new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);
      if (entry.size > BULK_FILE_MAX) throw new ProtocolError(ErrorCode.Malformed, `${name} version ${version} is above ${BULK_FILE_MAX} bytes: pull it in a delta session`);
      const { source } = await store.openVersion(name, version, head);
      const bytes = await source.read(0, source.size);
      const ix = source.index;
      return bulkFrame({ name, version, size: bytes.length, root: Buffer.from(ix.root).toString('hex'), algo: ix.algo, params: ix.params, ...(entry.modified !== undefined && { modified: entry.modified }) }, bytes);
    } catch (e) {
      return bulkFrame({ ...refusal(name, e), size: 0 });
    }
  };
  // the first file is read before the headers go out: a store that fails at once is a 503
  const reads: Promise<Uint8Array[]>[] = [];
  const ahead = () => {
    while (reads.length < files.length && reads.length < sent + READ_AHEAD) reads.push(read(files[reads.length]));
  };
  let sent = 0;
  ahead();
  await reads[0];
  res.setHeader('Content-Type', 'application/octet-stream');
  for (; sent < files.length; ) {
    const frame = await reads[sent++];
    ahead();
    for (const part of frame) if (!res.write(part)) await drained(res);
  }
  res.end();
}

/** Resolves when `res` drains; rejects when the client goes away first. */
export function drained(res: express.Response): Promise<void> {
  return new Promise((ok, fail) => {
    const done = (e?: Error) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      if (e) fail(e);
      else ok();
    };
    const onDrain = () => done();
    const onClose = () => done(new Error('the client went away'));
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}
