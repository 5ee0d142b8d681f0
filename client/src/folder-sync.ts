/**
 * The page's folder sync (docs/web-client.md, "Keeping a folder in sync"), run in the sync
 * worker: the sync engine (shared/src/sync-engine.ts) over a folder picked with the File System
 * Access API and the server folder of its name. The local tree is a FileSystemDirectoryHandle
 * (`HandleTree`); the server folder is shared/src/sync-remote.ts with the worker's delta push
 * and pull (`PageFolder`); the agreed state is kept in IndexedDB (`StoredState`). Passes run
 * when the folder changes (FileSystemObserver where the browser has it), at every change on the
 * server (the page forwards its live events), and by polling every POLL_MS.
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { chunkSource } from '../../shared/src/chunk-index.ts';
import { SYNC_MAX_DELETE_MIN, SYNC_MAX_DELETE_SHARE, SYNC_RESCAN_MS, SYNC_SETTLE_MS } from '../../shared/src/limits.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/protocol.ts';
import type { KnownVersions } from '../../shared/src/known.ts';
import { pull, push } from '../../shared/src/sync-client.ts';
import { type Done, LocalChanged, type LocalTree, type Skipped, type Stat, type SyncState, sameStat, syncUntilStill } from '../../shared/src/sync-engine.ts';
import type { Agreed } from '../../shared/src/sync-plan.ts';
import { ApiFolder, IGNORE_FILE, ignoreMatcher } from '../../shared/src/sync-remote.ts';
import { HttpError, call } from './api.ts';
import { blobSource } from './blob-source.ts';

/** A pass at least this often whatever the watchers said; with a FileSystemObserver that
 *  works, every SYNC_RESCAN_MS, as the CLI's --watch. Changes reported within SYNC_SETTLE_MS of
 *  each other are one pass; the delete guard has the CLI's defaults (docs/sync.md). */
export const POLL_MS = 2500;
/** Actions the panel is shown. */
const RECENT = 20;

/** What the page shows of the folder sync (`FromWorker` kind 'folder'). */
export interface FolderStatus {
  folder: string;
  /** waiting: another tab of this browser syncs this folder (it takes over when that one ends) */
  state: 'syncing' | 'in-sync' | 'error' | 'guard' | 'waiting';
  /** the last actions, newest last */
  recent: Done[];
  /** conflict copies made since the sync started */
  conflicts: string[];
  guard?: { deletes: number; allowed: number; files: number };
  error?: string;
  skipped: Skipped[];
  /** how changes here are found */
  watch: 'observer' | 'polling';
}


const named = (e: unknown, ...names: string[]) => e instanceof DOMException && names.includes(e.name);

/** An error the engine reads as "gone since the scan". */
const gone = (p: string) => Object.assign(new Error(`${p}: gone`), { code: 'ENOENT' });

type Dir = FileSystemDirectoryHandle;
type Entry = FileSystemFileHandle | FileSystemDirectoryHandle;
const entries = (d: Dir) => (d as unknown as { values(): AsyncIterable<Entry> }).values();

/** The suffix of a download's temporary file (ignored: `*.dsync-tmp-*`). */
const TEMP = '.dsync-tmp-page';

/** A temporary file not written for this long is left over (no tab writes it now). */
const STALE_TEMP_MS = 3600_000;

/** Moves a file: FileSystemHandle.move where the browser has it, else a copy and then the
 *  original (in `from`, named `old`) removed. */
async function moveHandle(h: FileSystemFileHandle, dst: Dir, name: string, from?: Dir, old?: string) {
  const move = (h as unknown as { move?: (d: Dir, n: string) => Promise<void> }).move;
  if (move) return move.call(h, dst, name);
  const copy = await dst.getFileHandle(name, { create: true });
  const w = await copy.createWritable();
  await w.write(await h.getFile());
  await w.close();
  await (from ?? dst).removeEntry(old ?? h.name);
}

/** The picked folder. Paths are '/'-separated, NFC (a name on disk in another form keeps it). */
export class HandleTree implements LocalTree {
  private onDisk = new Map<string, string>();

  constructor(readonly root: Dir) {}

  /** the handle of the folder `parts` (made when `create`) */
  private async dir(parts: string[], create = false): Promise<Dir> {
    let d = this.root;
    for (const c of parts) d = await d.getDirectoryHandle(c, { create });
    return d;
  }

  private split(p: string) {
    const parts = (this.onDisk.get(p) ?? p).split('/');
    return { parents: parts.slice(0, -1), name: parts[parts.length - 1] };
  }

  /** the handle of the file `p` */
  async fileHandle(p: string, create = false): Promise<FileSystemFileHandle> {
    const { parents, name } = this.split(p);
    return (await this.dir(parents, create)).getFileHandle(name, { create });
  }

  async file(p: string): Promise<File> {
    try {
      return await (await this.fileHandle(p)).getFile();
    } catch (e) {
      if (named(e, 'NotFoundError', 'TypeMismatchError')) throw gone(p);
      throw e;
    }
  }

  async ignoreRules() {
    const text = await this.root
      .getFileHandle(IGNORE_FILE)
      .then((h) => h.getFile())
      .then((f) => f.text())
      .catch(() => null);
    return ignoreMatcher(text);
  }

  async scan() {
    const ignored = await this.ignoreRules();
    const files = new Map<string, Stat>();
    const dirs = new Set<string>();
    const skipped: Skipped[] = [];
    this.onDisk.clear();
    const walk = async (d: Dir, rel: string) => {
      let list: Entry[] = [];
      try {
        for await (const e of entries(d)) list.push(e);
      } catch (e) {
        if (!rel) throw e; // the synced folder itself
        return void skipped.push({ path: rel, reason: `cannot read the folder: ${(e as Error).message}`, hold: true });
      }
      for (const e of list) {
        const p = rel + e.name;
        const key = p.normalize('NFC');
        if (e.kind === 'directory') {
          if (ignored(key, true)) continue;
          dirs.add(key);
          await walk(e, p + '/');
        } else if (ignored(key)) {
          // a download's temporary file left by a tab closed mid-download
          const at = e.name.endsWith(TEMP) ? (await e.getFile().catch(() => null))?.lastModified : undefined;
          if (at !== undefined && Date.now() - at > STALE_TEMP_MS) await d.removeEntry(e.name).catch(() => {});
        } else if (files.has(key)) {
          skipped.push({ path: key, reason: 'two names on disk for one name (Unicode forms)', hold: true });
        } else {
          try {
            const f = await e.getFile();
            files.set(key, { size: f.size, mtimeMs: f.lastModified });
            if (key !== p) this.onDisk.set(key, p);
          } catch (err) {
            if (!named(err, 'NotFoundError')) skipped.push({ path: key, reason: `cannot read: ${(err as Error).message}`, hold: true });
          }
        }
      }
    };
    await walk(this.root, '');
    return { files, dirs, skipped };
  }

  async hash(p: string) {
    const f = await this.file(p);
    const index = await chunkSource(blobSource(f), DEFAULT_PARAMS, DEFAULT_ALGO);
    return { hash: hex(index.root), size: f.size, mtimeMs: f.lastModified };
  }

  async stat(p: string): Promise<Stat | null> {
    try {
      const f = await this.file(p);
      return { size: f.size, mtimeMs: f.lastModified };
    } catch (e) {
      if ((e as { code?: string }).code === 'ENOENT') return null;
      throw e;
    }
  }

  /**
   * A writer of the file `p` that replaces it at `commit` only while it still has the stat
   * `expect` (null: no file), else LocalChanged. An existing file is written with createWritable,
   * which writes to a file of the browser's own beside it and puts it in place at close(): the
   * file is never seen half written, and abort() leaves it as it was. A new file is written
   * under a temporary name (`.NAME.dsync-tmp-page`, which the ignore rules leave alone) and
   * moved to its name once complete.
   */
  async writer(p: string, expect: Stat | null) {
    const { parents, name } = this.split(p);
    const dir = await this.dir(parents, true);
    const tmpName = `.${name}${TEMP}`;
    const target = expect ? await dir.getFileHandle(name) : await dir.getFileHandle(tmpName, { create: true });
    const w = await target.createWritable({ keepExistingData: false });
    let open = true;
    const discard = async () => {
      if (open) await w.abort().catch(() => {});
      open = false;
      if (!expect) await dir.removeEntry(tmpName).catch(() => {});
    };
    return {
      write: (b: Uint8Array) => w.write(b as Uint8Array<ArrayBuffer>),
      abort: discard,
      commit: async (): Promise<Stat> => {
        try {
          if (!sameStat(await this.stat(p), expect)) throw new LocalChanged(`${p} changed here during the download`);
          await w.close();
          open = false;
          if (!expect) await moveHandle(target, dir, name);
          return (await this.stat(p))!;
        } catch (e) {
          await discard();
          throw e;
        }
      },
    };
  }

  async rename(from: string, to: string, prune: boolean): Promise<void> {
    const parts = to.split('/');
    const name = parts.pop()!;
    const dst = await this.dir(parts, true);
    if (from.toLowerCase() === to.toLowerCase()) {
      // a case-only rename: through a name of its own, so that case-insensitive systems see it
      const tmp = [...parts, `${name}${TEMP}`].join('/');
      await this.moveFile(from, dst, `${name}${TEMP}`);
      await this.moveFile(tmp, dst, name);
    } else {
      if (await this.stat(to)) throw new Error(`${to} exists here`);
      await this.moveFile(from, dst, name);
    }
    this.onDisk.delete(from);
    if (prune) await this.pruneUp(this.split(from).parents);
  }

  private async moveFile(from: string, dst: Dir, name: string) {
    const { parents, name: old } = this.split(from);
    const src = await this.dir(parents);
    await moveHandle(await src.getFileHandle(old), dst, name, src, old);
  }

  async remove(p: string, prune: boolean): Promise<void> {
    const { parents, name } = this.split(p);
    try {
      await (await this.dir(parents)).removeEntry(name);
    } catch (e) {
      if (!named(e, 'NotFoundError')) throw e;
    }
    this.onDisk.delete(p);
    if (prune) await this.pruneUp(parents);
  }

  async mkdir(p: string): Promise<void> {
    await this.dir(p.split('/'), true);
  }

  async rmdir(p: string): Promise<boolean> {
    const { parents, name } = this.split(p);
    try {
      await (await this.dir(parents)).removeEntry(name);
      return true;
    } catch (e) {
      if (named(e, 'NotFoundError')) return true;
      if (named(e, 'InvalidModificationError')) return false;
      throw e;
    }
  }

  /** Removes folders left empty, up to (not including) the synced folder. */
  private async pruneUp(parents: string[]) {
    for (let n = parents.length; n > 0; n--) {
      try {
        await (await this.dir(parents.slice(0, n - 1))).removeEntry(parents[n - 1]);
      } catch {
        return;
      }
    }
  }
}

/** The server folder, with the local files read and written through the handle tree. */
export class PageFolder extends ApiFolder {
  constructor(
    private readonly tree: HandleTree,
    folder: string,
    url: string,
    private readonly known: KnownVersions,
  ) {
    super({ call, statusOf: (e) => (e instanceof HttpError ? e.status : undefined), folder, url, WebSocket });
  }

  async push(p: string, basisVersion: number) {
    const f = await this.tree.file(p);
    try {
      const r = await push(blobSource(f), { url: this.a.url, name: this.full(p), WebSocket: this.a.WebSocket, connection: this.connections, expect: basisVersion ? { version: basisVersion } : 'absent', retries: 1, known: this.known });
      return { version: r.version, root: r.root, size: f.size, mtimeMs: f.lastModified };
    } catch (e) {
      // the file changed on disk while it was read (a File's reads then fail): the next pass
      // reads it again
      if (named(e, 'NotReadableError')) throw new LocalChanged(`${p} changed here during the upload`);
      throw e;
    }
  }

  async pull(p: string, version: number, expect: Stat | null, basis?: string) {
    const basisFile = basis ? await this.tree.file(basis).catch(() => null) : null;
    const out = await this.tree.writer(p, expect);
    let st: Stat | null = null;
    try {
      const r = await pull({
        url: this.a.url,
        name: this.full(p),
        version,
        WebSocket: this.a.WebSocket,
        connection: this.connections,
        known: this.known,
        basis: basisFile ? blobSource(basisFile) : null,
        sink: { write: out.write, commit: async () => ((st = await out.commit()), 0), abort: out.abort },
      });
      return { version: r.version, root: r.root, ...st! };
    } finally {
      if (!st) await out.abort();
    }
  }
}

const DB = 'dsync-folder-sync';
const STORE = 'state';

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** The agreed state of one synced folder in IndexedDB, keyed by user, server and folder, with
 *  the local folder's handle: a state agreed with another local folder of the same name (its
 *  files would read as deleted here) is not used. A record that does not read back is an empty
 *  state (docs/sync.md: nothing is lost, only time). */
export class StoredState implements SyncState {
  files = new Map<string, Agreed>();
  folders = new Set<string>();

  private constructor(
    private readonly db: IDBDatabase,
    private readonly key: string,
    private readonly handle: Dir,
  ) {}

  static async open(key: string, handle: Dir): Promise<StoredState> {
    const r = indexedDB.open(DB, 1);
    r.onupgradeneeded = () => r.result.createObjectStore(STORE);
    const db = await request(r);
    const s = new StoredState(db, key, handle);
    const j = (await request(db.transaction(STORE, 'readonly').objectStore(STORE).get(key))) as { files?: unknown; folders?: unknown; handle?: Dir } | undefined;
    if (!j?.handle || !(await j.handle.isSameEntry(handle).catch(() => false))) return s;
    if (Array.isArray(j?.files))
      for (const e of j.files) {
        if (!Array.isArray(e) || e.length !== 5) continue;
        const [p, version, hash, size, mtimeMs] = e;
        if (typeof p === 'string' && Number.isSafeInteger(version) && version > 0 && typeof hash === 'string' && /^[0-9a-f]+$/.test(hash) && Number.isSafeInteger(size) && size >= 0 && typeof mtimeMs === 'number') s.files.set(p, { version, hash, size, mtimeMs });
      }
    if (Array.isArray(j?.folders)) for (const d of j.folders) if (typeof d === 'string' && d) s.folders.add(d);
    return s;
  }

  async save(): Promise<void> {
    const files = [...this.files].map(([p, a]) => [p, a.version, a.hash, a.size, a.mtimeMs]);
    const tx = this.db.transaction(STORE, 'readwrite');
    tx.objectStore(STORE).put({ files, folders: [...this.folders], handle: this.handle }, this.key);
    await new Promise<void>((ok, fail) => {
      tx.oncomplete = () => ok();
      tx.onerror = () => fail(tx.error);
    });
  }
}

declare const FileSystemObserver: (new (cb: (records: { type: string }[]) => void) => { observe(h: Dir, o: { recursive: boolean }): Promise<void>; disconnect(): void }) | undefined;

export interface FolderSyncOptions {
  handle: Dir;
  /** the sync URL, user and device (conflict copies' names) */
  url: string;
  user: string;
  device: string;
  known: KnownVersions;
  post: (s: FolderStatus) => void;
}

/** Keeps the picked folder and the server folder of its name in sync until `stop()`. */
export class FolderSync {
  private readonly tree: HandleTree;
  private readonly remote: PageFolder;
  private state: Promise<StoredState>;
  private status: FolderStatus;
  private running = false;
  private again = false;
  private stopped = false;
  private allowOnce = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private settle: ReturnType<typeof setTimeout> | undefined;
  private observer: { disconnect(): void } | null = null;
  private readonly abort = new AbortController();
  /** this tab holds the folder's lock: its passes run */
  private holding = false;
  private unlock: (() => void) | null = null;

  constructor(private readonly o: FolderSyncOptions) {
    const folder = o.handle.name;
    this.tree = new HandleTree(o.handle);
    this.remote = new PageFolder(this.tree, folder, o.url, o.known);
    const key = `${o.user || 'local'}\n${new URL(o.url).host}\n${folder}`;
    this.state = StoredState.open(key, o.handle);
    this.status = { folder, state: 'syncing', recent: [], conflicts: [], skipped: [], watch: 'polling' };
    o.post({ ...this.status });
    void this.observe();
    this.hold(`dsync-folder-sync\n${key}`);
  }

  /** Passes run only while this tab holds the folder's Web Lock: two tabs syncing one folder
   *  would each keep a state of their own. The lock goes with the worker (a closed tab). */
  private hold(name: string) {
    const locks = (navigator as Navigator & { locks?: LockManager }).locks;
    if (!locks) {
      this.holding = true;
      return this.request();
    }
    const held = (lock: Lock | null): Promise<void> | null => {
      if (!lock) return null;
      if (this.stopped) return Promise.resolve();
      this.holding = true;
      this.status.state = 'syncing';
      this.request();
      return new Promise<void>((resolve) => (this.unlock = resolve));
    };
    void locks.request(name, { ifAvailable: true }, (lock) => {
      if (lock) return held(lock);
      this.status.state = 'waiting';
      this.o.post({ ...this.status });
      void locks.request(name, { signal: this.abort.signal }, held).catch(() => {});
      return null;
    });
  }

  /** FileSystemObserver where the browser has one; polling stays as the safety net, and is all
   *  there is where the observer reports "unknown" or "errored" or is missing. */
  private async observe() {
    if (typeof FileSystemObserver !== 'function') return;
    try {
      const obs = new FileSystemObserver((records) => {
        if (records.some((r) => r.type === 'unknown' || r.type === 'errored')) this.status.watch = 'polling';
        this.soon();
      });
      await obs.observe(this.o.handle, { recursive: true });
      this.observer = obs;
      this.status.watch = 'observer';
    } catch {
      this.status.watch = 'polling';
    }
  }

  /** a pass after the burst of changes settles */
  soon() {
    clearTimeout(this.settle);
    this.settle = setTimeout(() => this.request(), SYNC_SETTLE_MS);
  }

  /** a pass now, or after the running one */
  request() {
    if (this.stopped || !this.holding) return;
    if (this.running) return void (this.again = true);
    void this.run();
  }

  /** the delete guard stopped the sync: the next pass may delete what it found */
  allowDeletes() {
    this.allowOnce = true;
    this.request();
  }

  stop() {
    this.stopped = true;
    this.abort.abort();
    clearTimeout(this.timer);
    clearTimeout(this.settle);
    this.observer?.disconnect();
    this.remote.close();
    this.unlock?.();
  }

  private async run() {
    this.running = true;
    clearTimeout(this.timer);
    const s = this.status;
    try {
      do {
        this.again = false;
        const allow = this.allowOnce;
        this.allowOnce = false;
        const r = await syncUntilStill(this.tree, this.remote, await this.state, {
          device: this.o.device,
          maxDeleteShare: allow ? 1 : SYNC_MAX_DELETE_SHARE,
          maxDeleteMin: allow ? Number.MAX_SAFE_INTEGER : SYNC_MAX_DELETE_MIN,
          signal: this.abort.signal,
          onAction: (d) => {
            // (a pass that finds nothing to do leaves the state as it was: a poll does not flicker)
            if (s.state !== 'guard') s.state = 'syncing';
            s.recent = [...s.recent, d].slice(-RECENT);
            if (d.conflictCopy) s.conflicts = [...s.conflicts, d.conflictCopy];
            this.o.post({ ...s });
          },
        });
        s.skipped = r.skipped;
        s.guard = r.guard;
        const failed = r.done.filter((d) => d.error);
        s.error = failed.length ? `${'path' in failed[0] ? failed[0].path : failed[0].from}: ${failed[0].error}` : undefined;
        s.state = r.guard ? 'guard' : failed.length ? 'error' : r.agreed ? 'in-sync' : 'syncing';
      } while (this.again && !this.stopped);
    } catch (e) {
      s.state = 'error';
      s.error = e instanceof Error ? e.message : String(e);
    } finally {
      this.running = false;
    }
    if (this.stopped) return;
    this.o.post({ ...s });
    // what is left (a file changing as it was read, the server away) is tried by the next poll
    this.timer = setTimeout(() => this.request(), this.status.watch === 'observer' && s.state === 'in-sync' ? SYNC_RESCAN_MS : POLL_MS);
  }
}

/** The page's messages to the worker about the folder sync (one folder per worker). */
export type FolderToWorker =
  | { kind: 'folder-start'; handle: Dir; url: string; user: string; device: string }
  /** the server changed (the page's live events): a pass */
  | { kind: 'folder-pass' }
  | { kind: 'folder-allow-deletes' }
  | { kind: 'folder-stop' };

/** The worker's message to the page: where the folder sync is. */
export type FolderFromWorker = { kind: 'folder'; status: FolderStatus };

export const isFolderMessage = (m: { kind: string }): m is FolderToWorker => m.kind.startsWith('folder-');
