/**
 * The agreed state of a folder the page keeps in sync (the sync engine's SyncState), kept in
 * IndexedDB (docs/web-client.md, "Keeping a folder in sync").
 */
import type { SyncState } from '../../shared/src/sync/engine.ts';
import type { Agreed } from '../../shared/src/sync/plan.ts';
import type { Dir } from './handle-tree.ts';
import { openStoreDb, request } from './idb.ts';

const DB = 'dsync-folder-sync';
const STORE = 'state';

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
    const db = await openStoreDb(DB, STORE);
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
