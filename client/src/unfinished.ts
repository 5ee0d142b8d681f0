/**
 * Uploads this browser started and has not seen finish, kept in IndexedDB so that a reload or
 * a closed tab does not lose them without a trace: on the next load the page says which did
 * not finish. A file dropped where the browser gives a file handle (Chromium's
 * DataTransferItem.getAsFileSystemHandle) keeps its handle, which IndexedDB can store (a File
 * cannot be re-read after a reload); the page then offers to finish those, after the browser
 * grants read access again. Where IndexedDB cannot be opened, nothing is remembered.
 */
import { openStoreDb, request } from './idb.ts';

export interface Unfinished {
  name: string;
  size: number;
  /** ms since the epoch when it was queued */
  at: number;
  handle?: FileSystemFileHandle;
}

const DB = 'dsync-unfinished';
const STORE = 'uploads';

let db: Promise<IDBDatabase | null> | null = null;
function openDb(): Promise<IDBDatabase | null> {
  db ??= openStoreDb(DB, STORE).catch(() => null);
  return db;
}

/** Keys by server and name: one entry per file a server is to get. */
const key = (scope: string, name: string) => `${scope}\n${name}`;

/** Changes waiting for the next write: many settle at once in a batch, one transaction each tick. */
let pending: { put: Map<string, Unfinished>; drop: Set<string> } | null = null;
function flush(change: (p: { put: Map<string, Unfinished>; drop: Set<string> }) => void): void {
  if (!pending) {
    pending = { put: new Map(), drop: new Set() };
    setTimeout(() => {
      const p = pending!;
      pending = null;
      void openDb().then((d) => {
        if (!d) return;
        const s = d.transaction(STORE, 'readwrite').objectStore(STORE);
        for (const k of p.drop) s.delete(k);
        for (const [k, v] of p.put) s.put(v, k);
      });
    }, 0);
  }
  change(pending);
}

/** Notes uploads as started (`scope`: the server and user they go to). */
export function rememberUploads(scope: string, uploads: Unfinished[]): void {
  flush((p) => {
    for (const u of uploads) {
      p.drop.delete(key(scope, u.name));
      p.put.set(key(scope, u.name), u);
    }
  });
}

/** Notes an upload as finished (stored, or given up by the person). */
export function forgetUpload(scope: string, name: string): void {
  flush((p) => {
    p.put.delete(key(scope, name));
    p.drop.add(key(scope, name));
  });
}

/** The uploads of `scope` that did not finish, oldest first. */
export async function unfinishedUploads(scope: string): Promise<Unfinished[]> {
  const d = await openDb();
  if (!d) return [];
  try {
    const all = (await request(d.transaction(STORE, 'readonly').objectStore(STORE).getAll(IDBKeyRange.bound(`${scope}\n`, `${scope}\n\uffff`)))) as Unfinished[];
    return all.sort((a, b) => a.at - b.at);
  } catch {
    return [];
  }
}

/** Forgets every unfinished upload of `scope`. */
export async function forgetAll(scope: string): Promise<void> {
  const d = await openDb();
  if (!d) return;
  await new Promise<void>((resolve) => {
    const tx = d.transaction(STORE, 'readwrite');
    tx.objectStore(STORE).delete(IDBKeyRange.bound(`${scope}\n`, `${scope}\n\uffff`));
    tx.oncomplete = tx.onerror = () => resolve();
  });
}

/** The File of an unfinished upload's handle, once the browser grants read access again
 *  (asked on a click); null when there is no handle, access is refused or the file is gone. */
export async function fileOf(u: Unfinished): Promise<File | null> {
  const h = u.handle as (FileSystemFileHandle & { queryPermission?: (o: object) => Promise<string>; requestPermission?: (o: object) => Promise<string> }) | undefined;
  if (!h) return null;
  try {
    if (h.queryPermission && (await h.queryPermission({ mode: 'read' })) !== 'granted' && (await h.requestPermission?.({ mode: 'read' })) !== 'granted') return null;
    return await h.getFile();
  } catch {
    return null;
  }
}
