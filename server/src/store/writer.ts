/**
 * Writing a new version (docs/store.md §4): the Sink a receiver rebuilds a target into. Delta
 * Bytes go to new segments (SEGMENT_BYTES each at most); stretches copied from a stored version
 * are referenced, not copied, and verified at commit; the commit is the swap of the file head
 * (Store.changeHead), guarded against a running garbage collection.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import type { ChunkIndex, Source } from '../../../shared/src/chunking/chunk-index.ts';
import type { Sink } from '../../../shared/src/session/sink.ts';
import { type Backend, putNew } from './backend.ts';
import type { Repo } from './repo.ts';
import { compactFile, maxSegments } from './compact.ts';
import { DamageError, WriteFailed } from './errors.ts';
import { type FileHead, type Layout, SEGMENT_BYTES, type VersionEntry, applyRetention, encodeVersion, sha256hex } from './format.ts';
import { GcRefusal, type Refs, addRef, gcEpoch, knownAt } from './gc-state.ts';
import { indexKey, newSegmentId, segmentFamily, segmentKey } from './keys.ts';
import { VersionSource } from './source.ts';
import { noteInCatalog } from './catalog.ts';
import { type UploadState, carryMark } from './uploads.ts';
import type { HeadChange, SeenHead } from './commit.ts';

/** A refined chunk's basis piece shorter than this is stored as bytes, not by reference: an
 *  extent costs 20 bytes of index and a ranged read of its own. */
const MIN_REFERENCED = 256;

/** A new version's Sink, which can also say what it wrote so far (to suspend it), and whether
 *  a head swap adding it landed or may have (then its objects are never deleted by it). */
export type VersionSink = Sink & { state(): Promise<Omit<UploadState, 'count' | 'hashes' | 'digest'>>; readonly landed: boolean };

/** What writing a version needs of its Store (store.ts). */
export interface VersionHost {
  readonly backend: Backend;
  readonly repo: Repo;
  readonly user: string;
  /** swaps the file head of `name` by compare-and-swap; versions it adds are guarded against
   *  gc and confirmed (Store.changeHead) */
  changeHead<T>(name: string, change: (h: FileHead | null) => Promise<HeadChange<T>>, hooks?: { landed?: () => void; seen?: SeenHead }): Promise<T>;
  /** the content objects versions reference, each known at its version's epoch */
  refsOf(entries: VersionEntry[]): Promise<Refs>;
  noteTraits(name: string, id: string, fastfps: Uint32Array): void;
  /** why `name` cannot be a file now (a parent is a file, or `name/` is a folder), or null */
  typeClash?(name: string, as: 'file'): Promise<string | null>;
}

/** Starts writing a new version of `name` into `store`; see Store.create. */
export function versionSink(store: VersionHost, name: string, expectLatest?: number, client?: string, resume?: UploadState, seen?: SeenHead, modified?: number): VersionSink {
  const backend = store.backend;
  const layout: Layout = resume ? structuredClone(resume.layout) : { segments: [], extents: [] };
  const own: string[] = resume ? [...resume.own] : [];
  let written = resume?.written ?? 0;
  const segIndex = new Map<string, number>(layout.segments.map((s, k) => [s, k]));
  // the file's segments share a family (keys.ts): a commit asks their stamps together
  const family = segmentFamily(store.user, name);
  // the segment being filled: its index in layout.segments, its bytes so far
  let cur = -1;
  let buf = new Uint8Array(0);
  // the gc epoch read before this upload writes its first object (this process's read of
  // less than W/4 ago will do): every object it writes is known to exist at it (docs/store.md
  // §8); a resumed upload's earlier objects, and the objects copies reference, are known at the
  // epochs they came with
  const epoch = gcEpoch(store.repo, store.repo.settings.gcWindowMs / 4);
  epoch.catch(() => {}); // awaited, with its error, before the first write
  const resumedEpoch = resume?.epoch ?? 0;
  const copied: Refs = new Map();
  // a head swap adding this version landed, or may have: its objects are never deleted here
  let landed = false;
  // stretches copied by reference: verified before the commit (a version never inherits damage)
  const copies: { from: VersionSource; offset: number; length: number }[] = [];
  let used = 0;
  const append = (seg: number, offset: number, length: number) => {
    const last = layout.extents[layout.extents.length - 1];
    if (last && last.seg === seg && last.offset + last.length === offset) last.length += length;
    else layout.extents.push({ seg, offset, length });
  };
  const flush = async () => {
    if (cur < 0 || used === 0) return;
    await epoch;
    const id = layout.segments[cur];
    // the bytes put are the ones the receiver hashed: verified under the stamp the put
    // returns (S3: its ETag), for the next syncs' commits that copy from them
    await putNew(backend, segmentKey(id), buf.subarray(0, used), (stamp) => store.repo.verified.add(id, stamp, 0, used)).catch((e) => {
      throw new WriteFailed(e);
    });
    // kept for the next syncs' reads (a copy: the buffer is filled again)
    store.repo.written.add(id, buf.slice(0, used));
    cur = -1;
    used = 0;
  };
  const write = async (bytes: Uint8Array) => {
    for (let o = 0; o < bytes.length; ) {
      if (cur < 0) {
        const id = newSegmentId(family);
        own.push(id);
        cur = layout.segments.push(id) - 1;
        segIndex.set(id, cur);
      }
      const n = Math.min(bytes.length - o, SEGMENT_BYTES - used);
      if (used + n > buf.length) {
        const grown = new Uint8Array(Math.min(SEGMENT_BYTES, Math.max(64 << 10, 2 * buf.length, used + n)));
        grown.set(buf.subarray(0, used));
        buf = grown;
      }
      buf.set(bytes.subarray(o, o + n), used);
      append(cur, used, n);
      used += n;
      written += n;
      o += n;
      if (used === SEGMENT_BYTES) await flush();
    }
  };
  // own segments [0, shared) may be referenced by something besides this upload: a resumed
  // upload's earlier ones (its state was listed, so another resuming push may have claimed
  // it too), and those an uploads head listed (a checkpoint or a suspend: a push of the same
  // target through any server may claim it and commit them while this one goes on). This
  // upload never deletes those; gc collects them once nothing references them
  let shared = resume ? resume.own.length : 0;
  const dropOwn = async () => {
    if (landed) return;
    for (const id of own.slice(shared)) await backend.delete(segmentKey(id)).catch(() => {});
  };
  const copy = async (from: Source, offset: number, length: number) => {
    if (!(from instanceof VersionSource) || from.backend !== backend) return write(await from.read(offset, length));
    copies.push({ from, offset, length });
    for (const piece of from.slice(offset, length)) {
      addRef(copied, segmentKey(piece.segment), from.epoch);
      let seg = segIndex.get(piece.segment);
      if (seg === undefined) segIndex.set(piece.segment, (seg = layout.segments.push(piece.segment) - 1));
      append(seg, piece.offset, piece.length);
    }
  };
  return {
    // the basis pieces of refined chunks are stored by reference, as copies are (verified at
    // commit): a version's own segments hold only the bytes the client sent
    write: async (bytes, basis) => {
      if (!basis || !(basis.from instanceof VersionSource) || basis.from.backend !== backend) return write(bytes);
      let o = 0;
      for (const s of basis.spans) {
        if (s.length < MIN_REFERENCED) continue;
        if (s.at > o) await write(bytes.subarray(o, s.at));
        await copy(basis.from, s.offset, s.length);
        o = s.at + s.length;
      }
      if (o < bytes.length) await write(bytes.subarray(o));
    },
    copy,
    state: async () => {
      await flush();
      // the state goes into an uploads head: its segments may be claimed from there
      shared = own.length;
      const known = Math.min(await epoch, resume ? resumedEpoch : Infinity, knownAt(copied));
      return { layout: structuredClone(layout), written, own: [...own], epoch: known };
    },
    get landed() {
      return landed;
    },
    commit: async (index) => {
      await flush();
      const own0 = await epoch;
      // A version is only ever built from bytes verified for it: every copied stretch is
      // verified now (source.ts `verify`: read, or a stamp shows it unchanged since this
      // process read it)
      const bySource = new Map<VersionSource, { offset: number; length: number }[]>();
      for (const c of copies) {
        const rs = bySource.get(c.from);
        if (rs) rs.push(c);
        else bySource.set(c.from, [c]);
      }
      for (const [src, ranges] of bySource) {
        await src.verify(ranges).catch(async (e) => {
          // a segment of the basis gone since a collection ended: collected (the basis was
          // removed, or repacked, meanwhile), not damage; the client pushes again
          if (e instanceof DamageError && e.missing && (await gcEpoch(store.repo)) > src.epoch) throw new GcRefusal(`the store collected a segment of the version this push copies from; push again`);
          throw e;
        });
      }
      // an interrupted upload's bytes (its own segments, written by an earlier session,
      // perhaps through another server, and what it copied) are verified the same way
      if (resume) {
        const thisSession = new Set(own.slice(resume.own.length));
        const src = new VersionSource(backend, layout, index, `the resumed upload of ${name}`, 0, store.repo.verified);
        const ranges = [];
        let pos = 0;
        for (const e of layout.extents) {
          if (!thisSession.has(layout.segments[e.seg])) ranges.push({ offset: pos, length: e.length });
          pos += e.length;
        }
        await src.verify(ranges);
      }
      // The same content as the latest version is "unchanged" only when that version is known
      // good for this commit: its bytes verified (this push copied every one of them, verified
      // above; else they are verified now) and its index intact. Otherwise the pushed bytes
      // are stored.
      const known = new Map<string, Promise<boolean>>();
      const latestGood = (last: VersionEntry) => {
        let p = known.get(last.index);
        if (!p) known.set(last.index, (p = isGood(last)));
        return p;
      };
      const isGood = async (last: VersionEntry) => {
        if (![...bySource].some(([src, ranges]) => src.id === last.index && covers(ranges, src.size))) {
          try {
            const { index: ix, layout: lay } = await store.repo.readIndex(last.index, `${name} version ${last.version}`);
            await new VersionSource(backend, lay, ix, `${name} version ${last.version}`, 0, store.repo.verified, last.index).verify([{ offset: 0, length: ix.size }]);
          } catch (e) {
            if (e instanceof DamageError) return false;
            throw e;
          }
        }
        return store.repo.indexIntact(last.index);
      };
      const body = encodeVersion(index, layout);
      const id = sha256hex(body);
      const root = Buffer.from(index.root).toString('hex');
      // what the version references, each known at an epoch: its own objects at the one read
      // before they were written, a resumed upload's at the one it was suspended with, copies
      // at their versions'
      const refs: Refs = new Map([[indexKey(id), own0]]);
      const mine = new Set(own);
      const earlier = new Set(resume?.layout.segments ?? []);
      for (const s of layout.segments) {
        const key = segmentKey(s);
        if (earlier.has(s)) addRef(refs, key, resumedEpoch);
        if (copied.has(key)) addRef(refs, key, copied.get(key)!);
        if (mine.has(s) && !earlier.has(s)) addRef(refs, key, own0);
        if (!refs.has(key)) addRef(refs, key, 0);
      }
      let indexWritten = false;
      const { version, unchanged } = await store.changeHead(
        name,
        async (h): Promise<HeadChange<{ version: number; unchanged: boolean }>> => {
          const vs = h?.versions ?? [];
          // an earlier attempt whose answer was lost landed (the index id is this commit's own)
          const there = vs.find((v) => v.index === id);
          if (there) return { head: null, result: { version: there.version, unchanged: false }, adds: { entries: [there], refs, ours: true } };
          const last = vs[vs.length - 1];
          const latest = last?.version ?? 0;
          if (expectLatest !== undefined && latest !== expectLatest) {
            // the client's listing may lag the head (a server killed before its catalog's note)
            if (h) await noteInCatalog(backend, store.user, h, store.repo.linked).catch(() => {});
            throw stale(name, latest, expectLatest);
          }
          // a new name: not a file beside a folder of the same name, nor under a file (C4)
          const clash = vs.length ? null : await store.typeClash?.(name, 'file');
          if (clash) throw new ProtocolError(ErrorCode.Inconsistent, clash);
          // the same content as a latest version known good is unchanged (latestGood). The
          // answer is that version, so it is confirmed as a commit's would be.
          if (last && last.root === root && last.algo === index.algo && (await latestGood(last))) {
            return { head: null, result: { version: latest, unchanged: true }, adds: { entries: [last], refs: await store.refsOf([last]), ours: false } };
          }
          if (!indexWritten) {
            // a new key (the index carries a nonce): false only when a retry of this put landed
            await backend.putIfAbsent(indexKey(id), body).catch((e) => {
              throw new WriteFailed(e);
            });
            indexWritten = true;
          }
          const next = h?.next ?? 1;
          const entry: VersionEntry = { version: next, index: id, size: index.size, mtime: new Date().toISOString(), root, algo: index.algo, change: written, ...(client && { client }), ...(modified !== undefined && { modified }) };
          const versions = applyRetention([...vs, entry], store.repo.settings);
          return { head: { ...carryMark(h), name, next: next + 1, versions }, result: { version: next, unchanged: false }, adds: { entries: [entry], refs, ours: true } };
        },
        { landed: () => (landed = true), seen },
      );
      if (unchanged) await dropOwn();
      else {
        store.noteTraits(name, id, index.fastfps);
        store.repo.noteIndex(id, index, layout, body.length);
        // beyond the bound of segments a version reads (compact.ts): compacted after the answer
        if (layout.segments.length > maxSegments(index.size)) store.repo.later(`compact ${store.user} ${name}`, (log) => compactFile(store.repo, store.user, name, log));
      }
      return version;
    },
    abort: async () => {
      cur = -1;
      used = 0;
      await dropOwn();
    },
  };
}

/** Whether `ranges` together cover [0, size). */
function covers(ranges: { offset: number; length: number }[], size: number): boolean {
  let end = 0;
  for (const r of [...ranges].sort((a, b) => a.offset - b.offset)) {
    if (r.offset > end) return false;
    end = Math.max(end, r.offset + r.length);
  }
  return end >= size;
}

export const stale = (name: string, latest: number, expected: number) =>
  new ProtocolError(ErrorCode.StaleBasis, `${name} is at version ${latest}, not ${expected}: sync again against the latest version`);

/** One file of a bulk upload (server/src/http/bulk.ts): its whole bytes and their chunk index,
 *  checked against the client's digest before it comes here. */
export interface BulkEntry {
  name: string;
  /** the latest version it replaces; 0: none (a new name) */
  expect: number;
  /** the pusher's modification time (ms since the epoch) */
  modified?: number;
  bytes: Uint8Array;
  index: ChunkIndex;
}

/** What became of one entry of a bulk upload: its new version, or why it was not committed. */
export type BulkOutcome = { version: number } | { error: unknown };

/**
 * Writes many small new versions together (docs/store.md §4, "Small files in bulk"): every
 * entry's bytes go into as few new segments as they fill (SEGMENT_BYTES each), written before
 * any commit; then every entry's head change starts in one turn of the event loop, so they are
 * one group (commit.ts: one journal mark, one catalog swap per folder). Each entry is its own
 * compare-and-swap against `expect` (the rule of a single push: StaleBasis when the head moved,
 * that entry only), its own gc guard and confirmation: a crash at any point leaves every entry
 * committed whole or absent. Segments no entry landed in are deleted; otherwise gc collects the
 * bytes of the entries that did not land.
 */
export async function bulkVersions(store: VersionHost, entries: BulkEntry[], client?: string): Promise<BulkOutcome[]> {
  const backend = store.backend;
  const epoch = await gcEpoch(store.repo, store.repo.settings.gcWindowMs / 4);
  const family = segmentFamily(store.user, entries[0]?.name ?? '');
  // the segments, filled in entry order: each entry's layout references its stretch of them
  const segments: { id: string; parts: Uint8Array[]; used: number }[] = [];
  const layouts: Layout[] = entries.map((e) => {
    const layout: Layout = { segments: [], extents: [] };
    for (let o = 0; o < e.bytes.length; ) {
      let seg = segments[segments.length - 1];
      if (!seg || seg.used === SEGMENT_BYTES) segments.push((seg = { id: newSegmentId(family), parts: [], used: 0 }));
      const n = Math.min(e.bytes.length - o, SEGMENT_BYTES - seg.used);
      if (layout.segments[layout.segments.length - 1] !== seg.id) layout.segments.push(seg.id);
      layout.extents.push({ seg: layout.segments.length - 1, offset: seg.used, length: n });
      seg.parts.push(e.bytes.subarray(o, o + n));
      seg.used += n;
      o += n;
    }
    return layout;
  });
  let landed = false;
  const dropSegments = async () => {
    if (landed) return;
    for (const s of segments) await backend.delete(segmentKey(s.id)).catch(() => {});
  };
  try {
    await Promise.all(
      segments.map(async (s) => {
        const body = Buffer.concat(s.parts);
        await putNew(backend, segmentKey(s.id), body, (stamp) => store.repo.verified.add(s.id, stamp, 0, body.length)).catch((e) => {
          throw new WriteFailed(e);
        });
        store.repo.written.add(s.id, body);
      }),
    );
  } catch (e) {
    await dropSegments();
    throw e;
  }
  // every head change starts in this turn: one group
  const outcomes = await Promise.all(
    entries.map((e, k) =>
      bulkCommit(store, e, layouts[k], epoch, client, () => (landed = true)).then(
        (version): BulkOutcome => ({ version }),
        (error): BulkOutcome => ({ error }),
      ),
    ),
  );
  await dropSegments();
  return outcomes;
}

/** Commits one entry of a bulk upload whose segments are written (`bulkVersions`). */
async function bulkCommit(store: VersionHost, e: BulkEntry, layout: Layout, epoch: number, client: string | undefined, onLanded: () => void): Promise<number> {
  const { name, index } = e;
  const body = encodeVersion(index, layout);
  const id = sha256hex(body);
  const root = Buffer.from(index.root).toString('hex');
  const refs: Refs = new Map([[indexKey(id), epoch]]);
  for (const s of layout.segments) addRef(refs, segmentKey(s), epoch);
  let indexWritten = false;
  const version = await store.changeHead(
    name,
    async (h): Promise<HeadChange<number>> => {
      const vs = h?.versions ?? [];
      // an earlier attempt whose answer was lost landed (the index id is this commit's own)
      const there = vs.find((v) => v.index === id);
      if (there) return { head: null, result: there.version, adds: { entries: [there], refs, ours: true } };
      const latest = vs[vs.length - 1]?.version ?? 0;
      if (latest !== e.expect) {
        // the client's listing may lag the head (a server killed before its catalog's note)
        if (h) await noteInCatalog(store.backend, store.user, h, store.repo.linked).catch(() => {});
        throw e.expect ? stale(name, latest, e.expect) : new ProtocolError(ErrorCode.StaleBasis, `${name} exists (version ${latest})`);
      }
      // a new name: not a file beside a folder of the same name, nor under a file (C4)
      const clash = vs.length ? null : await store.typeClash?.(name, 'file');
      if (clash) throw new ProtocolError(ErrorCode.Inconsistent, clash);
      if (!indexWritten) {
        await store.backend.putIfAbsent(indexKey(id), body).catch((err) => {
          throw new WriteFailed(err);
        });
        indexWritten = true;
      }
      const next = h?.next ?? 1;
      const entry: VersionEntry = { version: next, index: id, size: index.size, mtime: new Date().toISOString(), root, algo: index.algo, change: e.bytes.length, ...(client && { client }), ...(e.modified !== undefined && { modified: e.modified }) };
      const versions = applyRetention([...vs, entry], store.repo.settings);
      return { head: { ...carryMark(h), name, next: next + 1, versions }, result: next, adds: { entries: [entry], refs, ours: true } };
    },
    { landed: onLanded },
  );
  store.noteTraits(name, id, index.fastfps);
  store.repo.noteIndex(id, index, layout, body.length);
  return version;
}
