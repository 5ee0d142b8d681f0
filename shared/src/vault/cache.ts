/**
 * A device's copy of the sealed list pieces (manifests and tree pieces, kind 1) of a vault it
 * fetched or wrote, by chunk id (docs/vaults.md, "Push and pull"): a device that synced a
 * version fetches only the pieces that changed since. A cached piece is sealed bytes, opened
 * and checked exactly as a fetched one (AES-GCM with the vault, kind and id as associated
 * data, and its keyed id), so a damaged or foreign entry is dropped and fetched again, never
 * believed. Bounded: VAULT_PIECE_CACHE_MAX bytes, the oldest dropped first.
 */
import { VAULT_PIECE_CACHE_MAX } from '../base/limits.ts';

export interface PieceCache {
  /** the sealed bytes kept under `id` (64 lowercase hex), or null */
  get(id: string): Promise<Uint8Array | null>;
  put(id: string, sealed: Uint8Array): Promise<void>;
  /** forgets `id` (an entry that did not open) */
  drop(id: string): Promise<void>;
}

/** A cache in memory, up to `cap` bytes, the least recently used dropped first. */
export function memoryPieceCache(cap: number = VAULT_PIECE_CACHE_MAX): PieceCache {
  const m = new Map<string, Uint8Array>();
  let bytes = 0;
  const drop = (id: string) => {
    const had = m.get(id);
    if (had) {
      bytes -= had.length;
      m.delete(id);
    }
  };
  return {
    async get(id) {
      const b = m.get(id);
      if (!b) return null;
      m.delete(id); // most recently used last
      m.set(id, b);
      return new Uint8Array(b); // a copy (a Buffer's slice would be a view)
    },
    async put(id, sealed) {
      drop(id);
      if (sealed.length > cap) return;
      m.set(id, new Uint8Array(sealed));
      bytes += sealed.length;
      for (const old of m.keys()) {
        if (bytes <= cap) break;
        drop(old);
      }
    },
    async drop(id) {
      drop(id);
    },
  };
}
