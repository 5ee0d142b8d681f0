/**
 * The REST routes over a user's files (app.ts mounts them under /api; the header there
 * lists their shapes). Reads go through the store's verified sources: a damaged object is a
 * clear error naming the file and version, and a download whose damage shows only after its
 * headers went out is cut off (the client sees a truncated body and an error, never a crash).
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import express from 'express';
import { FOLDER_MOVE_BODY_BYTES, FOLDER_MOVE_FILES, FOLDER_MOVE_RENAMES, LIST_CHANGES_ENTRIES, LIST_CURSOR_CHARS, MAX_NAME_BYTES, SEARCH_FOLDERS, SEARCH_PAGE } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { TRASH } from '../../../shared/src/sync/remote.ts';
import type { ApiErrorBody, FolderAnswer, FolderEntries, FolderRemoveAnswer, ListingChanges, ListingPage, ListingReset, MoveAnswer, RemoveAnswer, RestoreAnswer, SearchPage, TrashRestoreAnswer, VersionInfo } from '../../../shared/src/wire/api.ts';
import { listingLines } from '../../../shared/src/wire/api.ts';
import { validateName } from '../../../shared/src/wire/names.ts';
import type { FolderRecord } from '../store/listing.ts';
import type { FileInfo, Store } from '../store/store.ts';
import { type Req, admittedRoutes } from './guard.ts';
import { BULK_READ_BODY_BYTES, bulkRead, bulkWrite, drained } from './bulk.ts';


/** Entries per page of GET /api/files at most. */
const MAX_PAGE = 10_000;
type Handler = (req: Req, res: express.Response, store: Store) => Promise<void>;

/** Answers `body`, typed as the API's shape of the route (shared/src/wire/api.ts). */
const send = <T>(res: express.Response, body: T, status = 200) => void res.status(status).json(body);
const refuse = (res: express.Response, status: number, body: ApiErrorBody) => send(res, body, status);

/**
 * A listing or search the store could not answer whole (the routes: app.ts header): a read
 * failed or timed out. The request fails with 503 and this reason (no Retry-After: not the
 * server's capacity), never with an empty or partial page a client would read as deletions.
 */
class StoreFailed extends Error {
  constructor(cause: unknown) {
    super(`the store failed: ${(cause as Error)?.message ?? String(cause)}`);
    this.name = 'StoreFailed';
  }
}

/** `read()`, whose failure is the store's (StoreFailed), except a refusal of the request itself. */
async function whole<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (e) {
    if (e instanceof ProtocolError && (e.code === ErrorCode.Malformed || e.code === ErrorCode.BadName || e.code === ErrorCode.NotFound)) throw e;
    throw new StoreFailed(e);
  }
}

const STATUS: Partial<Record<number, number>> = { [ErrorCode.NotFound]: 404, [ErrorCode.StaleBasis]: 409, [ErrorCode.Inconsistent]: 409, [ErrorCode.Internal]: 500 };

/** The name of a ProtocolError code ("StaleBasis", …). */
const codeName = (code: number) => Object.entries(ErrorCode).find(([, c]) => c === code)?.[0];

/** `version` from a query or body: a positive integer, or undefined when absent. */
function versionOf(raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  const v = Number(raw);
  if (!Number.isSafeInteger(v) || v < 1) throw new ProtocolError(ErrorCode.Malformed, `bad version ${JSON.stringify(raw)}`);
  return v;
}

/**
 * The `versions` of a checked folder move from `src` to `dst` (both ending in '/'): a JSON
 * object of at most FOLDER_MOVE_FILES names below the folder, each with the latest version the
 * client saw. Each name must be valid as it is (NFC) under both folders: what the client
 * sends is hostile input.
 */
function folderVersions(raw: unknown, src: string, dst: string): Map<string, number> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ProtocolError(ErrorCode.Malformed, 'versions is an object {name below the folder: version}');
  const entries = Object.entries(raw);
  if (!entries.length || entries.length > FOLDER_MOVE_FILES) throw new ProtocolError(ErrorCode.Malformed, `versions names 1 to ${FOLDER_MOVE_FILES} files`);
  const out = new Map<string, number>();
  for (const [rel, v] of entries) {
    if (validateName(src + rel) !== src + rel || validateName(dst + rel) !== dst + rel) throw new ProtocolError(ErrorCode.BadName, `invalid file name: ${JSON.stringify(rel)} is not as the server keeps names`);
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new ProtocolError(ErrorCode.Malformed, `versions: ${JSON.stringify(rel)} has no version (a positive integer)`);
    out.set(rel, v);
  }
  return out;
}

/**
 * Runs `move` for every name, FOLDER_MOVE_RENAMES at once. A failure starts no further move;
 * the ones under way finish, and the first failure is thrown saying how many had moved. Each
 * file's rename is atomic (history.ts `renameFile`), so a failure or a crash midway leaves every file
 * whole at its old name or its new one (a crash inside one rename: at both), never neither.
 */
async function renameAll(names: string[], move: (rel: string) => Promise<void>): Promise<void> {
  let next = 0;
  let done = 0;
  let failed: unknown = null;
  await Promise.all(
    Array.from({ length: Math.min(FOLDER_MOVE_RENAMES, names.length) }, async () => {
      while (failed === null && next < names.length) {
        const rel = names[next++];
        try {
          await move(rel);
          done++;
        } catch (e) {
          failed ??= e;
        }
      }
    }),
  );
  if (failed === null) return;
  const why = `moved ${done} of ${names.length} files, then: ${(failed as Error)?.message ?? String(failed)}`;
  if (failed instanceof ProtocolError) throw new ProtocolError(failed.code, why);
  throw new StoreFailed(new Error(why));
}

/**
 * Listing cursors (docs/protocol.md "Listing changes"). A folder's **stamp** is the first 6
 * bytes of the SHA-256 of its own entries' `listingLines` as listed (files and subfolders,
 * refused names left out), so any server over the store computes the same one with nothing
 * kept between requests. A cursor is the base64url of: the version byte 1, 6 bytes of the
 * SHA-256 of the listed folder's name ('' or "P/"), and per folder under it 6 bytes of the
 * SHA-256 of its name ('' or ending in '/') and its 6-byte stamp. A collision costs nothing but
 * a folder not sent: the client's digest of the listing it rebuilds then differs and it lists
 * whole.
 */
const CURSOR_VERSION = 1;
const sha = (s: string) => createHash('sha256').update(s).digest();
const folderId = (folder: string) => sha(folder).subarray(0, 6).toString('hex');
/** A folder record's id and stamp (hex), once per record (`Listing.folderRecords` gives the same
 *  record for a catalog unchanged since this process read it). */
const marks = new WeakMap<FolderRecord, { id: string; stamp: string }>();
const markOf = (x: FolderRecord) => {
  let m = marks.get(x);
  if (m === undefined) marks.set(x, (m = { id: folderId(x.folder), stamp: sha(listingLines(x.files, x.folders)).subarray(0, 6).toString('hex') }));
  return m;
};
const digestOf = (files: FileInfo[], folders: string[]) => sha(listingLines(files, folders)).toString('hex');

/** The cursor of a walk's folders (`recs[0]` the listed folder itself); undefined past
 *  LIST_CURSOR_CHARS (such a tree is listed whole each time). */
function cursorOf(recs: FolderRecord[]): string | undefined {
  const b = Buffer.alloc(7 + 12 * recs.length);
  b[0] = CURSOR_VERSION;
  Buffer.from(markOf(recs[0]).id, 'hex').copy(b, 1);
  recs.forEach((x, i) => {
    const m = markOf(x);
    Buffer.from(m.id, 'hex').copy(b, 7 + 12 * i);
    Buffer.from(m.stamp, 'hex').copy(b, 13 + 12 * i);
  });
  const c = b.toString('base64url');
  return c.length <= LIST_CURSOR_CHARS ? c : undefined;
}

/** The cursor and digest of a walk's folders, kept with its first record for the next request
 *  that finds the very same records (a folder unchanged since: no SHA-256 of its whole
 *  listing again). */
const walks = new WeakMap<FolderRecord, { recs: FolderRecord[]; cursor: string | undefined; digest: string }>();
function cursorAndDigest(recs: FolderRecord[]): { cursor: string | undefined; digest: string } {
  const last = walks.get(recs[0]);
  if (last && last.recs.length === recs.length && last.recs.every((x, i) => x === recs[i])) return last;
  const made = { recs, cursor: cursorOf(recs), digest: digestOf(recs.flatMap((x) => x.files), recs.flatMap((x) => x.folders)) };
  walks.set(recs[0], made);
  return made;
}

/** The stamps a client's cursor holds, by folder id; null when it is of another version or
 *  another folder (the answer is then a reset). Anything else that is not a cursor is a
 *  malformed request. */
function readCursor(prefix: string, raw: unknown): Map<string, string> | null {
  if (typeof raw !== 'string' || !raw || raw.length > LIST_CURSOR_CHARS || !/^[A-Za-z0-9_-]+$/.test(raw)) throw new ProtocolError(ErrorCode.Malformed, `since is a listing cursor (at most ${LIST_CURSOR_CHARS} characters)`);
  const b = Buffer.from(raw, 'base64url');
  if (b.length < 1 || b[0] !== CURSOR_VERSION) return null;
  if (b.length < 7 || (b.length - 7) % 12) throw new ProtocolError(ErrorCode.Malformed, 'since is not a listing cursor');
  if (b.subarray(1, 7).toString('hex') !== folderId(prefix)) return null;
  const out = new Map<string, string>();
  for (let o = 7; o < b.length; o += 12) out.set(b.subarray(o, o + 6).toString('hex'), b.subarray(o + 6, o + 12).toString('hex'));
  return out;
}

/** `turn`: waits for one of the user's turns (guard.ts `Turns`) and returns its end.
 *  `enter`: a place among the work the process runs (guard.ts `Admission`: its end), or the
 *  seconds to wait when it is past capacity; the request is then refused with 503 and
 *  Retry-After, having done nothing. */
export function filesApi(
  storeOf: (user: string) => Promise<Store>,
  log: (e: Record<string, unknown>) => void,
  turn?: (user: string) => Promise<() => void>,
  enter: () => Promise<(() => void) | number> = async () => () => {},
): express.Router {
  const r = express.Router();
  const admitted = admittedRoutes(turn, enter, log, (err, res) => {
    if (err instanceof StoreFailed) return refuse(res, 503, { error: err.message });
    // code: the refusal's name, so that a client tells a stale basis (StaleBasis) from a name
    // that exists (Inconsistent), both 409
    if (err instanceof ProtocolError) return refuse(res, STATUS[err.code] ?? 400, { error: err.message, code: codeName(err.code) });
    refuse(res, 500, { error: 'internal error' });
  });
  const route = (fn: Handler) => admitted(async (req, res) => fn(req, res, await storeOf(req.user!)));
  const nameOf = (raw: unknown) => validateName(typeof raw === 'string' ? raw : '');
  /** Collects the stored names a listing leaves out (listing.ts `Refused`) and logs them once
   *  for the request, by folder. */
  const refusals = (req: Req) => {
    const by = new Map<string, string[]>();
    return {
      refused: (folder: string, name: string) => void (by.get(folder) ?? by.set(folder, []).get(folder)!).push(name),
      report: () => by.size && log({ warning: 'stored names refused', user: req.user, path: req.path, folders: Object.fromEntries(by) }),
      /** the folders ('' the top, else ending in '/') where a stored name was left out: a
       *  client must not read what it lacks there as deleted */
      held: () => [...by.keys()].map((f) => (f ? f + '/' : '')).sort(),
    };
  };

  r.get(
    '/files',
    route(async (req, res, store) => {
      // prefix: '' or a folder ending in '/'; recursive: every file below it, else one folder
      const prefix = typeof req.query.prefix === 'string' ? req.query.prefix : '';
      const folder = prefix ? nameOf(prefix.replace(/\/$/, '')) : '';
      if (prefix && !prefix.endsWith('/')) throw new ProtocolError(ErrorCode.Malformed, 'prefix is a folder: it ends in "/"');
      const cursor = typeof req.query.cursor === 'string' ? req.query.cursor : '';
      const limit = req.query.limit === undefined ? 1000 : Number(req.query.limit);
      if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PAGE) throw new ProtocolError(ErrorCode.Malformed, `limit is 1 to ${MAX_PAGE}`);
      // every page is whole (complete: true) or the request fails (StoreFailed, 503)
      const r = refusals(req);
      if (req.query.recursive !== '1') {
        const page = await whole(() => store.listFolder(folder, cursor, limit, r.refused));
        r.report();
        return send<ListingPage>(res, { ...page, complete: true, held: r.held() });
      }
      // every file and folder below, in name order (a folder's name ends in '/'), paged together
      const recs = await whole(() => store.folderRecords(folder, r.refused));
      r.report();
      const files = recs.flatMap((x) => x.files);
      const folders = recs.flatMap((x) => x.folders);
      const all = [...files.map((f) => ({ key: f.name, f })), ...folders.map((key) => ({ key, f: null }))].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).filter((e) => e.key > cursor);
      const page = all.slice(0, limit);
      const next = all.length > limit ? page[page.length - 1].key : null;
      // the last page: the cursor of the changes request and the digest of the whole listing
      // (docs/protocol.md "Listing changes")
      const since = next === null ? cursorAndDigest(recs) : null;
      send<ListingPage>(res, { files: page.flatMap((e) => (e.f ? [e.f] : [])), folders: page.flatMap((e) => (e.f ? [] : [e.key])), next, complete: true, held: r.held(), ...(since && { cursor: since.cursor, digest: since.digest }) });
    }),
  );
  r.post(
    '/files/changes',
    express.json({ limit: LIST_CURSOR_CHARS + 16_384 }),
    route(async (req, res, store) => {
      // what changed below `prefix` since `since` (a cursor of a listing of the same prefix):
      // the folders whose stamp differs, each whole, then a new cursor and the whole digest;
      // {reset: true} when it cannot answer from that cursor (the client lists whole)
      const { prefix, since } = (req.body ?? {}) as { prefix?: unknown; since?: unknown };
      if (typeof prefix !== 'string' || (prefix && !prefix.endsWith('/'))) throw new ProtocolError(ErrorCode.Malformed, 'prefix is "" or a folder: it ends in "/"');
      const folder = prefix ? nameOf(prefix.slice(0, -1)) : '';
      const was = readCursor(folder ? folder + '/' : '', since);
      if (!was) return send<ListingReset>(res, { reset: true });
      const r = refusals(req);
      const recs = await whole(() => store.folderRecords(folder, r.refused));
      r.report();
      const { cursor, digest } = cursorAndDigest(recs);
      if (!cursor) return send<ListingReset>(res, { reset: true });
      const changes = recs.filter((x) => {
        const m = markOf(x);
        return was.get(m.id) !== m.stamp;
      });
      if (changes.reduce((n, x) => n + x.files.length + x.folders.length, 0) > LIST_CHANGES_ENTRIES) return send<ListingReset>(res, { reset: true });
      // the cursor is left out when it is the one sent (nothing changed: half the answer)
      send<ListingChanges>(res, { changes: changes satisfies FolderEntries[], ...(cursor !== since && { cursor }), digest, complete: true, held: r.held() });
    }),
  );
  r.get(
    '/search',
    route(async (req, res, store) => {
      // q: a part of the path, matched case-insensitively; cursor: the page's `next` before
      const q = typeof req.query.q === 'string' ? req.query.q.trim() : '';
      const cursor = typeof req.query.cursor === 'string' ? req.query.cursor : '';
      if (!q || Buffer.byteLength(q) > MAX_NAME_BYTES) throw new ProtocolError(ErrorCode.Malformed, `q is 1 to ${MAX_NAME_BYTES} bytes`);
      if (Buffer.byteLength(cursor) > MAX_NAME_BYTES + 1) throw new ProtocolError(ErrorCode.Malformed, 'bad cursor');
      const limit = req.query.limit === undefined ? SEARCH_PAGE : Number(req.query.limit);
      if (!Number.isSafeInteger(limit) || limit < 1 || limit > SEARCH_PAGE) throw new ProtocolError(ErrorCode.Malformed, `limit is 1 to ${SEARCH_PAGE}`);
      const r = refusals(req);
      const page = await whole(() => store.search(q, cursor, limit, SEARCH_FOLDERS, r.refused));
      r.report();
      send<SearchPage>(res, page);
    }),
  );
  r.get(
    '/versions',
    route(async (req, res, store) => {
      const name = nameOf(req.query.name);
      const v = await store.versions(name);
      if (!v.length) throw new ProtocolError(ErrorCode.NotFound, `${name} does not exist`);
      send<VersionInfo[]>(res, v);
    }),
  );
  r.get(
    '/download',
    route(async (req, res, store) => {
      const name = nameOf(req.query.name);
      const version = versionOf(req.query.version) ?? (await store.latest(name));
      if (!version) throw new ProtocolError(ErrorCode.NotFound, `${name} does not exist`);
      const { source } = await store.openVersion(name, version);
      // the first piece is read and verified before the headers: damage found there is a 500
      const PIECE = 1 << 20;
      let piece = await source.read(0, Math.min(PIECE, source.size));
      res.setHeader('Content-Disposition', `attachment; filename*=UTF-8''${encodeURIComponent(path.basename(name))}`);
      res.setHeader('Content-Type', 'application/octet-stream');
      res.setHeader('Content-Length', String(source.size));
      for (let o = 0; ; ) {
        if (!res.write(piece)) await drained(res);
        o += piece.length;
        if (o >= source.size) break;
        piece = await source.read(o, Math.min(PIECE, source.size - o));
      }
      res.end();
    }),
  );
  r.delete(
    '/files',
    route(async (req, res, store) => {
      // latest=V: only while the file's latest version is V (409 otherwise), checked in the swap
      const name = nameOf(req.query.name);
      send<RemoveAnswer>(res, { removed: await store.remove(name, versionOf(req.query.version), versionOf(req.query.latest)) });
    }),
  );
  // folders: POST makes an empty folder that stays listed (and its parents); DELETE removes
  // every file under one (each as DELETE /files does) and every folder kept under it; with
  // empty=1 only a folder with no file under it (409 otherwise), removing no file
  const folderOf = (raw: unknown) => nameOf(typeof raw === 'string' ? raw.replace(/\/$/, '') : '');
  r.post(
    '/folders',
    express.json({ limit: '8kb' }),
    route(async (req, res, store) => {
      const folder = folderOf((req.body ?? {}).name);
      const clash = await store.typeClash(folder, 'folder');
      if (clash) throw new ProtocolError(ErrorCode.Inconsistent, clash);
      await store.makeFolder(folder);
      send<FolderAnswer>(res, { folder: folder + '/' });
    }),
  );
  r.delete(
    '/folders',
    route(async (req, res, store) => {
      const folder = folderOf(req.query.name);
      const emptyOnly = req.query.empty === '1';
      send<FolderRemoveAnswer>(res, { folder: folder + '/', removed: await store.removeFolder(folder, { emptyOnly }) });
    }),
  );
  r.post(
    '/files/move',
    express.json({ limit: FOLDER_MOVE_BODY_BYTES }),
    route(async (req, res, store) => {
      const { from, to, version, versions } = (req.body ?? {}) as { from?: unknown; to?: unknown; version?: unknown; versions?: unknown };
      if (typeof from !== 'string' || typeof to !== 'string') throw new ProtocolError(ErrorCode.Malformed, 'move takes {from, to}');
      if (from.endsWith('/') !== to.endsWith('/')) throw new ProtocolError(ErrorCode.Malformed, 'a folder moves to a folder: both end in "/", or neither');
      // version: a file moves only while its latest version is that one (409 otherwise)
      const expect = version === undefined ? undefined : versionOf(version);
      if (expect !== undefined && from.endsWith('/')) throw new ProtocolError(ErrorCode.Malformed, 'version is for a file move');
      if (versions !== undefined && !from.endsWith('/')) throw new ProtocolError(ErrorCode.Malformed, 'versions is for a folder move');
      if (!from.endsWith('/')) {
        await store.rename(nameOf(from), nameOf(to), expect);
        return send<MoveAnswer>(res, { moved: 1 });
      }
      const src = nameOf(from.slice(0, -1)) + '/';
      const dst = nameOf(to.slice(0, -1)) + '/';
      if (src !== dst && (dst.startsWith(src) || src.startsWith(dst))) throw new ProtocolError(ErrorCode.Malformed, `${src} cannot move into itself or a folder above it`);
      const want = versions === undefined ? null : folderVersions(versions, src, dst);
      const files = await whole(() => store.list(src.slice(0, -1)));
      if (!files.length) throw new ProtocolError(ErrorCode.NotFound, `no file under ${src}`);
      if (want) {
        // compare-and-swap on the folder: exactly the names the client saw, at the versions it
        // saw, and nothing at the new name (a file, a folder, or a file above it)
        if (files.length !== want.size || files.some((f) => want.get(f.name.slice(src.length)) !== f.latest)) {
          throw new ProtocolError(ErrorCode.StaleBasis, `${src} holds other files or versions than the move expects: nothing moved`);
        }
        const there = await whole(() => store.tree(dst.slice(0, -1)));
        if (there.files.length || there.folders.length || (await store.folderExists(dst.slice(0, -1)))) throw new ProtocolError(ErrorCode.Inconsistent, `${dst} exists: nothing moved`);
        const clash = await store.typeClash(dst.slice(0, -1), 'folder');
        if (clash) throw new ProtocolError(ErrorCode.Inconsistent, `${clash}: nothing moved`);
      }
      // each file's rename is its own compare-and-swap against the version listed (a push that
      // lands after the look above refuses that file's move; it stays where it was pushed)
      const moved = new Map<string, number>();
      await renameAll(files.map((f) => f.name.slice(src.length)), async (rel) => {
        moved.set(rel, await store.rename(src + rel, nameOf(dst + rel), want?.get(rel)));
      });
      // a checked move answers the numbers the latest versions got at the new name
      send<MoveAnswer>(res, { moved: moved.size, ...(want && { versions: Object.fromEntries(moved) }) });
    }),
  );
  // small files in bulk (bulk.ts): many up in one request and one group commit, many down
  r.post('/files/bulk', route(bulkWrite));
  r.post('/files/bulk-read', express.json({ limit: BULK_READ_BODY_BYTES }), route(bulkRead));
  r.post(
    '/files/restore',
    express.json({ limit: '8kb' }),
    route(async (req, res, store) => {
      const { name, version } = (req.body ?? {}) as { name?: unknown; version?: unknown };
      const v = versionOf(version);
      if (v === undefined && typeof name === 'string' && name.startsWith(TRASH + '/')) return send<TrashRestoreAnswer>(res, await fromTrash(store, name));
      if (v === undefined) throw new ProtocolError(ErrorCode.Malformed, 'restore takes {name, version}, or {name} of a file or folder in the trash');
      send<RestoreAnswer>(res, { version: await store.restore(nameOf(name), v) });
    }),
  );
  /**
   * Puts a file or a folder of the trash (`.dsync-trash/STAMP/PATH`, a folder's ending in '/';
   * `.dsync-trash/STAMP/` restores the whole stamp) back at PATH, each file with its history
   * (a move checked against the latest version it had when listed). A file whose name is taken
   * again (or that changed meanwhile) stays in the trash and is told in `skipped`, never
   * overwritten.
   */
  const fromTrash = async (store: Store, raw: string) => {
    const folder = raw.endsWith('/');
    const name = nameOf(folder ? raw.slice(0, -1) : raw);
    const parts = name.split('/');
    if (parts.length < (folder ? 2 : 3)) throw new ProtocolError(ErrorCode.Malformed, `restore from the trash takes ${TRASH}/STAMP/PATH`);
    const base = parts.slice(0, 2).join('/') + '/';
    const files = folder ? await whole(() => store.list(name)) : (await store.latest(name)) ? [{ name, latest: await store.latest(name) }] : [];
    if (!files.length) throw new ProtocolError(ErrorCode.NotFound, `nothing in the trash at ${raw}`);
    const restored: string[] = [];
    const skipped: { name: string; why: string }[] = [];
    for (const f of files) {
      const to = f.name.slice(base.length);
      try {
        await store.rename(f.name, to, f.latest);
        restored.push(to);
      } catch (e) {
        if (!(e instanceof ProtocolError) || e.code === ErrorCode.Internal) throw e;
        skipped.push({ name: f.name, why: e.message });
      }
    }
    return { restored, skipped };
  };
  return r;
}
