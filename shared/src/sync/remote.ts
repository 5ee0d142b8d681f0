/**
 * The server side of the sync engine (shared/src/sync/engine.ts `RemoteFolder`), the part that
 * is the same in the CLI and the page: the REST calls (the recursive listing, versions, moves,
 * the trash, folders), the ignore rules, and the connections of the delta push and pull (a
 * `ConnectionPool`).
 * Reading and writing local files is each side's own (cli/http-folder.ts `HttpFolder`,
 * client/src/folder-sync.ts `PageFolder`).
 */
import ignore from 'ignore';
import { bytesToHex as hex } from '@noble/hashes/utils';
import { bufferSource, chunkSource } from '../chunking/chunk-index.ts';
import { type ChunkParams, DEFAULT_ALGO, DEFAULT_PARAMS, ErrorCode, checkParams, hashLength, sameParams } from '../wire/protocol.ts';
import { bulkFrame, readBulkFrames } from '../wire/bulk.ts';
import { RemoteError } from '../transport/conn.ts';
import { modifiedOf } from '../session/delta-client.ts';
import type { WebSocketCtor } from '../transport/conn.ts';
import type { KnownVersions } from '../session/known.ts';
import type { PullOptions, PushOptions } from '../session/delta-client.ts';
import { ConnectionPool } from '../transport/connection-pool.ts';
import { type Expected, IGNORE_FILE, inBulkBatches, type RemoteFolder, RemoteChanged, type Settled, type Skipped, type Stat } from './engine.ts';
import { BULK_ENTRIES, BULK_FILE_MAX, BULK_WRITES, LIST_CURSOR_CHARS } from '../base/limits.ts';
import { nameProblem, shownName } from '../wire/names.ts';
import type { Expect, RemoteFile } from './plan.ts';
import { type FolderEntries, type ListedFile, type ListingChanges, type ListingPage, type ListingReset, type MoveAnswer, type Unchecked, type VersionInfo, listingLines } from '../wire/api.ts';

/** The folder on the server that holds what sync deletes, with its history (docs/sync.md). */
export const TRASH = '.dsync-trash';

export { IGNORE_FILE } from './engine.ts';

/** Always ignored: temporary files of editors and systems, and the engine's own. */
export const DEFAULT_IGNORES = ['.DS_Store', 'Thumbs.db', 'desktop.ini', '*.tmp', '*.swp', '*.swo', '*~', '~$*', '.#*', '.~lock.*#', '*.dsync-tmp-*', `/${TRASH}/`];

/** The ignore rules: the defaults and the text of the folder's .dsyncignore, if any. The
 *  .dsyncignore itself is this device's own and never synced (Syncthing's rule: one device's
 *  rules cannot silence another's files), whatever its text says. */
export function ignoreMatcher(text: string | null): (p: string, isDir?: boolean) => boolean {
  if (lastMatcher?.text === text) return lastMatcher.match;
  const ig = ignore().add(DEFAULT_IGNORES);
  if (text !== null) ig.add(text);
  // what the rules decided for each path (a folder's ending in '/'): `ignore` remembers it too,
  // but its own lookup was a tenth of a `--watch` pass's CPU over 5 000 files
  const decided = new Map<string, boolean>();
  const match = (p: string, isDir?: boolean) => {
    if (!isDir && p === IGNORE_FILE) return true;
    const key = isDir ? p + '/' : p;
    let ignored = decided.get(key);
    if (ignored === undefined) {
      if (decided.size >= IGNORE_DECISIONS) decided.clear();
      decided.set(key, (ignored = ig.ignores(key)));
    }
    return ignored;
  };
  lastMatcher = { text, match };
  return match;
}
/** Paths whose ignore decision a matcher keeps (then it starts over): ~100 bytes each. */
const IGNORE_DECISIONS = 200_000;
/** The matcher of the last rules asked for: a pass asks for its folder's rules every time, and
 *  the matcher remembers what it decided for each path, so a `--watch` pass over thousands of
 *  files with the same rules matches none of them again. */
let lastMatcher: { text: string | null; match: (p: string, isDir?: boolean) => boolean } | null = null;

/**
 * Containment (docs/sync.md): whether a name the server listed may become a path here. A name
 * the server itself would refuse (a `..` or empty component, an absolute path, a backslash,
 * NUL or a control character, a reserved device name…), one not in the NFC form the server
 * keeps, or one this device's file system cannot hold (`windows`), is never written: it is
 * noted in `skipped` (by `rel`, its path below the synced folder, quoted and escaped) and left
 * out of the listing. True when `full` may be used.
 */
export function listedNameFits(full: string, rel: string, o: { windows?: boolean }, skipped: Skipped[]): boolean {
  const why = nameProblem(full, o) ?? (full.normalize('NFC') === full ? null : 'not in the NFC form the server keeps');
  if (why !== null) skipped.push({ path: shownName(rel), reason: `the server listed an invalid name (${why.replace(/^invalid file name: /, '')}): not written here` });
  return why === null;
}

/** The defaults alone: what the ignore rules hide beyond them is the user's rules' doing. */
export const ignoredByDefault = ignoreMatcher(null);

/** A REST call to the server: the parsed JSON answer; a refusal throws an error that
 *  `statusOf` reads the HTTP status from. */
export type ApiCall = <T = unknown>(method: string, path: string, body?: unknown) => Promise<T>;

/** Files per page of the server's recursive listing. */
const LIST_PAGE = 5000;

/** A listing kept between passes (and runs): the server folder's `prefix`, the server's
 *  `cursor` for it, and the files and folders (full names, a folder's ending in '/') it had. */
export interface KeptListing {
  prefix: string;
  cursor: string;
  files: ListedFile[];
  folders: string[];
}

/** Where a kept listing lives (cli/sync-state.ts keeps it in the sync state file). */
export interface ListingKeep {
  listing: KeptListing | null;
}

/** A listing as the server sent it: `foldersListed` false for a server that lists no folders. */
interface RawListing {
  files: ListedFile[];
  folders: string[];
  held: string[];
  foldersListed: boolean;
  /** answered from the kept listing: the folders (full names ending in '/') whose entries
   *  differ from the kept ones, those gone included; absent: the listing was read whole */
  changed?: string[];
}

/** The digest of a whole listing: SHA-256 (hex) of its `listingLines` (wire/api.ts); null where there is no
 *  crypto.subtle (a page on plain http), which then keeps no listing. */
export async function listingDigest(files: ListedFile[], folders: string[]): Promise<string | null> {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) return null;
  const h = new Uint8Array(await subtle.digest('SHA-256', new TextEncoder().encode(listingLines(files, folders))));
  return Array.from(h, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** The folder a full name is in: '' for the top, else its name ending in '/'. */
function parentOf(name: string): string {
  const k = name.lastIndexOf('/', name.length - 2);
  return name.slice(0, k + 1);
}

const isCursor = (c: unknown): c is string => typeof c === 'string' && c.length > 0 && c.length <= LIST_CURSOR_CHARS;
const isDigest = (d: unknown): d is string => typeof d === 'string' && /^[0-9a-f]{64}$/.test(d);

const isInteger = (n: unknown): n is number => Number.isSafeInteger(n);

/** A file entry of a listing the server sent below `prefix`, checked. */
function listedFile(f: Unchecked<ListedFile> | null, prefix: string): ListedFile {
  if (typeof f?.name !== 'string' || !f.name.startsWith(prefix) || !isInteger(f.latest) || !isInteger(f.size)) throw new Error('the server sent a malformed listing');
  return { name: f.name, latest: f.latest, size: f.size };
}

/** A folder entry of a listing the server sent below `prefix` (ending in '/'), checked. */
function listedFolder(d: unknown, prefix: string): string {
  if (typeof d !== 'string' || !d.startsWith(prefix) || !d.endsWith('/') || d.length <= prefix.length + 1) throw new Error('the server sent a malformed listing');
  return d;
}

/** The `held` folders of a listing answer ('' the top, else names ending in '/'), checked. */
function heldOf(held: unknown): string[] {
  const out = Array.isArray(held) ? held : [];
  for (const f of out) if (typeof f !== 'string' || (f && !f.endsWith('/'))) throw new Error('the server sent a malformed listing');
  return out;
}

/** A bulk request's outcome on a server without the bulk routes: the file goes on its own. */
export class NoBulk extends Error {
  constructor() {
    super('the server takes no bulk transfers');
  }
}

/**
 * The root in the default chunking of a file a bulk read sent, once its bytes are checked
 * against the header the server sent with them: the version asked for, its size, and its root
 * in the chunking that header names (checked as any chunking a server names). Anything else
 * throws: nothing of it may be written.
 */
async function checkedRoot(h: Record<string, unknown>, version: number, bytes: Uint8Array): Promise<string> {
  const params = h.params as ChunkParams;
  if (h.version !== version || h.size !== bytes.length || typeof h.root !== 'string' || typeof h.algo !== 'number' || typeof params !== 'object' || params === null) throw new Error('the server sent a malformed bulk answer');
  hashLength(h.algo);
  checkParams(params);
  const root = hex((await chunkSource(bufferSource(bytes), params, h.algo)).root);
  if (root !== h.root) throw new RemoteError(ErrorCode.VerifyFailed, `the bytes the server sent do not match their root hash: not written`);
  return h.algo === DEFAULT_ALGO && sameParams(params, DEFAULT_PARAMS) ? root : hex((await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO)).root);
}

/** A kept listing of `prefix` that reads back whole (it came from disk: hostile), else null. */
export function keptListing(k: unknown, prefix: string): KeptListing | null {
  const l = k as KeptListing | null;
  if (!l || typeof l !== 'object' || l.prefix !== prefix || !isCursor(l.cursor) || !Array.isArray(l.files) || !Array.isArray(l.folders)) return null;
  try {
    return { prefix, cursor: l.cursor, files: l.files.map((f) => listedFile(f, prefix)), folders: l.folders.map((d) => listedFolder(d, prefix)) };
  } catch {
    return null;
  }
}

export interface ApiFolderOptions {
  call: ApiCall;
  /** the HTTP status of an error `call` threw, undefined for any other error */
  statusOf: (e: unknown) => number | undefined;
  /** the server folder, '' for the top */
  folder: string;
  /** the /sync URL and the WebSocket constructor of the delta push and pull */
  url: string;
  WebSocket: WebSocketCtor;
  /** the versions this device knows (a push against one sends only what changed) */
  known?: KnownVersions;
  now?: () => Date;
  /** a REST request with a body of bytes (`POST path`), its answer when it is a success (a
   *  refusal throws as `call`'s do); absent: no transfers in bulk */
  send?: (path: string, body: Uint8Array[], type: string) => Promise<Response>;
  /** the local file system is Windows': names it cannot hold are skipped (listedNameFits) */
  windows?: boolean;
}

export abstract class ApiFolder implements RemoteFolder {
  /** the connections of the transfers: each session takes one (or opens one) and gives it
   *  back, so transfers at once never share one */
  protected readonly connections: ConnectionPool;
  /** the server refused to make a folder: it keeps no empty folders */
  private noFolders = false;

  constructor(protected readonly a: ApiFolderOptions) {
    this.connections = new ConnectionPool(a.WebSocket);
  }

  abstract push(path: string, expect: Expect): Promise<{ version: number; root: string } & Stat>;
  abstract pull(path: string, version: number, expect: Expected | null, basis?: string): Promise<{ version: number; root: string } & Stat>;

  /** the name on the server of a path in the folder */
  full(p: string) {
    return this.a.folder ? `${this.a.folder}/${p}` : p;
  }

  /** A delta push of `p` over this folder's connections, checked by the server against
   *  `expect` (a version, or no file at the name). */
  protected pushOptions(p: string, expect: Expect, retries: number): PushOptions {
    return { ...this.session(p), expect, retries };
  }

  /** A delta pull of version `version` of `p` over this folder's connections (basis and sink:
   *  the caller's). */
  protected pullOptions(p: string, version: number, rest: Pick<PullOptions, 'basis' | 'sink'>): PullOptions {
    return { ...this.session(p), version, ...rest };
  }

  private session(p: string) {
    return { url: this.a.url, name: this.full(p), WebSocket: this.a.WebSocket, connection: this.connections, known: this.a.known };
  }

  /**
   * Uploads whole small files (at most BULK_FILE_MAX bytes each) in bulk requests (docs/
   * protocol.md "Bulk transfers of small files"), as many per request as BULK_ENTRIES and
   * BULK_REQUEST_BYTES allow: each file's outcome, its new version and root, or the error its
   * push would throw (RemoteError StaleBasis when the server holds another version than
   * `expect`). The server checks every file's bytes against the root sent with them.
   */
  protected async sendMany(files: { path: string; expect: Expect; bytes: Uint8Array; modified?: number }[]): Promise<Settled<{ version: number; root: string }>[]> {
    const out: Settled<{ version: number; root: string }>[] = [];
    for (const batch of inBulkBatches(files, (f) => f.bytes.length)) out.push(...(await this.sendBatch(batch)));
    return out;
  }

  private async sendBatch(all: { path: string; expect: Expect; bytes: Uint8Array; modified?: number }[]): Promise<Settled<{ version: number; root: string }>[]> {
    // a name the server would refuse is refused here, on its own: one bad name refuses a
    // whole bulk request
    const bad = all.map((f) => nameProblem(this.full(f.path)));
    const files = all.filter((_, k) => bad[k] === null);
    const sent = files.length ? await this.sendChecked(files) : [];
    return all.map((f, k) => (bad[k] === null ? sent.shift()! : { error: new RemoteError(ErrorCode.BadName, bad[k]!) }));
  }

  private async sendChecked(files: { path: string; expect: Expect; bytes: Uint8Array; modified?: number }[]): Promise<Settled<{ version: number; root: string }>[]> {
    // one file after another: chunking runs on this thread either way, and files chunked at
    // once would each stage their bytes in wasm memory, which grows to hold them all and
    // never shrinks (256 files of up to 256 KiB)
    const roots: string[] = [];
    for (const f of files) roots.push(hex((await chunkSource(bufferSource(f.bytes), DEFAULT_PARAMS, DEFAULT_ALGO)).root));
    const body = files.flatMap((f, k) => {
      const modified = modifiedOf(f.modified);
      return bulkFrame({ name: this.full(f.path), expect: f.expect === 'absent' ? 0 : f.expect.version, ...(modified !== undefined && { modified }), size: f.bytes.length, root: roots[k] }, f.bytes);
    });
    let results: unknown;
    try {
      results = ((await (await this.a.send!(`/api/files/bulk${this.clientQuery()}`, body, 'application/octet-stream')).json()) as { results?: unknown })?.results;
    } catch (error) {
      return files.map(() => ({ error: this.noBulkIf(error) }));
    }
    if (!Array.isArray(results) || results.length !== files.length) return files.map(() => ({ error: new Error('the server sent a malformed bulk answer') }));
    return files.map((f, k): Settled<{ version: number; root: string }> => {
      const r = results[k] as { name?: unknown; version?: unknown; error?: unknown; code?: unknown };
      if (r?.name !== this.full(f.path)) return { error: new Error('the server sent a malformed bulk answer') };
      if (Number.isSafeInteger(r.version) && (r.version as number) > 0) return { ok: { version: r.version as number, root: roots[k] } };
      const code = (typeof r.code === 'string' && (ErrorCode as Record<string, number>)[r.code]) || ErrorCode.Internal;
      return { error: new RemoteError(code, typeof r.error === 'string' ? r.error : `${f.path}: refused`) };
    });
  }

  /**
   * Downloads small files in bulk requests (BULK_ENTRIES per request at most): `write` gets each
   * file's bytes, checked against the root the server sent (and the chunking it names), and the
   * version's modification time; each file's outcome, its root in the default chunking, or the
   * error the server sent or `write` threw.
   */
  protected async fetchMany<T>(files: { path: string; version: number }[], write: (k: number, bytes: Uint8Array, modified: number | undefined) => Promise<T>): Promise<Settled<T & { root: string }>[]> {
    const out: Settled<T & { root: string }>[] = [];
    for (let k = 0; k < files.length; k += BULK_ENTRIES) {
      const batch = files.slice(k, k + BULK_ENTRIES);
      // each file's outcome as it is checked and written, BULK_WRITES at once while the answer
      // streams on
      const pending: Promise<Settled<T & { root: string }>>[] = [];
      let cut: unknown = null;
      try {
        const res = await this.a.send!('/api/files/bulk-read', [new TextEncoder().encode(JSON.stringify({ files: batch.map((f) => ({ name: this.full(f.path), version: f.version })) }))], 'application/json');
        if (!res.body) throw new Error('the server sent no bulk answer');
        for await (const { header: h, bytes } of readBulkFrames(res.body as unknown as AsyncIterable<Uint8Array>, { maxEntries: batch.length, maxBytes: BULK_ENTRIES * BULK_FILE_MAX })) {
          const at = pending.length;
          const f = batch[at];
          if (h.name !== this.full(f.path)) throw new Error('the server sent a malformed bulk answer');
          if (typeof h.error === 'string') {
            pending.push(Promise.resolve({ error: new RemoteError((typeof h.code === 'string' && (ErrorCode as Record<string, number>)[h.code]) || ErrorCode.Internal, h.error) }));
            continue;
          }
          pending.push(
            (async (): Promise<Settled<T & { root: string }>> => {
              try {
                // checked before anything is written: bytes that are not their root never reach the file
                const root = await checkedRoot(h, f.version, bytes);
                return { ok: { ...(await write(k + at, bytes, modifiedOf(typeof h.modified === 'number' ? h.modified : undefined))), root } };
              } catch (error) {
                return { error };
              }
            })(),
          );
          if (pending.length >= BULK_WRITES) await pending[pending.length - BULK_WRITES];
        }
        if (pending.length !== batch.length) throw new Error('the server sent a bulk answer cut short');
      } catch (error) {
        cut = error;
      }
      // every write started is waited for (each is its file's outcome), then the rest fail
      const got = await Promise.all(pending);
      while (got.length < batch.length) got.push({ error: this.noBulkIf(cut) });
      out.push(...got);
    }
    return out;
  }

  /** the server has no bulk routes (an earlier version: 404): each file goes on its own */
  protected noBulk = false;

  /** `error`, or NoBulk when it is the 404 of a server without the bulk routes. */
  private noBulkIf(error: unknown): unknown {
    if (this.status(error) !== 404) return error;
    this.noBulk = true;
    return new NoBulk();
  }

  /** `?client=` of the sync URL (the label the server keeps with the versions pushed), or ''. */
  private clientQuery(): string {
    const c = new URL(this.a.url).searchParams.get('client');
    return c ? `?${new URLSearchParams({ client: c })}` : '';
  }

  private status(e: unknown) {
    return this.a.statusOf(e);
  }

  close() {
    this.connections.close();
  }

  /**
   * The files and folders of the server folder: what changed since the listing this device
   * kept (`POST /api/files/changes` from its cursor, `changed`), else the whole recursive
   * listing (`whole`); then checked and shaped for the engine (`shape`).
   */
  async list(): Promise<{ files: Map<string, RemoteFile>; folders: Set<string> | null; skipped: Skipped[]; changed?: Set<string> }> {
    return this.shape((await this.changed()) ?? (await this.whole()));
  }

  /** Where the listing this device keeps lives between runs (the CLI's state file); without
   *  it, the listing is kept in memory only (the page, tests). */
  keepListing(keep: ListingKeep) {
    this.keep = keep;
  }

  private keep: ListingKeep = { listing: null };
  /** the listing this process kept, with the digest it was checked against: when a changes
   *  request says nothing changed since and sends that digest, the listing is the one kept,
   *  neither read back nor digested again */
  private checked: { listing: KeptListing; digest: string } | null = null;
  /** the listed names the last pass found fit to be paths here (listedNameFits) */
  private fitting = new Set<string>();
  /** the server answered 404 to a changes request: it lists whole only */
  private noChanges = false;

  private get prefix() {
    return this.a.folder ? this.a.folder + '/' : '';
  }

  /** Notes the listing to keep (null: none), with the digest it was checked against. */
  private kept(listing: KeptListing | null, digest?: string) {
    this.keep.listing = listing;
    this.checked = listing && digest ? { listing, digest } : null;
  }

  /**
   * The whole recursive listing, in pages. The last page carries a `cursor` and the `digest`
   * of the listing as the server saw it then: when the pages put together have that digest
   * (nothing changed while they were read), the listing is kept with the cursor for the next
   * pass's changes request; otherwise none is kept.
   */
  private async whole(): Promise<RawListing> {
    const prefix = this.prefix;
    const raw: RawListing = { files: [], folders: [], held: [], foldersListed: true };
    let cursor: string | null = '';
    let last: Unchecked<ListingPage> = {};
    do {
      const q: URLSearchParams = new URLSearchParams({ prefix, recursive: '1', limit: String(LIST_PAGE), ...(cursor && { cursor }) });
      const page: Unchecked<ListingPage> = await this.a.call('GET', `/api/files?${q}`);
      if (!Array.isArray(page?.files)) throw new Error('the server does not list folders recursively: it needs an update');
      // a page the server does not vouch for as whole is no listing: files it lacks would read
      // as deleted on the server (a server of an earlier version sends none)
      if (page.complete !== true) throw new Error("the server's listing is not whole (no \"complete\" mark): nothing is planned from it; the server may need an update");
      raw.held.push(...heldOf(page.held));
      for (const f of page.files) raw.files.push(listedFile(f, prefix));
      if (!Array.isArray(page.folders)) raw.foldersListed = false;
      else for (const d of page.folders) raw.folders.push(listedFolder(d, prefix));
      if (page.next !== null && typeof page.next !== 'string') throw new Error('the server sent a malformed listing');
      cursor = page.next;
      last = page;
    } while (cursor);
    this.kept(null);
    if (raw.foldersListed && isCursor(last.cursor) && isDigest(last.digest) && (await listingDigest(raw.files, raw.folders)) === last.digest) {
      this.kept({ prefix, cursor: last.cursor, files: raw.files, folders: raw.folders }, last.digest);
    }
    return raw;
  }

  /**
   * What changed since the kept listing, applied to it: null when there is none to ask from,
   * the server cannot answer from its cursor (`reset`), lists whole only (404), or the
   * listing so rebuilt does not have the digest the server sent (a kept listing that is
   * damaged or not this server's, a server's mistake): the whole listing is then read, since
   * a listing that lacks a file would make the engine delete it.
   */
  private async changed(): Promise<RawListing | null> {
    const prefix = this.prefix;
    const mine = this.checked?.listing === this.keep.listing ? this.checked : null;
    const had = mine?.listing ?? keptListing(this.keep.listing, prefix);
    if (!had || this.noChanges || !globalThis.crypto?.subtle) return null;
    this.kept(null);
    let answer: Unchecked<ListingChanges & ListingReset>;
    try {
      answer = await this.a.call('POST', '/api/files/changes', { prefix, since: had.cursor });
    } catch (e) {
      const status = this.status(e);
      if (status === 404) this.noChanges = true; // a server before cursors
      if (status === 404 || status === 400 || status === 413) return null;
      this.kept(had); // (the server could not be asked: the next pass asks again)
      throw e;
    }
    if (answer?.reset === true) return null;
    if (answer?.complete !== true) throw new Error("the server's listing is not whole (no \"complete\" mark): nothing is planned from it; the server may need an update");
    // no cursor: the one sent is still the one (nothing changed)
    const cursor = answer.cursor === undefined ? had.cursor : answer.cursor;
    if (!Array.isArray(answer.changes) || !isCursor(cursor) || !isDigest(answer.digest)) throw new Error('the server sent a malformed listing');
    const held = heldOf(answer.held);
    if (mine && answer.cursor === undefined && answer.changes.length === 0 && answer.digest === mine.digest) {
      this.kept(had, mine.digest);
      return { files: had.files, folders: had.folders, held, foldersListed: true, changed: [] };
    }
    // the kept listing by folder ('' or a name ending in '/'): its files and subfolders
    const byFolder = new Map<string, { files: ListedFile[]; folders: string[] }>([[prefix, { files: [], folders: [] }]]);
    const at = (d: string) => byFolder.get(d) ?? byFolder.set(d, { files: [], folders: [] }).get(d)!;
    for (const d of had.folders) at(d);
    for (const f of had.files) at(parentOf(f.name)).files.push(f);
    for (const d of had.folders) at(parentOf(d)).folders.push(d);
    // each changed folder's entries, whole, in place of the kept ones
    for (const c of answer.changes as Unchecked<FolderEntries>[]) {
      const folder = c?.folder;
      if (typeof folder !== 'string' || !(folder === prefix || (folder.startsWith(prefix) && folder.endsWith('/'))) || !Array.isArray(c.files) || !Array.isArray(c.folders)) throw new Error('the server sent a malformed listing');
      const files = c.files.map((f) => listedFile(f, prefix));
      const folders = c.folders.map((d) => listedFolder(d, prefix));
      if (![...files.map((f) => f.name), ...folders].every((n) => parentOf(n) === folder)) throw new Error('the server sent a malformed listing');
      byFolder.set(folder, { files, folders });
    }
    // the listing now: the folders reached from the top (a folder gone is no longer linked
    // from its parent, whose entries came whole)
    const raw: RawListing = { files: [], folders: [], held, foldersListed: true };
    const seen = new Set<string>();
    for (const todo = [prefix]; todo.length; ) {
      const d = todo.pop()!;
      const e = byFolder.get(d);
      if (!e || seen.has(d)) return null; // a folder whose entries this device lacks: listed whole
      seen.add(d);
      raw.files.push(...e.files);
      raw.folders.push(...e.folders);
      todo.push(...e.folders);
    }
    if ((await listingDigest(raw.files, raw.folders)) !== answer.digest) return null;
    this.kept({ prefix, cursor, files: raw.files, folders: raw.folders }, answer.digest);
    // what changed: the folders sent, and those gone with them (no longer reached)
    raw.changed = [...(answer.changes as FolderEntries[]).map((c) => c.folder), ...had.folders.filter((d) => !seen.has(d))];
    return raw;
  }

  /** The listing as the engine reads it: held folders, the trash and names that may not
   *  become paths here left out (listedNameFits). */
  private shape(raw: RawListing): { files: Map<string, RemoteFile>; folders: Set<string> | null; skipped: Skipped[]; changed?: Set<string> } {
    const prefix = this.prefix;
    const out = new Map<string, RemoteFile>();
    const skipped: Skipped[] = [];
    const fitting = new Set<string>();
    const fits = (full: string) => (this.fitting.has(full) || listedNameFits(full, full.slice(prefix.length), this.a, skipped)) && !!fitting.add(full);
    const inTrash = (p: string) => !prefix && (p === TRASH || p.startsWith(TRASH + '/'));
    // folders where the server left out a stored name it would refuse (a damaged or tampered
    // store): what this device has there and the listing lacks is held, not deleted
    for (const f of raw.held) {
      const reason = 'the server left out names stored here that it refuses (a damaged store): nothing under it is deleted';
      if (f === prefix || (!f && !prefix)) throw new Error(`the server's listing of the folder is not whole: ${reason}`);
      if (f.startsWith(prefix)) skipped.push({ path: f.slice(prefix.length), reason, hold: true });
    }
    for (const f of raw.files) {
      const p = f.name.slice(prefix.length);
      if (!inTrash(p) && fits(f.name)) out.set(p, { version: f.latest, size: f.size });
    }
    let folders: Set<string> | null = raw.foldersListed ? new Set<string>() : null;
    for (const d of folders ? raw.folders : []) {
      const p = d.slice(prefix.length, -1);
      if (!inTrash(p) && fits(d.slice(0, -1))) folders!.add(p);
    }
    // a server that lists no folders beside files in folders keeps no empty folders either
    if (this.noFolders || (folders && !folders.size && [...out.keys()].some((p) => p.includes('/')))) folders = null;
    this.fitting = fitting;
    // the changed folders as the engine names them ('' the top, else no trailing '/')
    const changed = raw.changed && new Set(raw.changed.filter((d) => d.startsWith(prefix) && !inTrash(d.slice(prefix.length, -1))).map((d) => d.slice(prefix.length, -1)));
    return { files: out, folders, skipped, ...(changed && { changed }) };
  }

  private async versionList(p: string): Promise<Pick<VersionInfo, 'version' | 'root' | 'algo'>[]> {
    let list: unknown;
    try {
      list = await this.a.call('GET', `/api/versions?${new URLSearchParams({ name: this.full(p) })}`);
    } catch (e) {
      if (this.status(e) === 404) return [];
      throw e;
    }
    const ok = (v: Unchecked<VersionInfo> | null): v is VersionInfo => !!v && isInteger(v.version) && v.version > 0 && typeof v.root === 'string' && isInteger(v.algo);
    if (!Array.isArray(list) || !list.every(ok)) throw new Error(`the server sent a malformed version list of ${p}`);
    return list;
  }

  async root(p: string, version: number) {
    const v = (await this.versionList(p)).find((x) => x.version === version);
    return v && v.algo === DEFAULT_ALGO ? v.root : undefined;
  }

  async versions(p: string) {
    return (await this.versionList(p)).map((v) => v.version).sort((a, b) => a - b);
  }

  /** The latest version of `p` and its root (where the default chunking made it). */
  private async latest(p: string): Promise<{ version: number; root?: string }> {
    const vs = await this.versionList(p);
    const last = vs.reduce((a, b) => (b.version > a.version ? b : a), vs[0]);
    if (!last) throw new RemoteChanged(`${p} is gone from the server`);
    return { version: last.version, ...(last.algo === DEFAULT_ALGO && { root: last.root }) };
  }

  /** POST /api/files/move with the expected version (compare-and-swap, docs/protocol.md): a
   *  refusal (409) because the latest is another version is RemoteChanged; one because `to`
   *  exists is the caller's (`taken`). A server without the check (before C3) moves whatever
   *  the latest is: the caller verifies what it records (sync/engine.ts, moveRemote). */
  private async moveExpecting(from: string, to: string, expect: { version: number }, taken: (e: unknown) => Promise<void>) {
    try {
      await this.a.call('POST', '/api/files/move', { from: this.full(from), to, version: expect.version });
    } catch (e) {
      // gone from the server since the listing (a folder move that stopped midway took it)
      if (this.status(e) === 404) throw new RemoteChanged(`${from} is gone from the server`);
      if (this.status(e) !== 409) throw e;
      const now = await this.versions(from);
      if (now[now.length - 1] !== expect.version) throw new RemoteChanged(`${from} changed on the server`);
      await taken(e);
    }
  }

  async move(from: string, to: string, expect: { version: number }) {
    await this.moveExpecting(from, this.full(to), expect, async () => {
      // made meanwhile by another device: the next pass decides again
      throw new RemoteChanged(`${to} exists on the server`);
    });
    return this.latest(to);
  }

  /** POST /api/files/move of the folder `from/` to `to/` with `versions` (docs/protocol.md):
   *  the server moves it only while it holds exactly these files at these latest versions and
   *  nothing is at `to`. A refusal (409, or 404: the folder is gone) is RemoteChanged: nothing
   *  moved when the folder's check refused it, else some files moved before a file's own check
   *  did (the listing shows which). An answer without the numbers (a server that moved the
   *  folder unchecked) gives none: nothing is recorded, the next pass compares the contents. */
  moveFolder(from: string, to: string, versions: ReadonlyMap<string, number>): Promise<Map<string, number>> {
    return this.moveFolderAs(from, this.full(to), versions);
  }

  /** Deletes the folder `path` there while it holds exactly `versions` (path below it →
   *  latest): one checked folder move into the trash folder `.dsync-trash/STAMP/`, keeping
   *  every file's versions; where it went (ending in '/'). RemoteChanged when refused (as
   *  `moveFolder`; also when that place in the trash is taken: the files then go one by one). */
  async trashFolder(path: string, versions: ReadonlyMap<string, number>, trashStamp: string): Promise<string> {
    const to = `${TRASH}/${trashStamp}/${this.full(path)}`;
    await this.moveFolderAs(path, to, versions);
    return to + '/';
  }

  /** The checked folder move of `from` (in this folder) to the server name `to`. */
  private async moveFolderAs(from: string, to: string, versions: ReadonlyMap<string, number>): Promise<Map<string, number>> {
    let answer: Unchecked<MoveAnswer>;
    try {
      answer = await this.a.call('POST', '/api/files/move', { from: this.full(from) + '/', to: to + '/', versions: Object.fromEntries(versions) });
    } catch (e) {
      const status = this.status(e);
      if (status === 409 || status === 404) throw new RemoteChanged(`${from}/ changed on the server, or ${to}/ exists: ${(e as Error)?.message ?? e}`);
      throw e;
    }
    const got = new Map<string, number>();
    const raw = answer?.versions;
    if (typeof raw !== 'object' || raw === null) return got;
    for (const [rel, v] of Object.entries(raw)) if (versions.has(rel) && Number.isSafeInteger(v) && (v as number) > 0) got.set(rel, v as number);
    return got;
  }

  async remove(p: string, expect: { version: number }, trashStamp: string) {
    for (let n = 1; ; n++) {
      const to = `${TRASH}/${trashStamp}${n > 1 ? ` ${n}` : ''}/${this.full(p)}`;
      let free = true;
      await this.moveExpecting(p, to, expect, async (e) => {
        // the same name deleted twice under one stamp: the next slot
        if (n >= 100) throw e;
        free = false;
      });
      if (free) return to;
    }
  }

  async makeFolder(p: string) {
    try {
      await this.a.call('POST', '/api/folders', { name: this.full(p) });
      return true;
    } catch (e) {
      if (this.status(e) !== 404) throw e;
      this.noFolders = true; // a server without empty folders
      return false;
    }
  }

  async removeFolder(p: string) {
    // only while nothing is under it: a subfolder is looked for here; a file, by the server
    // (empty=1 removes no file, and refuses with 409 while one is there)
    const q = new URLSearchParams({ prefix: this.full(p) + '/', recursive: '1', limit: '1' });
    const under = await this.a.call<Unchecked<ListingPage>>('GET', `/api/files?${q}`);
    if (!Array.isArray(under?.files) || (under.folders !== undefined && !Array.isArray(under.folders))) throw new Error('the server sent a malformed listing');
    if (under.files.length || (Array.isArray(under.folders) && under.folders.length)) return false;
    try {
      await this.a.call('DELETE', `/api/folders?${new URLSearchParams({ name: this.full(p), empty: '1' })}`);
    } catch (e) {
      if (this.status(e) === 409) return false; // a file landed meanwhile
      if (this.status(e) !== 404) throw e; // gone already
    }
    return true;
  }
}

