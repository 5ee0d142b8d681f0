/**
 * Where the page's kept files (kept-store.ts) live, as this page or worker sees them: the
 * `dsync-kept` folder of the Origin Private File System, written the way this context can (a
 * probe file decides: a sync access handle, a writable stream, or none and why), else, where
 * the origin has no OPFS, an IndexedDB store of their bytes, else nothing and why. Every
 * context of an origin opens the same one; each opens and probes it once (`openKept`).
 */
import { openStoreDb, request } from './idb.ts';

/** The OPFS folder, the IndexedDB database, the Web Lock and the channel of the kept files. */
export const KEPT_DIR = 'dsync-kept';

export interface Writer {
  write(bytes: Uint8Array): Promise<void>;
  /** the bytes written are the file's */
  close(): Promise<void>;
  /** stops; what was written may be lost */
  abort(): Promise<void>;
}

/**
 * Where kept files live, as this page or worker sees it: the OPFS folder, or where the origin
 * has no OPFS, an IndexedDB store of blobs. Every context of an origin opens the same one (OPFS
 * is there for all of them or for none); how each writes is its own (`WritePath`).
 */
export interface Dir {
  /** the names of its files */
  names(): Promise<string[]>;
  /** a file's bytes, with when it was last written; rejects with NotFoundError when it has none */
  file(name: string): Promise<File>;
  /** writes `name` anew from its start (rejects with why, where this context cannot write) */
  writer(name: string): Promise<Writer>;
  /** removes `name`; rejects with NotFoundError when it has none */
  remove(name: string): Promise<void>;
}

/** How a context writes OPFS files, decided once per page or worker on a throwaway probe file
 *  (`probe`): a sync access handle (a worker), else a writable stream, else not at all. */
export type WritePath = 'sync' | 'writable';

/** The store of this context, or why there is none (the panel says it). */
export type Opened = { dir: Dir; path: WritePath | 'indexeddb' | null; why?: string } | { dir: null; why: string };
let opened: Promise<Opened> | undefined;

/** An error's name and message, for the panel. */
export function describe(e: unknown): string {
  return e instanceof Error ? `${e.name === 'Error' ? '' : `${e.name}: `}${e.message}` : String(e);
}

/** Names of probe files start so: never a kept file's (KEPT_NAME), never the index's. */
const PROBE = 'probe-';
const PROBE_BYTES = new TextEncoder().encode('dsync probe');
/** A probe file older than this is an earlier context's that could not remove it (WebKitGTK
 *  leaves a file its sync access handle failed on unwritable); younger ones may be in use. */
const PROBE_STALE_MS = 60_000;

/** Opens `h` for writing from its start the way `path` says. */
async function openWriter(h: FileSystemFileHandle, path: WritePath): Promise<Writer> {
  if (path === 'sync') {
    const a = await h.createSyncAccessHandle();
    try {
      a.truncate(0);
    } catch (e) {
      a.close();
      throw e;
    }
    let at = 0;
    return {
      write: async (b) => {
        if (a.write(b, { at }) !== b.length) throw new Error('short write');
        at += b.length;
      },
      close: async () => {
        a.flush();
        a.close();
      },
      abort: async () => a.close(),
    };
  }
  const w = await h.createWritable();
  return { write: (b) => w.write(b as BufferSource), close: () => w.close(), abort: () => w.abort() };
}

/**
 * This context's way of writing files in the kept folder `d`: each way the context offers is
 * tried on a probe file of its own (written, read back, removed), never on a file to keep, for
 * a way can fail and leave its file unwritable to the next (WebKitGTK: `createSyncAccessHandle`
 * fails with NotSupportedError, and `createWritable` on that file then with InvalidStateError).
 * Rejects with what each way answered when none works.
 */
async function probe(d: FileSystemDirectoryHandle): Promise<WritePath> {
  for (const n of await namesOf(d).catch(() => [])) {
    const at = Number(n.slice(PROBE.length).split('-')[0]);
    if (n.startsWith(PROBE) && !(Date.now() - at < PROBE_STALE_MS)) await d.removeEntry(n).catch(() => {});
  }
  const tried: string[] = [];
  const offered = typeof FileSystemFileHandle === 'undefined' ? {} : FileSystemFileHandle.prototype;
  for (const path of ['sync', 'writable'] as const) {
    if (!((path === 'sync' ? 'createSyncAccessHandle' : 'createWritable') in offered)) continue;
    const name = `${PROBE}${Date.now()}-${Math.random().toString(36).slice(2)}`;
    try {
      const h = await d.getFileHandle(name, { create: true });
      const w = await openWriter(h, path);
      await w.write(PROBE_BYTES);
      await w.close();
      const back = new Uint8Array(await (await h.getFile()).arrayBuffer());
      if (back.length !== PROBE_BYTES.length || back.some((b, i) => b !== PROBE_BYTES[i])) throw new Error('the bytes read back differ');
      return path;
    } catch (e) {
      tried.push(`${path === 'sync' ? 'sync access handle' : 'writable stream'}: ${describe(e)}`);
    } finally {
      await d.removeEntry(name).catch(() => {}); // left, it goes once stale
    }
  }
  throw new Error(tried.length ? tried.join('; ') : 'this browser offers no way to write its private files here');
}

/** A folder's names (TypeScript's DOM types leave out its async iteration). */
async function namesOf(d: FileSystemDirectoryHandle): Promise<string[]> {
  const out: string[] = [];
  for await (const [name, h] of (d as unknown as { entries(): AsyncIterable<[string, FileSystemHandle]> }).entries()) if (h.kind === 'file') out.push(name);
  return out;
}

function opfsDir(d: FileSystemDirectoryHandle, path: WritePath | null, why?: string): Dir {
  return {
    names: () => namesOf(d),
    file: async (name) => (await d.getFileHandle(name)).getFile(),
    writer: async (name) => {
      if (!path) throw new Error(`this ${inWorker ? 'worker' : 'page'} cannot write private files (${why})`);
      return openWriter(await d.getFileHandle(name, { create: true }), path);
    },
    remove: (name) => d.removeEntry(name),
  };
}

const inWorker = typeof window === 'undefined';

/** The IndexedDB database of kept files where the origin has no OPFS: the bytes of each file,
 *  by name, as the slices written (not a Blob: WebKit's ephemeral sessions refuse Blobs in
 *  IndexedDB, "Error preparing Blob/File data to be stored"). */
const IDB_STORE = 'files';
interface IdbFile {
  parts: Uint8Array[];
  /** when written (ms since the epoch) */
  at: number;
}

const idbOpen = () => openStoreDb(KEPT_DIR, IDB_STORE);

async function idbDo<T>(db: IDBDatabase, mode: IDBTransactionMode, f: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const tx = db.transaction(IDB_STORE, mode);
  const r = await request(f(tx.objectStore(IDB_STORE)));
  await new Promise<void>((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = tx.onabort = () => reject(tx.error ?? new Error('IndexedDB transaction aborted'));
  });
  return r;
}

const notFound = (name: string) => new DOMException(`${name}: none kept`, 'NotFoundError');

function idbDir(db: IDBDatabase): Dir {
  return {
    names: async () => (await idbDo(db, 'readonly', (s) => s.getAllKeys())).map(String),
    file: async (name) => {
      const v = (await idbDo(db, 'readonly', (s) => s.get(name))) as IdbFile | undefined;
      if (!v) throw notFound(name);
      return new File(v.parts as BlobPart[], name, { lastModified: v.at });
    },
    // the slices are held until the blob is stored whole (a kept file is at most KNOWN_MAX_FILE)
    writer: async (name) => {
      const parts: Uint8Array[] = [];
      return {
        write: async (b) => void parts.push(b),
        close: async () => void (await idbDo(db, 'readwrite', (s) => s.put({ parts, at: Date.now() } satisfies IdbFile, name))),
        abort: async () => void (parts.length = 0),
      };
    },
    remove: async (name) => {
      if ((await idbDo(db, 'readonly', (s) => s.count(name))) === 0) throw notFound(name);
      await idbDo(db, 'readwrite', (s) => s.delete(name));
    },
  };
}

/** Stores a few bytes and reads them back: some private modes refuse what IndexedDB stores. */
async function idbProbe(db: IDBDatabase) {
  const dir = idbDir(db);
  const name = `${PROBE}${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const w = await dir.writer(name);
  await w.write(PROBE_BYTES);
  await w.close();
  const back = new Uint8Array(await (await dir.file(name)).arrayBuffer());
  await dir.remove(name);
  if (back.length !== PROBE_BYTES.length || back.some((b, i) => b !== PROBE_BYTES[i])) throw new Error('the bytes read back differ');
}

/**
 * The kept store of this context, opened and probed once: the OPFS folder where the origin has
 * OPFS (with this context's write path, or none and why: a page of Safari before 26 writes no
 * files, its worker does), else IndexedDB blobs, else nothing and why. Kept files are named by
 * SHA-256, so a page without crypto.subtle (plain http) keeps nothing.
 */
export function openKept(): Promise<Opened> {
  opened ??= (async (): Promise<Opened> => {
    if (typeof crypto === 'undefined' || !crypto.subtle) return { dir: null, why: 'kept files are named by SHA-256, which this browser offers only on https' };
    let noOpfs: string;
    try {
      const d = await (await navigator.storage.getDirectory()).getDirectoryHandle(KEPT_DIR, { create: true });
      try {
        return { dir: opfsDir(d, await probe(d)), path: null };
      } catch (e) {
        const why = describe(e);
        return { dir: opfsDir(d, null, why), path: null, why };
      }
    } catch (e) {
      noOpfs = typeof navigator.storage?.getDirectory === 'function' ? describe(e) : 'no Origin Private File System';
    }
    try {
      const db = await idbOpen();
      await idbProbe(db);
      return { dir: idbDir(db), path: 'indexeddb' };
    } catch (e) {
      return { dir: null, why: `${noOpfs}; IndexedDB: ${describe(e)}` };
    }
  })();
  return opened;
}
