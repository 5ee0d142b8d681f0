/**
 * Repack (`dsync vault prune`, docs/vaults.md "Repack"): rewrites the packs that hold mostly
 * forgotten chunks, as restic's prune does. A pack stays named by the head while any chunk in it
 * is in use, so after retention forgets versions a 4 MiB pack may hold one live 8 KiB chunk for
 * good; the server cannot tell, as it never sees a chunk. The client reads every kept version's
 * manifest, counts per pack the sealed bytes still in use against the pack's size, picks the
 * packs with the largest unused share until the vault's is at most `maxUnused`, reads each of
 * them WHOLE (a range a live chunk would show the server that chunk's extent), checks it against
 * its id and opens every live chunk in it, seals each again into new padded packs (PackWriter:
 * at random among the open packs, as a push places them), writes the manifests whose chunks or
 * pieces moved, then the tree and a head that names the new packs and no longer the old ones.
 * The server's collection deletes the old packs once its grace period passed.
 */
import { VAULT_PRUNE_MAX_UNUSED } from '../base/limits.ts';
import { Kind, type KindCode, type ManifestTable, type Ref, type Tree, type Version, VaultError, encodeManifest, hex, packsOf, padme } from './format.ts';
import { isPack } from './packs.ts';
import { packsInUse } from './tree.ts';
import { type State, type Vault, type VaultInner, refKey } from './vault.ts';

/** What a prune did (or, with `dryRun`, would do). Shares are of the bytes of the packs the
 *  head names; a pack's unused bytes are its size less its live chunks and the most padding
 *  PADME could have added at that size (so a pack of live chunks alone counts none). */
export interface PruneReport {
  dryRun: boolean;
  maxUnused: number;
  /** packs the head named, and their bytes, before */
  packsBefore: number;
  bytesBefore: number;
  unusedBefore: number;
  /** packs read whole (or to read), their bytes, and the sealed bytes of live chunks in them */
  packsRead: number;
  bytesRead: number;
  liveBytes: number;
  /** packs uploaded and their bytes (padded): the chunks moved, the manifests and the tree */
  packsWritten: number;
  bytesWritten: number;
  /** versions whose manifest was written again */
  versions: number;
  /** after the head written (a dry run: the packs it would keep, without the new ones, and the
   *  bytes and unused share estimated) */
  packsAfter: number;
  bytesAfter: number;
  unusedAfter: number;
  /** packs read that the head still names: another device's change written meanwhile still
   *  refers to them (the next prune takes them) */
  kept: number;
  /** the head's sequence after the prune (the head read when nothing was written) */
  seq: number;
}

/** A live sealed chunk in a pack. */
interface Live {
  kind: KindCode;
  ref: Ref;
}

interface PackUse {
  id: string;
  size: number;
  used: number;
  unused: number;
  live: Live[];
}

/** The vault as one head names it: its packs' use, every kept version's manifest, and the list
 *  pieces a rewrite may leave unused (each version's manifest pieces, with the packs its chunks
 *  and pieces lie in; the tree's pieces). */
interface Survey {
  packs: PackUse[];
  total: number;
  unused: number;
  manifests: Map<string, ManifestTable>;
  lists: { packs: Set<string>; pieces: Ref[] }[];
  tree: Ref[];
}

/** The fewest bytes a pack of padded size `size` held before its padding: the smallest L whose
 *  PADME size reaches `size`. */
export function unpadded(size: number): number {
  let lo = Math.min(1, size);
  let hi = size;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (padme(mid) >= size) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

const share = (unused: number, total: number) => (total > 0 ? unused / total : 0);

/** Reads every kept version's manifest (live and deleted files; each checked as a pull checks
 *  it) and the packs' sizes, and counts per pack the live sealed bytes: content chunks of the
 *  manifests, the manifests' pieces and the tree's pieces. */
async function survey(v: VaultInner, id: string, s: State): Promise<Survey> {
  const versions = s.tree.files.flatMap((f) => f.versions.map((x) => ({ f, x })));
  const lists = await v.readLists(versions.map(({ x }) => x.manifest));
  const manifests = new Map<string, ManifestTable>();
  versions.forEach(({ f, x }, i) => manifests.set(hex(x.id), v.checkManifest(f, x, lists[i])));
  const byPack = new Map<string, Map<number, Live>>();
  const note = (kind: KindCode, ref: Ref) => {
    let m = byPack.get(ref.pack);
    if (!m) byPack.set(ref.pack, (m = new Map()));
    if (!m.has(ref.offset)) m.set(ref.offset, { kind, ref });
  };
  for (const r of s.head?.tree ?? []) note(Kind.List, r);
  for (const { x } of versions) {
    for (const r of x.manifest) note(Kind.List, r);
    for (const r of manifests.get(hex(x.id))!.refs) note(Kind.Content, r);
  }
  const named = packsInUse(s.tree, s.head?.tree ?? []);
  const sizes = new Map((await v.remote.packs(id)).map((p) => [p.id, p.size]));
  const packs: PackUse[] = named.map((p) => {
    const size = sizes.get(p);
    if (size === undefined) throw new VaultError(`vault ${id}: the head names pack ${p}, which the server does not list: nothing rewritten (dsync check on the server reports it)`);
    const live = [...(byPack.get(p)?.values() ?? [])].sort((a, b) => a.ref.offset - b.ref.offset);
    const used = live.reduce((n, l) => n + l.ref.length, 0);
    return { id: p, size, used, unused: Math.max(0, unpadded(size) - used), live };
  });
  const pieces = versions.map(({ x }) => ({ packs: new Set([...x.packs, ...x.manifest.map((r) => r.pack)]), pieces: x.manifest }));
  return { packs, total: packs.reduce((n, p) => n + p.size, 0), unused: packs.reduce((n, p) => n + p.unused, 0), manifests, lists: pieces, tree: s.head?.tree ?? [] };
}

/** The unused share after the `chosen` packs are rewritten, at most: their unused bytes gone,
 *  and every list piece the rewrite may leave behind in a pack kept counted unused (the
 *  manifests of the versions with a chunk or a piece in a chosen pack, and the tree, are written
 *  again; a piece that did not change is kept, so this is a bound). */
function shareAfter(sv: Survey, chosen: Set<string>, freed: number): number {
  const left = (pieces: Ref[]) => pieces.reduce((n, r) => n + (chosen.has(r.pack) ? 0 : r.length), 0);
  let behind = chosen.size ? left(sv.tree) : 0;
  for (const l of sv.lists) if ([...l.packs].some((p) => chosen.has(p))) behind += left(l.pieces);
  return share(sv.unused - freed + behind, sv.total - freed);
}

/** restic's choice: the packs with the largest unused share first, until the unused share of
 *  what is left (`shareAfter`) is at most `maxUnused`. */
function choose(sv: Survey, maxUnused: number): { chosen: PackUse[]; after: number } {
  const candidates = sv.packs.filter((p) => p.unused > 0).sort((a, b) => b.unused * a.size - a.unused * b.size || (a.id < b.id ? -1 : 1));
  const chosen: PackUse[] = [];
  const ids = new Set<string>();
  let freed = 0;
  let after = share(sv.unused, sv.total);
  for (const p of candidates) {
    if (after <= maxUnused) break;
    chosen.push(p);
    ids.add(p.id);
    freed += p.unused;
    after = shareAfter(sv, ids, freed);
  }
  return { chosen, after };
}

const sameRefs = (a: Ref[], b: Ref[]) => a.length === b.length && a.every((r, i) => r.pack === b[i].pack && r.offset === b[i].offset && r.length === b[i].length && hex(r.id) === hex(b[i].id));

/** Rewrites the packs of `vault` that are mostly unused (see the file's comment); `maxUnused`
 *  a share from 0 to 1 (default VAULT_PRUNE_MAX_UNUSED); `dryRun`: reads the head, the tree and
 *  the manifests and says what it would do, writing nothing. Nothing is in a head before every
 *  pack it names is stored (the server refuses a head naming a pack it lacks); any failure (a
 *  pack that is not what its id says, a chunk that does not open, an upload) throws with no head
 *  written. */
export async function prune(vault: Vault, o: { maxUnused?: number; dryRun?: boolean } = {}): Promise<PruneReport> {
  const maxUnused = o.maxUnused ?? VAULT_PRUNE_MAX_UNUSED;
  if (!(maxUnused >= 0 && maxUnused <= 1)) throw new VaultError(`the unused share a prune leaves is 0 to 100%, not ${maxUnused * 100}%`);
  const v = vault.inner();
  const id = vault.id;
  return v.writing(async (packs) => {
    const s = await v.state();
    const before = await survey(v, id, s);
    const { chosen, after: estimate } = choose(before, maxUnused);
    const freed = chosen.reduce((n, p) => n + p.unused, 0);
    const report: PruneReport = {
      dryRun: !!o.dryRun,
      maxUnused,
      packsBefore: before.packs.length,
      bytesBefore: before.total,
      unusedBefore: share(before.unused, before.total),
      packsRead: chosen.length,
      bytesRead: chosen.reduce((n, p) => n + p.size, 0),
      liveBytes: chosen.reduce((n, p) => n + p.used, 0),
      packsWritten: 0,
      bytesWritten: 0,
      versions: 0,
      packsAfter: before.packs.length - chosen.length,
      bytesAfter: before.total - freed,
      unusedAfter: estimate,
      kept: 0,
      seq: s.counter,
    };
    if (o.dryRun || !chosen.length) return report;
    const gone = new Set(chosen.map((p) => p.id));

    // 1. every live chunk of the chosen packs, read with its pack whole, checked and sealed
    // again (a fresh nonce: the same sealed bytes in an old and a new pack would show the
    // server where each chunk starts and ends); a content chunk once, whatever refers to it
    const moved = new Map<string, Ref>();
    for (const p of chosen) {
      const bytes = await v.remote.readPack(id, p.id, 0, p.size);
      if (!(await isPack(bytes, p.id))) throw new VaultError(`vault ${id}: pack ${p.id} read for the prune does not hash to its id (a damaged or hostile server): nothing rewritten`);
      for (const { kind, ref } of p.live) {
        if (ref.offset + ref.length > bytes.length) throw new VaultError(`vault ${id}: pack ${p.id} ends at ${bytes.length} bytes, before a chunk it holds: nothing rewritten`);
        const plain = await v.openVerified(kind, ref, bytes.subarray(ref.offset, ref.offset + ref.length));
        // list pieces are sealed again as the lists that hold them are written (below)
        if (kind === Kind.Content && !moved.has(hex(ref.id))) moved.set(hex(ref.id), await packs.add(Kind.Content, ref.id, plain));
      }
    }
    await packs.flush();

    // 2. the index no longer points into the chosen packs: a list piece there is sealed anew
    // when a list that holds it is written, a content chunk is found where it moved
    const relocate = () => {
      for (const [k, r] of v.index) {
        if (!gone.has(r.pack)) continue;
        const to = k === refKey(Kind.Content, r.id) ? moved.get(hex(r.id)) : undefined;
        if (to) v.index.set(k, to);
        else v.index.delete(k);
      }
    };
    relocate();

    // 3. the manifests whose chunks or pieces lie in a chosen pack, written again (their table
    // in the old order, the chosen packs' places taken by the new ones at the end): only the
    // pieces that changed are new
    const rewritten = new Map<string, { was: Ref[]; manifest: Ref[]; packs: string[] }>();
    for (const f of s.tree.files) {
      for (const x of f.versions) {
        if (!x.packs.some((p) => gone.has(p)) && !x.manifest.some((r) => gone.has(r.pack))) continue;
        const m = before.manifests.get(hex(x.id))!;
        const refs = m.refs.map((r) => {
          if (!gone.has(r.pack)) return r;
          const to = moved.get(hex(r.id));
          if (!to) throw new VaultError(`vault ${id}: a chunk of ${JSON.stringify(f.name)} version ${x.n} was not moved out of pack ${r.pack} (a client bug): nothing rewritten`);
          return to;
        });
        const manifest = await v.writeList(packs, encodeManifest({ file: m.file, version: m.version, refs }, m.packs));
        rewritten.set(hex(x.id), { was: x.manifest, manifest, packs: packsOf(refs) });
      }
    }
    await packs.flush(); // the tree names the manifests' packs

    // 4. the tree with those versions, and the head, by compare-and-swap. After another
    // device's head (412) the change is made again on its tree: a version whose manifest is
    // still the one read takes the new one; any other (pushed meanwhile, or rewritten by
    // another prune) stays as it is, and with it the packs it names, which the head keeps
    const done = await v.commit(packs, s, async (now: State) => {
      relocate(); // the tree read may point into the chosen packs again
      let changed = (now.head?.tree ?? []).some((r) => gone.has(r.pack));
      const files = now.tree.files.map((f) => ({
        ...f,
        versions: f.versions.map((x): Version => {
          const r = rewritten.get(hex(x.id));
          if (!r || !sameRefs(x.manifest, r.was)) return x;
          changed = true;
          return { ...x, manifest: r.manifest, packs: r.packs };
        }),
      }));
      return changed ? ({ keep: now.tree.keep, files } satisfies Tree) : null;
    });
    report.seq = done.seq;
    report.packsWritten = packs.packs;
    report.bytesWritten = packs.bytes;
    report.versions = rewritten.size;

    // what the head names now
    const after = await survey(v, id, await v.state());
    report.packsAfter = after.packs.length;
    report.bytesAfter = after.total;
    report.unusedAfter = share(after.unused, after.total);
    report.kept = after.packs.filter((p) => gone.has(p.id)).length;
    return report;
  });
}
