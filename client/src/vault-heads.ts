/**
 * The last head this browser saw of each vault (shared/src/vault/vault.ts `HeadMemory`), kept
 * in IndexedDB so that a server that rolls a vault back, or forks it, is refused after a reload
 * or on the next visit too, as the CLI refuses it. A head is never replaced by an older one
 * (another tab may have seen a newer head meanwhile). Where IndexedDB cannot be opened (a
 * private window may refuse it), the heads are kept in memory for the worker's lifetime.
 */
import { type HeadMemory, type SeenHead, memoryHeads } from '../../shared/src/vault/vault.ts';
import { openStoreDb, request } from './idb.ts';

const DB = 'dsync-vault-heads';
const STORE = 'heads';

const openDb = () => openStoreDb(DB, STORE);

const isSeen = (v: unknown): v is SeenHead => typeof (v as SeenHead)?.seq === 'number' && typeof (v as SeenHead)?.hash === 'string';

/** The heads of `scope`'s vaults (the signed-in user; "local" on a single-user server). */
export async function storedHeads(scope: string): Promise<HeadMemory> {
  const db = await openDb().catch(() => null);
  if (!db) return memoryHeads();
  const key = (id: string) => `${scope}\n${id}`;
  return {
    async get(id) {
      const v = await request(db.transaction(STORE, 'readonly').objectStore(STORE).get(key(id)));
      return isSeen(v) ? v : null;
    },
    async set(id, seen) {
      // read and write in one transaction: never an older head over a newer one
      const tx = db.transaction(STORE, 'readwrite');
      const s = tx.objectStore(STORE);
      const before = await request(s.get(key(id)));
      if (!isSeen(before) || before.seq <= seen.seq) s.put(seen, key(id));
      await new Promise<void>((resolve, reject) => {
        tx.oncomplete = () => resolve();
        tx.onerror = tx.onabort = () => reject(tx.error ?? new Error('the vault head could not be kept'));
      });
    },
  };
}
