/**
 * The collection of a vault's packs (docs/vaults.md, "Pack collection"), run by gc: the packs
 * no head names in use, older than a grace period, are condemned on the head by
 * compare-and-swap, then deleted with their sums. `listVaults` is the one listing of vaults/
 * that the collection and `dsync check` (vault-check.ts) read.
 */
import { VAULT_HEAD_PACKS_MAX } from '../../../shared/src/base/limits.ts';
import type { Backend } from './backend.ts';
import { DamageError } from './errors.ts';
import { VAULTS_PREFIX } from './keys.ts';
import { decodeVaultHead, encodeVaultHead } from './vault-format.ts';
import { HEAD_SWAP_TRIES } from './vaults.ts';

/** How long a pack no head names is kept by default (`--vault-gc-grace-ms`): a device uploads
 *  its packs before the head that names them, and a push may take long. */
export const VAULT_GC_GRACE_MS = 24 * 3_600_000;

export interface VaultCollection {
  /** vaults looked at, packs deleted (with their sums) and their bytes */
  vaults: number;
  packs: number;
  bytes: number;
  /** vaults left alone this time, and why (no head yet, a head that names no packs, a head
   *  that kept moving, a damaged head) */
  skipped: string[];
}

/** The store's vaults and their objects: vaults/<user>/(heads|keys|keyfiles|packs|sums)/<id>[/<pack>]. */
const VAULT_OBJECT = /^vaults\/([^/]+)\/(heads|keys|keyfiles|packs|sums)\/([0-9a-f]{32})(?:\/([0-9a-f]{64}))?$/;

/** One listing of vaults/: per vault with a head, packs or sums (by its head's key), its packs
 *  and their sums; `all`, when given, gets every vault any object names (`<user>/<id>`, the
 *  user as encoded in keys). */
export async function listVaults(backend: Backend, all?: Set<string>): Promise<Map<string, { packs: Map<string, { size: number; modified: number }>; sums: Map<string, number> }>> {
  const found = new Map<string, { packs: Map<string, { size: number; modified: number }>; sums: Map<string, number> }>();
  const vaultOf = (user: string, id: string) => {
    const key = `${VAULTS_PREFIX}${user}/heads/${id}`;
    let v = found.get(key);
    if (!v) found.set(key, (v = { packs: new Map(), sums: new Map() }));
    return v;
  };
  for await (const e of backend.list(VAULTS_PREFIX)) {
    const m = VAULT_OBJECT.exec(e.key);
    if (!m) continue;
    const [, user, kind, id, pack] = m;
    all?.add(`${user}/${id}`);
    if (kind === 'heads' && !pack) vaultOf(user, id);
    else if (kind === 'packs' && pack) vaultOf(user, id).packs.set(pack, { size: e.size, modified: e.modified });
    else if (kind === 'sums' && pack) vaultOf(user, id).sums.set(pack, e.modified);
  }
  return found;
}

/**
 * Deletes, with their sums, the packs of every vault that its head does not name in use and
 * that are older than `graceMs` (docs/vaults.md, "Pack collection"). Per vault, as restic's
 * prune keeps what a snapshot references but without a lock:
 *
 *   1. read the head (its tag): the packs it names, those condemned already;
 *   2. condemn the packs it does not name, older than graceMs (and those whose sums alone are
 *      left), by compare-and-swap of the head on that tag: the swap lands only if no head was
 *      written since the read, so no condemned pack is in use;
 *   3. delete the condemned packs and their sums: from the swap on, every head write checks its
 *      new packs against the condemned ones on the very head it swaps (`Vaults.putHead`), so
 *      no head can name one again;
 *   4. take the deleted packs off the condemned list (compare-and-swap again; a collection that
 *      stopped before leaves them condemned, and the next one deletes and clears them).
 *
 * A vault without a head, or whose head names no packs (stored before heads did), is left
 * alone. `now` is the collector's clock against the store's times of upload.
 */
export async function collectVaultPacks(backend: Backend, o: { graceMs: number; log?: (e: Record<string, unknown>) => void; now?: () => number }): Promise<VaultCollection> {
  if (!Number.isSafeInteger(o.graceMs) || o.graceMs < 0) throw new RangeError(`vault gc: graceMs must be a whole number of milliseconds, got ${o.graceMs}`);
  const now = o.now ?? Date.now;
  const out: VaultCollection = { vaults: 0, packs: 0, bytes: 0, skipped: [] };
  for (const [headKey, v] of await listVaults(backend)) {
    out.vaults++;
    const prefix = headKey.replace('/heads/', '/packs/') + '/';
    const sumsPrefix = headKey.replace('/heads/', '/sums/') + '/';
    try {
      // 1, 2: condemn by compare-and-swap on the head read
      let condemned: string[] | null = null;
      for (let tries = 0; tries < HEAD_SWAP_TRIES && !condemned; tries++) {
        const got = await backend.getHead(headKey);
        if (!got) {
          out.skipped.push(`${headKey}: no head yet`);
          break;
        }
        const h = decodeVaultHead(got.body, headKey);
        if (!h.packs) {
          out.skipped.push(`${headKey}: its head names no packs in use (stored before heads did)`);
          break;
        }
        const keep = new Set(h.packs);
        const already = new Set(h.condemned);
        const t = now();
        const more: string[] = [];
        for (const [p, e] of v.packs) if (!keep.has(p) && !already.has(p) && t - e.modified >= o.graceMs) more.push(p);
        for (const [p, modified] of v.sums) if (!v.packs.has(p) && !keep.has(p) && !already.has(p) && t - modified >= o.graceMs) more.push(p);
        const all = [...new Set([...h.condemned, ...more.slice(0, Math.max(0, VAULT_HEAD_PACKS_MAX - h.condemned.length))])].sort();
        if (!all.length) condemned = [];
        else if (!more.length || (await backend.putHead(headKey, encodeVaultHead({ ...h, packs: h.packs, condemned: all }), got.tag))) condemned = all;
        // else a head landed meanwhile: read it again
      }
      if (!condemned) {
        if (!out.skipped.some((s) => s.startsWith(headKey))) out.skipped.push(`${headKey}: its head kept moving while packs were condemned`);
        continue;
      }
      if (!condemned.length) continue;
      // 3: delete them, the pack before its sums (sums without their pack are never read)
      for (const p of condemned) {
        await backend.delete(prefix + p);
        await backend.delete(sumsPrefix + p);
        const listed = v.packs.get(p);
        if (listed) {
          out.packs++;
          out.bytes += listed.size;
        }
      }
      o.log?.({ gc: 'vault packs deleted', head: headKey, packs: condemned.length });
      // 4: off the condemned list
      const gone = new Set(condemned);
      for (let tries = 0; tries < HEAD_SWAP_TRIES; tries++) {
        const got = await backend.getHead(headKey);
        if (!got) break;
        const h = decodeVaultHead(got.body, headKey);
        if (!h.packs) break;
        if (await backend.putHead(headKey, encodeVaultHead({ ...h, packs: h.packs, condemned: h.condemned.filter((p) => !gone.has(p)) }), got.tag)) break;
      }
    } catch (e) {
      if (!(e instanceof DamageError)) throw e;
      out.skipped.push(`${headKey}: ${e.message}`);
      o.log?.({ error: 'damage', head: headKey, message: e.message });
    }
  }
  return out;
}
