/**
 * The page's PieceCache (shared/src/vault/cache.ts) in IndexedDB (database
 * `dsync-vault-pieces`): the sealed list pieces (tree and manifests) of each vault this browser
 * fetched or wrote, per user and vault, so that a reload, another tab or the next visit reads a
 * vault's tree and manifests from here and fetches only the pieces that changed. Sealed bytes
 * only: a piece from here is opened and checked as a fetched one is, and one that does not
 * open (damaged, another vault's) is dropped and fetched again. Up to VAULT_PIECE_CACHE_MAX
 * bytes a vault, the oldest written dropped first (the sizes are read once, when the vault is
 * opened). Where IndexedDB cannot be opened (a private window may refuse it), in memory.
 */
import { VAULT_PIECE_CACHE_MAX } from '../../shared/src/base/limits.ts';
import { type PieceCache, memoryPieceCache } from '../../shared/src/vault/cache.ts';
import { openStoreDb, request } from './idb.ts';

const DB = 'dsync-vault-pieces';
const STORE = 'pieces';

interface Entry {
  sealed: Uint8Array;
  /** when it was written here (ms) */
  at: number;
}

const isEntry = (v: unknown): v is Entry => (v as Entry)?.sealed instanceof Uint8Array && typeof (v as Entry)?.at === 'number';

const done = (tx: IDBTransaction) =>
  new Promise<void>((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = tx.onabort = () => reject(tx.error ?? new Error('the vault piece cache could not be written'));
  });

/** The pieces of vault `id` of `scope` (the signed-in user; "local" on a single-user server). */
export async function storedPieces(scope: string, id: string, cap: number = VAULT_PIECE_CACHE_MAX): Promise<PieceCache> {
  const db = await openStoreDb(DB, STORE).catch(() => null);
  if (!db) return memoryPieceCache(cap);
  const prefix = `${scope}\n${id}\n`;
  const key = (piece: string) => prefix + piece;
  // this vault's entries, oldest first: their sizes, for the cap
  const sizes = new Map<string, number>();
  let bytes = 0;
  const all: { key: string; size: number; at: number }[] = [];
  await new Promise<void>((resolve, reject) => {
    const r = db.transaction(STORE, 'readonly').objectStore(STORE).openCursor(IDBKeyRange.bound(prefix, prefix + '\uffff'));
    r.onerror = () => reject(r.error);
    r.onsuccess = () => {
      const c = r.result;
      if (!c) return resolve();
      const v: unknown = c.value;
      all.push({ key: String(c.key), size: isEntry(v) ? v.sealed.length : 0, at: isEntry(v) ? v.at : 0 });
      c.continue();
    };
  });
  for (const e of all.sort((a, b) => a.at - b.at)) {
    sizes.set(e.key, e.size);
    bytes += e.size;
  }
  const remove = async (keys: string[]) => {
    if (!keys.length) return;
    const tx = db.transaction(STORE, 'readwrite');
    for (const k of keys) tx.objectStore(STORE).delete(k);
    for (const k of keys) {
      bytes -= sizes.get(k) ?? 0;
      sizes.delete(k);
    }
    await done(tx);
  };
  return {
    async get(piece) {
      const v: unknown = await request(db.transaction(STORE, 'readonly').objectStore(STORE).get(key(piece)));
      if (v === undefined) return null;
      if (isEntry(v)) return v.sealed;
      await remove([key(piece)]);
      return null;
    },
    async put(piece, sealed) {
      if (sealed.length > cap) return;
      const k = key(piece);
      bytes -= sizes.get(k) ?? 0;
      sizes.delete(k); // written again: the newest
      const tx = db.transaction(STORE, 'readwrite');
      tx.objectStore(STORE).put({ sealed: sealed.slice(), at: Date.now() } satisfies Entry, k);
      sizes.set(k, sealed.length);
      bytes += sealed.length;
      await done(tx);
      const old: string[] = [];
      let over = bytes - cap;
      for (const [o, n] of sizes) {
        if (over <= 0 || o === k) break;
        old.push(o);
        over -= n;
      }
      await remove(old);
    },
    async drop(piece) {
      await remove([key(piece)]);
    },
  };
}

/** A PieceCache that waits for `cache` (made once the vault's id is known: a vault being
 *  created has none before `createVault` returns, and reads no piece before). */
export function laterPieces(cache: Promise<PieceCache>): PieceCache {
  return {
    get: async (id) => (await cache).get(id),
    put: async (id, sealed) => (await cache).put(id, sealed),
    drop: async (id) => (await cache).drop(id),
  };
}
