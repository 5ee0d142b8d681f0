/**
 * Repacking (docs/store.md §10, "Repacking"): a segment whose bytes are mostly dead (no kept
 * version references them) stays whole while any version references any of its bytes. A
 * repack copies the live bytes of such segments into new segments, writes a new index of each
 * version that references them (the same chunks, another layout), and swaps it into the file
 * head in two steps that keep the gc protocol's argument (§8): the new index first goes beside
 * the old one (`repack` in the version entry: marked by gc, never read), is confirmed against
 * gc as any head change's references are, and only then replaces the old one. Readers only
 * ever see an index whose objects were confirmed; the old segments become unreferenced, and
 * the next collection deletes them like any other garbage.
 */
import { NotFoundError, putNew } from './backend.ts';
import { DamageError } from './errors.ts';
import { type FileHead, type Layout, SEGMENT_BYTES, type VersionEntry, encodeVersion, jsonBody, parseFileHead, parseUploadsHead, sha256hex } from './format.ts';
import { GcRefusal, type Refs, addRef, gcEpoch, guardRefs, knownAt } from './gc-state.ts';
import { updateHead } from './heads.ts';
import { indexKey, newSegmentId, parseContentKey, parseNsKey, segmentFamily, segmentKey } from './keys.ts';
import type { Repo } from './repo.ts';
import { VersionSource } from './source.ts';
import { uploadRefs } from './uploads.ts';
import { noteInCatalog } from './catalog.ts';

export interface RepackReport {
  /** live bytes copied into new segments */
  bytes: number;
  /** segments whose live bytes were copied out (the next collection deletes them) */
  segments: number;
  /** versions given a new index */
  versions: number;
  /** repacks found under way (a collector stopped between its steps) and finished or dropped */
  resolved: number;
  /** versions whose repack was dropped (its confirmation refused, or it could not be read) */
  dropped: number;
}

/** A confirmation that cannot reach the store is tried this often before the repack is dropped. */
const CONFIRM_ATTEMPTS = 5;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Test hooks: called between the steps of a version's repack (fault injection, kill trials). */
export const repackHooks: { step?: (step: 'written' | 'pending' | 'confirmed') => Promise<void> } = {};

/**
 * Repacks every segment at least `deadPercent` % of whose bytes no version references (1–99;
 * 100: none). First finishes the repacks a stopped collector left under way (whatever
 * `deadPercent` is).
 */
export async function repack(repo: Repo, deadPercent: number, log?: (e: Record<string, unknown>) => void): Promise<RepackReport> {
  const report = emptyReport();
  const b = repo.backend;
  const planning = deadPercent >= 1 && deadPercent < 100;
  // 1. the file heads, every version's layout, the live bytes of every segment
  const heads: { key: string; user: string; head: FileHead }[] = [];
  const live = new Map<string, [number, number][]>();
  /** segments nothing may move: those of uploads, and of repacks under way */
  const pinned = new Set<string>();
  for await (const e of b.list('ns/')) {
    const { user, kind } = parseNsKey(e.key);
    const got = await b.getHead(e.key);
    if (!got) continue;
    if (kind === 'uploads') {
      if (planning) for (const u of parseUploadsHead(got.body, e.key).uploads) {
        try {
          for (const s of await uploadRefs(b, u.state)) pinned.add(s);
        } catch (err) {
          if (!(err instanceof NotFoundError) && !(err instanceof SyntaxError)) throw err;
        }
      }
      continue;
    }
    if (kind !== 'files') continue;
    let head = parseFileHead(got.body, e.key);
    if (head.versions.some((v) => v.repack)) {
      head = (await resolve(repo, e.key, user, report)) ?? head;
      for (const v of head.versions) if (v.repack) for (const s of (await repo.readIndex(v.repack.index, head.name).catch(() => null))?.layout.segments ?? []) pinned.add(s);
    }
    heads.push({ key: e.key, user, head });
    if (planning) for (const v of head.versions) {
      const { layout } = await repo.readIndex(v.index, `${head.name} version ${v.version}`);
      for (const x of layout.extents) {
        const id = layout.segments[x.seg];
        let r = live.get(id);
        if (!r) live.set(id, (r = []));
        r.push([x.offset, x.offset + x.length]);
      }
    }
  }
  if (!planning) return report;
  // 2. the segments mostly dead
  const sparse = new Set<string>();
  for await (const e of b.list('data/')) {
    const c = parseContentKey(e.key);
    const id = c?.kind === 'segment' ? c.id : '';
    const r = live.get(id);
    if (!r || pinned.has(id)) continue;
    const used = covered(r);
    if ((e.size - used) * 100 >= deadPercent * e.size) sparse.add(id);
  }
  if (!sparse.size) return report;
  log?.({ gc: 'repacking', segments: sparse.size });
  // 3. new segments and indexes, then each file head in two steps
  const run = await newRun(repo);
  for (const { key, user, head } of heads) report.versions += await repackHead(repo, key, user, head, (layout) => (layout.segments.some((s) => sparse.has(s)) ? sparse : null), run, report, log);
  report.segments = run.from.size;
  return report;
}

/** One run of repacks: new segments filled in turn, each piece moved once. */
export interface RepackRun {
  /** the gc epoch read before the first write: everything the run writes is known at it (§8) */
  epoch: number;
  /** "seg:offset:length" → where that piece went */
  moved: Map<string, { id: string; offset: number }>;
  /** segments whose bytes were moved out */
  from: Set<string>;
  out: NewSegments;
}

export const newRun = async (repo: Repo): Promise<RepackRun> => ({ epoch: await gcEpoch(repo), moved: new Map(), from: new Set(), out: new NewSegments(repo) });

export const emptyReport = (): RepackReport => ({ bytes: 0, segments: 0, versions: 0, resolved: 0, dropped: 0 });

/**
 * Repacks the versions of the file head at `key` that `pick` names segments to move out of
 * (null: none): new segments and a new index of each, then both steps of the swap. Versions
 * with a repack under way are left alone; a damaged one keeps its index. Returns how many
 * versions got their new index.
 */
export async function repackHead(repo: Repo, key: string, user: string, head: FileHead, pick: (layout: Layout, size: number) => Set<string> | null, run: RepackRun, report: RepackReport, log?: (e: Record<string, unknown>) => void): Promise<number> {
  const b = repo.backend;
  const plans: Plan[] = [];
  run.out.family = segmentFamily(user, head.name);
  for (const v of head.versions) {
    if (v.repack) continue;
    const what = `${head.name} version ${v.version}`;
    const { index, layout } = await repo.readIndex(v.index, what);
    const moving = pick(layout, index.size);
    if (!moving) continue;
    const src = new VersionSource(b, layout, index, what, v.epoch ?? 0, repo.verified, v.index);
    let next: Layout;
    try {
      next = await relayout(src, moving, run.moved, run.from, run.out, report);
    } catch (err) {
      // damage is not copied: the version keeps its index (check reports it)
      if (!(err instanceof DamageError)) throw err;
      log?.({ gc: 'repack skipped', version: what, message: err.message });
      continue;
    }
    // a version's index is written only after its bytes are
    await run.out.flush();
    const body = encodeVersion(index, next);
    const id = sha256hex(body);
    await b.putIfAbsent(indexKey(id), body);
    const refs: Refs = new Map([[indexKey(id), run.epoch]]);
    const mine = new Set(run.out.ids);
    for (const s of next.segments) addRef(refs, segmentKey(s), mine.has(s) ? run.epoch : (v.epoch ?? 0));
    plans.push({ entry: v, id, refs });
  }
  if (!plans.length) return 0;
  await repackHooks.step?.('written');
  return swapIn(repo, key, user, plans, report);
}

interface Plan {
  entry: VersionEntry;
  /** the new index */
  id: string;
  /** what it references, each known at an epoch */
  refs: Refs;
}

/** The bytes `intervals` cover together. */
function covered(intervals: [number, number][]): number {
  intervals.sort((a, b) => a[0] - b[0]);
  let n = 0;
  let end = 0;
  for (const [a, z] of intervals) {
    if (z <= end) continue;
    n += z - Math.max(a, end);
    end = z;
  }
  return n;
}

/** Segments the repack fills, one at a time, put when full; in the family of the file whose
 *  versions they hold (keys.ts; a segment is put before the next file's bytes come). */
class NewSegments {
  ids: string[] = [];
  family = '';
  private buf = new Uint8Array(SEGMENT_BYTES);
  private used = 0;
  constructor(private repo: Repo) {}

  /** Appends `bytes` (at most what fits), returns where they went. */
  async add(bytes: Uint8Array): Promise<{ id: string; offset: number; n: number }> {
    if (!this.used) this.ids.push(newSegmentId(this.family));
    const n = Math.min(bytes.length, SEGMENT_BYTES - this.used);
    this.buf.set(bytes.subarray(0, n), this.used);
    const at = { id: this.ids[this.ids.length - 1], offset: this.used, n };
    this.used += n;
    if (this.used === SEGMENT_BYTES) await this.flush();
    return at;
  }

  /** Puts the segment being filled (a version's index is written only after its bytes are). */
  async flush(): Promise<void> {
    if (!this.used) return;
    await putNew(this.repo.backend, segmentKey(this.ids[this.ids.length - 1]), this.buf.slice(0, this.used));
    this.used = 0;
  }
}

/**
 * The layout of `src`'s version with the bytes it keeps in `sparse` segments moved into new
 * ones: read through `src` (every chunk verified), each piece once per run (`moved`).
 */
async function relayout(src: VersionSource, sparse: Set<string>, moved: Map<string, { id: string; offset: number }>, from: Set<string>, out: NewSegments, report: RepackReport): Promise<Layout> {
  const layout: Layout = { segments: [], extents: [] };
  const segOf = new Map<string, number>();
  const push = (id: string, offset: number, length: number) => {
    let seg = segOf.get(id);
    if (seg === undefined) segOf.set(id, (seg = layout.segments.push(id) - 1));
    const last = layout.extents[layout.extents.length - 1];
    if (last && last.seg === seg && last.offset + last.length === offset) last.length += length;
    else layout.extents.push({ seg, offset, length });
  };
  const pieces = src.slice(0, src.size);
  // read the moved stretches in runs of at most 4 MiB (reads are verified whole chunks)
  const STEP = 4 << 20;
  let k = 0;
  while (k < pieces.length) {
    const p = pieces[k];
    if (!sparse.has(p.segment)) {
      push(p.segment, p.offset, p.length);
      k++;
      continue;
    }
    let end = k;
    while (end < pieces.length && sparse.has(pieces[end].segment) && pieces[end].at + pieces[end].length - p.at <= STEP) end++;
    if (end === k) end = k + 1;
    const at = p.at;
    const len = pieces[end - 1].at + pieces[end - 1].length - at;
    const data = await src.read(at, len);
    for (let j = k; j < end; j++) {
      const q = pieces[j];
      const name = `${q.segment}:${q.offset}:${q.length}`;
      const had = moved.get(name);
      if (had) {
        push(had.id, had.offset, q.length);
        continue;
      }
      // a piece may straddle two new segments; one that went whole is reused by later versions
      for (let o = 0; o < q.length; ) {
        const put = await out.add(data.subarray(q.at - at + o, q.at - at + q.length));
        if (o === 0 && put.n === q.length) moved.set(name, { id: put.id, offset: put.offset });
        push(put.id, put.offset, put.n);
        o += put.n;
      }
      report.bytes += q.length;
      from.add(q.segment);
    }
    k = end;
  }
  return layout;
}

/**
 * Swaps the planned indexes into the file head at `key`: beside the old ones (guarded), then,
 * once confirmed, in their place. Returns how many versions got their new index.
 */
async function swapIn(repo: Repo, key: string, user: string, plans: Plan[], report: RepackReport): Promise<number> {
  const b = repo.backend;
  // the guard before the swap: rescues what a collection condemned, refuses what one deletes
  const refs: Refs = new Map();
  for (const p of plans) {
    try {
      const { refs: now } = await guardRefs(repo, p.refs);
      p.refs = now;
      for (const [k, e] of now) addRef(refs, k, e);
    } catch (err) {
      if (!(err instanceof GcRefusal)) throw err;
      p.refs = new Map(); // dropped: its objects are garbage
    }
  }
  const live = plans.filter((p) => p.refs.size);
  const placed = await updateHead(b, key, (body) => {
    const h = body && parseFileHead(body, key);
    if (!h) return { body: null, result: [] as Plan[] };
    const hit: Plan[] = [];
    const versions = h.versions.map((v) => {
      const p = live.find((p) => p.entry.version === v.version && p.entry.index === v.index && !v.repack);
      if (!p) return v;
      hit.push(p);
      const known = knownAt(p.refs);
      return { ...v, repack: { index: p.id, epoch: Number.isFinite(known) ? known : 0 } };
    });
    return { body: hit.length ? jsonBody({ ...h, seq: (h.seq ?? 0) + 1, versions }) : null, result: hit };
  });
  await repackHooks.step?.('pending');
  let n = 0;
  for (const p of placed) n += (await finish(repo, key, user, p.entry.version, p.id, p.refs, report)) ? 1 : 0;
  return n;
}

/**
 * A repack whose pending index landed in the head: confirmed against gc (the guard again, now
 * that the head holds it), then made the version's index; a refusal drops it instead. Returns
 * whether the version got the new index.
 */
async function finish(repo: Repo, key: string, user: string, version: number, id: string, refs: Refs | null, report: RepackReport): Promise<boolean> {
  let ok = false;
  for (let k = 0; refs && k < CONFIRM_ATTEMPTS; k++) {
    try {
      refs = (await guardRefs(repo, refs)).refs;
      ok = true;
      break;
    } catch (err) {
      if (err instanceof GcRefusal) break;
      await sleep(Math.min(2000, 100 * 2 ** k));
    }
  }
  if (ok) await repackHooks.step?.('confirmed');
  const known = refs ? knownAt(refs) : 0;
  let written: FileHead | null = null;
  await updateHead(repo.backend, key, (body) => {
    const h = body && parseFileHead(body, key);
    written = null;
    if (!h || !h.versions.some((v) => v.version === version && v.repack?.index === id)) return { body: null, result: undefined };
    const versions = h.versions.map((v): VersionEntry => {
      if (v.version !== version || v.repack?.index !== id) return v;
      const { repack: _, ...rest } = v;
      return ok ? { ...rest, index: id, epoch: Number.isFinite(known) ? known : 0 } : rest;
    });
    written = { ...h, seq: (h.seq ?? 0) + 1, versions };
    return { body: jsonBody(written), result: undefined };
  });
  if (!ok) report.dropped++;
  if (written) await noteInCatalog(repo.backend, user, written, repo.linked).catch(() => {});
  return ok && !!written;
}

/**
 * Finishes the repacks under way in the head at `key` (a collector stopped between its steps):
 * each pending index that is readable and holds the version's bytes (root and size) is
 * confirmed and swapped in, else dropped. Returns the head as it is then.
 */
async function resolve(repo: Repo, key: string, user: string, report: RepackReport): Promise<FileHead | null> {
  const got = await repo.backend.getHead(key);
  const head = got && parseFileHead(got.body, key);
  for (const v of head?.versions ?? []) {
    if (!v.repack) continue;
    const { index: id, epoch } = v.repack;
    const refs: Refs = new Map([[indexKey(id), epoch]]);
    let fits = false;
    try {
      const { index, layout } = await repo.readIndex(id, `${head!.name} version ${v.version} (repacked)`);
      fits = Buffer.from(index.root).toString('hex') === v.root && index.size === v.size && index.algo === v.algo;
      for (const s of layout.segments) addRef(refs, segmentKey(s), epoch);
    } catch (err) {
      if (!(err instanceof DamageError)) throw err;
    }
    // an index that cannot be read, or that is not this version's, is dropped unconfirmed
    await finish(repo, key, user, v.version, id, fits ? refs : null, report);
    report.resolved++;
  }
  const now = await repo.backend.getHead(key);
  return now && parseFileHead(now.body, key);
}
