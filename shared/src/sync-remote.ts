/**
 * The server side of the sync engine (shared/src/sync-engine.ts `RemoteFolder`), the part that
 * is the same in the CLI and the page: the REST calls (the recursive listing, versions, moves,
 * the trash, folders), the ignore rules, and the connections of the delta push and pull (a
 * `ConnectionPool`).
 * Reading and writing local files is each side's own (cli/sync-io.ts `HttpFolder`,
 * client/src/folder-sync.ts `PageFolder`).
 */
import ignore from 'ignore';
import { DEFAULT_ALGO } from './protocol.ts';
import type { WebSocketCtor } from './conn.ts';
import type { KnownVersions } from './known.ts';
import type { PullOptions, PushOptions } from './sync-client.ts';
import { ConnectionPool } from './connection-pool.ts';
import { type Expected, IGNORE_FILE, type RemoteFolder, RemoteChanged, type Skipped, type Stat } from './sync-engine.ts';
import { nameProblem, shownName } from './names.ts';
import type { Expect, RemoteFile } from './sync-plan.ts';

/** The folder on the server that holds what sync deletes, with its history (docs/sync.md). */
export const TRASH = '.dsync-trash';

export { IGNORE_FILE } from './sync-engine.ts';

/** Always ignored: temporary files of editors and systems, and the engine's own. */
export const DEFAULT_IGNORES = ['.DS_Store', 'Thumbs.db', 'desktop.ini', '*.tmp', '*.swp', '*.swo', '*~', '~$*', '.#*', '.~lock.*#', '*.dsync-tmp-*', `/${TRASH}/`];

/** The ignore rules: the defaults and the text of the folder's .dsyncignore, if any. The
 *  .dsyncignore itself is this device's own and never synced (Syncthing's rule: one device's
 *  rules cannot silence another's files), whatever its text says. */
export function ignoreMatcher(text: string | null): (p: string, isDir?: boolean) => boolean {
  const ig = ignore().add(DEFAULT_IGNORES);
  if (text !== null) ig.add(text);
  return (p, isDir) => (!isDir && p === IGNORE_FILE) || ig.ignores(isDir ? p + '/' : p);
}

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

  private status(e: unknown) {
    return this.a.statusOf(e);
  }

  close() {
    this.connections.close();
  }

  async list(): Promise<{ files: Map<string, RemoteFile>; folders: Set<string> | null; skipped: Skipped[] }> {
    const prefix = this.a.folder ? this.a.folder + '/' : '';
    const out = new Map<string, RemoteFile>();
    const skipped: Skipped[] = [];
    const fits = (full: string) => listedNameFits(full, full.slice(prefix.length), this.a, skipped);
    let folders: Set<string> | null = new Set<string>();
    const inTrash = (p: string) => !prefix && (p === TRASH || p.startsWith(TRASH + '/'));
    let cursor: string | null = '';
    do {
      const q: URLSearchParams = new URLSearchParams({ prefix, recursive: '1', limit: String(LIST_PAGE), ...(cursor && { cursor }) });
      const page: { files: { name: string; latest: number; size: number }[]; folders?: unknown; next: string | null; complete?: unknown; held?: unknown } = await this.a.call('GET', `/api/files?${q}`);
      if (!Array.isArray(page?.files)) throw new Error('the server does not list folders recursively: it needs an update');
      // a page the server does not vouch for as whole is no listing: files it lacks would read
      // as deleted on the server (a server of an earlier version sends none)
      if (page.complete !== true) throw new Error("the server's listing is not whole (no \"complete\" mark): nothing is planned from it; the server may need an update");
      // folders where the server left out a stored name it would refuse (a damaged or tampered
      // store): what this device has there and the listing lacks is held, not deleted
      for (const f of Array.isArray(page.held) ? page.held : []) {
        if (typeof f !== 'string' || (f && !f.endsWith('/'))) throw new Error('the server sent a malformed listing');
        const reason = 'the server left out names stored here that it refuses (a damaged store): nothing under it is deleted';
        if (f === prefix || (!f && !prefix)) throw new Error(`the server's listing of the folder is not whole: ${reason}`);
        if (f.startsWith(prefix)) skipped.push({ path: f.slice(prefix.length), reason, hold: true });
      }
      for (const f of page.files) {
        if (typeof f.name !== 'string' || !f.name.startsWith(prefix) || !Number.isSafeInteger(f.latest) || !Number.isSafeInteger(f.size)) throw new Error('the server sent a malformed listing');
        const p = f.name.slice(prefix.length);
        if (!inTrash(p) && fits(f.name)) out.set(p, { version: f.latest, size: f.size });
      }
      if (!Array.isArray(page.folders)) folders = null;
      for (const d of folders ? (page.folders as unknown[]) : []) {
        if (typeof d !== 'string' || !d.startsWith(prefix) || !d.endsWith('/') || d.length <= prefix.length + 1) throw new Error('the server sent a malformed listing');
        const p = d.slice(prefix.length, -1);
        if (!inTrash(p) && fits(d.slice(0, -1))) folders!.add(p);
      }
      if (page.next !== null && typeof page.next !== 'string') throw new Error('the server sent a malformed listing');
      cursor = page.next;
    } while (cursor);
    // a server that lists no folders beside files in folders keeps no empty folders either
    if (this.noFolders || (folders && !folders.size && [...out.keys()].some((p) => p.includes('/')))) folders = null;
    return { files: out, folders, skipped };
  }

  private async versionList(p: string): Promise<{ version: number; root: string; algo: number }[]> {
    let list: unknown;
    try {
      list = await this.a.call('GET', `/api/versions?${new URLSearchParams({ name: this.full(p) })}`);
    } catch (e) {
      if (this.status(e) === 404) return [];
      throw e;
    }
    const ok = (v: any) => Number.isSafeInteger(v?.version) && v.version > 0 && typeof v.root === 'string' && Number.isSafeInteger(v.algo);
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
   *  the latest is: the caller verifies what it records (sync-engine.ts, moveRemote). */
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
    let answer: { versions?: unknown };
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
    const under = await this.a.call<{ files: unknown[]; folders?: unknown[] }>('GET', `/api/files?${q}`);
    if (!Array.isArray(under?.files)) throw new Error('the server sent a malformed listing');
    if (under.files.length || under.folders?.length) return false;
    try {
      await this.a.call('DELETE', `/api/folders?${new URLSearchParams({ name: this.full(p), empty: '1' })}`);
    } catch (e) {
      if (this.status(e) === 409) return false; // a file landed meanwhile
      if (this.status(e) !== 404) throw e; // gone already
    }
    return true;
  }
}

