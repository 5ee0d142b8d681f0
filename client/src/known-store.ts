/**
 * The page's known versions (shared/src/session/known.ts) kept in IndexedDB, so that after a reload, or
 * on the next visit, the edit of a file this browser synced still goes up in one round trip.
 * One set per signed-in user (the single-user server's is "local"). Where IndexedDB cannot be
 * opened (a private window may refuse it), they are kept in memory for the page's lifetime.
 */
import { type KnownVersion, type KnownVersions, MemoryKnown } from '../../shared/src/session/known.ts';
import { openStoreDb, request } from './idb.ts';

const DB = 'dsync-known';
const STORE = 'versions';

const openDb = () => openStoreDb(DB, STORE);

export class StoredKnown implements KnownVersions {
  private mem = new MemoryKnown(64 << 20, (key) => this.drop(key));
  private constructor(
    private db: IDBDatabase | null,
    private scope: string,
  ) {}

  /** The known versions of `scope` (a user), read in full before the first sync uses them. */
  static async open(scope: string): Promise<StoredKnown> {
    const db = await openDb().catch(() => null);
    const s = new StoredKnown(db, scope);
    if (db) {
      try {
        const range = IDBKeyRange.bound(`${scope}\n`, `${scope}\n\uffff`);
        const tx = db.transaction(STORE, 'readonly').objectStore(STORE);
        const [keys, values] = await Promise.all([request(tx.getAllKeys(range)), request(tx.getAll(range))]);
        keys.forEach((k, i) => s.mem.set(String(k).slice(scope.length + 1), values[i] as KnownVersion));
      } catch {
        /* unreadable: start empty */
      }
    }
    return s;
  }

  get(key: string) {
    return this.mem.get(key);
  }

  set(key: string, v: KnownVersion) {
    this.mem.set(key, v);
    this.write((s) => s.put(v, `${this.scope}\n${key}`));
  }

  delete(key: string) {
    this.mem.delete(key);
    this.drop(key);
  }

  private drop(key: string) {
    this.write((s) => s.delete(`${this.scope}\n${key}`));
  }

  /** Best effort: a version that could not be stored only costs the next push a round trip. */
  private write(f: (s: IDBObjectStore) => IDBRequest) {
    try {
      if (this.db) void request(f(this.db.transaction(STORE, 'readwrite').objectStore(STORE))).catch(() => {});
    } catch {
      /* quota, or the database closed */
    }
  }
}
