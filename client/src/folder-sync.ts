/**
 * The page's folder sync (docs/web-client.md, "Keeping a folder in sync"), run in the sync
 * worker: the sync engine (shared/src/sync/engine.ts) over a folder picked with the File System
 * Access API and the server folder of its name. The local tree is a FileSystemDirectoryHandle
 * (`HandleTree`, handle-tree.ts); the server folder is shared/src/sync/remote.ts with the worker's delta push
 * and pull (`PageFolder`); the agreed state is kept in IndexedDB (`StoredState`, folder-state.ts). Passes run
 * when the folder changes (FileSystemObserver where the browser has it), at every change on the
 * server (the page forwards its live events), and by polling every POLL_MS.
 */
import { SYNC_MAX_DELETE_MIN, SYNC_MAX_DELETE_SHARE, SYNC_RESCAN_MS, SYNC_SETTLE_MS } from '../../shared/src/base/limits.ts';
import type { KnownVersions } from '../../shared/src/session/known.ts';
import { pull, push } from '../../shared/src/session/delta-client.ts';
import { type Done, type Expected, LocalChanged, type Skipped, type Stat, syncUntilStill, verifyLocal } from '../../shared/src/sync/engine.ts';
import type { Expect } from '../../shared/src/sync/plan.ts';
import { ApiFolder } from '../../shared/src/sync/remote.ts';
import { HttpError, call } from './api.ts';
import { blobSource } from './blob-source.ts';
import { type Dir, HandleTree, named } from './handle-tree.ts';
import { StoredState } from './folder-state.ts';
import { PageSocket } from './worker-socket.ts';

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


/** The server folder, with the local files read and written through the handle tree. */
export class PageFolder extends ApiFolder {
  constructor(
    private readonly tree: HandleTree,
    folder: string,
    url: string,
    known: KnownVersions,
  ) {
    super({ call, statusOf: (e) => (e instanceof HttpError ? e.status : undefined), folder, url, WebSocket: PageSocket, known });
  }

  async push(p: string, expect: Expect) {
    const f = await this.tree.file(p);
    try {
      const r = await push(blobSource(f), { ...this.pushOptions(p, expect, 1), modified: f.lastModified });
      return { version: r.version, root: r.root, size: f.size, mtimeMs: f.lastModified };
    } catch (e) {
      // the file changed on disk while it was read (a File's reads then fail): the next pass
      // reads it again
      if (named(e, 'NotReadableError')) throw new LocalChanged(`${p} changed here during the upload`);
      throw e;
    }
  }

  async pull(p: string, version: number, expect: Expected | null, basis?: string) {
    const basisFile = basis ? await this.tree.file(basis).catch(() => null) : null;
    const out = await this.tree.writer(p, expect);
    let st: Stat | null = null;
    try {
      const r = await pull(
        this.pullOptions(p, version, {
          basis: basisFile ? blobSource(basisFile) : null,
          sink: {
            write: out.write,
            // the local file is replaced only while its content is what the plan read
            commit: async () => (await verifyLocal(this.tree, p, expect), (st = await out.commit()), 0),
            abort: out.abort,
          },
        }),
      );
      return { version: r.version, root: r.root, ...st! };
    } finally {
      if (!st) await out.abort();
    }
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
