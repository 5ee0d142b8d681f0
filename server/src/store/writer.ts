/**
 * Writing a new version (docs/store.md §4): the Sink a receiver rebuilds a target into. Delta
 * Bytes go to new segments (SEGMENT_BYTES each at most); stretches copied from a stored version
 * are referenced, not copied, and verified at commit; the commit is the swap of the file head
 * (Store.changeHead), guarded against a running garbage collection.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import type { ChunkIndex, Source } from '../../../shared/src/chunking/chunk-index.ts';
import type { BasisSpans, Sink } from '../../../shared/src/session/sink.ts';
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
  /** why `name` cannot be a file now (a parent is a file, or `name/` is a folder), or null;
   *  `parents` shares the parents' reads between calls (Store.typeClash) */
  typeClash?(name: string, as: 'file', parents?: ParentFiles): Promise<string | null>;
}

/** Whether each parent folder's name is a file (its head has a version), by name: the reads
 *  of Store.typeClash shared by the entries of one bulk upload. */
export type ParentFiles = Map<string, Promise<boolean>>;

/**
 * A version writer's states, in order:
 *   WRITING     Delta Bytes fill the open segment (`cur`, SEGMENT_BYTES at most; `flush` puts
 *               it) and copies add extents that reference the basis' segments; `state()` may
 *               list what is written so far in an uploads head (a suspend or a checkpoint)
 *   COMMITTING  the last segment is put, the copied stretches and a resumed upload's bytes
 *               verified, the version index encoded and the head swap under way
 * and one of the ends:
 *   LANDED      a head swap adding this version landed, or may have: its objects are never
 *               deleted by it (a commit that fails from here leaves them to gc); no state
 *               follows
 *   UNCHANGED   the latest version, known good, holds the same content: that is the answer,
 *               and this upload's own objects are deleted
 *   ABORTED     given up before landing: its own objects that nothing else may reference are
 *               deleted
 * A commit that fails before landing leaves the writer COMMITTING: it is then aborted or
 * suspended.
 */
const WRITING = 'writing';
const COMMITTING = 'committing';
const LANDED = 'landed';
const UNCHANGED = 'unchanged';
const ABORTED = 'aborted';
type WriterState = typeof WRITING | typeof COMMITTING | typeof LANDED | typeof UNCHANGED | typeof ABORTED;

/**
 * Writes a new version of `name` into `store` (see Store.create): the Sink a receiver rebuilds
 * the target into. Its Sink methods are bound (arrow functions): the store wraps them
 * (store.ts withCheckpoints).
 */
export class VersionWriter implements VersionSink {
  private writer: WriterState = WRITING;
  private readonly backend: Backend;
  private readonly layout: Layout;
  /** the segments this upload wrote (a resumed one's earlier ones first) */
  private readonly own: string[];
  /** own segments [0, shared) may be referenced by something besides this upload: a resumed
   *  upload's earlier ones (its state was listed, so another resuming push may have claimed
   *  it too), and those an uploads head listed (a checkpoint or a suspend: a push of the same
   *  target through any server may claim it and commit them while this one goes on). This
   *  upload never deletes those; gc collects them once nothing references them */
  private shared: number;
  /** Delta Bytes written, this session and a resumed upload's before */
  private written: number;
  /** each segment's index in layout.segments */
  private readonly segIndex: Map<string, number>;
  /** the file's segments share a family (keys.ts): a commit asks their stamps together */
  private readonly family: string;
  /** the open segment: its index in layout.segments (-1: none), its bytes so far */
  private cur = -1;
  private buf = new Uint8Array(0);
  private used = 0;
  /** the gc epoch read before this upload writes its first object (this process's read of
   *  less than W/4 ago will do): every object it writes is known to exist at it (docs/store.md
   *  §8); a resumed upload's earlier objects, and the objects copies reference, are known at the
   *  epochs they came with */
  private readonly epoch: Promise<number>;
  private readonly resumedEpoch: number;
  private readonly copied: Refs = new Map();
  /** stretches copied by reference: verified before the commit (a version never inherits damage) */
  private readonly copies: { from: VersionSource; offset: number; length: number }[] = [];

  constructor(
    private readonly store: VersionHost,
    private readonly name: string,
    private readonly expectLatest?: number,
    private readonly client?: string,
    private readonly resume?: UploadState,
    private readonly seen?: SeenHead,
    private readonly modified?: number,
  ) {
    this.backend = store.backend;
    this.layout = resume ? structuredClone(resume.layout) : { segments: [], extents: [] };
    this.own = resume ? [...resume.own] : [];
    this.shared = resume ? resume.own.length : 0;
    this.written = resume?.written ?? 0;
    this.segIndex = new Map(this.layout.segments.map((s, k) => [s, k]));
    this.family = segmentFamily(store.user, name);
    this.epoch = gcEpoch(store.repo, store.repo.settings.gcWindowMs / 4);
    this.epoch.catch(() => {}); // awaited, with its error, before the first write
    this.resumedEpoch = resume?.epoch ?? 0;
  }

  /** a head swap adding this version landed, or may have (then its objects are never deleted by it) */
  get landed(): boolean {
    return this.writer === LANDED;
  }

  // ---- WRITING ------------------------------------------------------------------------------

  /** The basis pieces of refined chunks are stored by reference, as copies are (verified at
   *  commit): a version's own segments hold only the bytes the client sent. */
  write = async (bytes: Uint8Array, basis?: BasisSpans): Promise<void> => {
    if (!basis || !(basis.from instanceof VersionSource) || basis.from.backend !== this.backend) return this.append(bytes);
    let o = 0;
    for (const s of basis.spans) {
      if (s.length < MIN_REFERENCED) continue;
      if (s.at > o) await this.append(bytes.subarray(o, s.at));
      await this.copy(basis.from, s.offset, s.length);
      o = s.at + s.length;
    }
    if (o < bytes.length) await this.append(bytes.subarray(o));
  };

  copy = async (from: Source, offset: number, length: number): Promise<void> => {
    if (!(from instanceof VersionSource) || from.backend !== this.backend) return this.append(await from.read(offset, length));
    this.copies.push({ from, offset, length });
    for (const piece of from.slice(offset, length)) {
      addRef(this.copied, segmentKey(piece.segment), from.epoch);
      let seg = this.segIndex.get(piece.segment);
      if (seg === undefined) this.segIndex.set(piece.segment, (seg = this.layout.segments.push(piece.segment) - 1));
      this.extend(seg, piece.offset, piece.length);
    }
  };

  /** What is written so far, flushed, for an uploads head: its segments may be claimed from there. */
  state = async (): Promise<Omit<UploadState, 'count' | 'hashes' | 'digest'>> => {
    await this.flush();
    this.shared = this.own.length;
    const known = Math.min(await this.epoch, this.resume ? this.resumedEpoch : Infinity, knownAt(this.copied));
    return { layout: structuredClone(this.layout), written: this.written, own: [...this.own], epoch: known };
  };

  /** Appends Delta Bytes to the open segment (a new one when none is open), putting each full one. */
  private async append(bytes: Uint8Array) {
    for (let o = 0; o < bytes.length; ) {
      if (this.cur < 0) {
        const id = newSegmentId(this.family);
        this.own.push(id);
        this.cur = this.layout.segments.push(id) - 1;
        this.segIndex.set(id, this.cur);
      }
      const n = Math.min(bytes.length - o, SEGMENT_BYTES - this.used);
      if (this.used + n > this.buf.length) {
        const grown = new Uint8Array(Math.min(SEGMENT_BYTES, Math.max(64 << 10, 2 * this.buf.length, this.used + n)));
        grown.set(this.buf.subarray(0, this.used));
        this.buf = grown;
      }
      this.buf.set(bytes.subarray(o, o + n), this.used);
      this.extend(this.cur, this.used, n);
      this.used += n;
      this.written += n;
      o += n;
      if (this.used === SEGMENT_BYTES) await this.flush();
    }
  }

  /** Adds an extent to the layout, joined to the last one where it continues it. */
  private extend(seg: number, offset: number, length: number) {
    const last = this.layout.extents[this.layout.extents.length - 1];
    if (last && last.seg === seg && last.offset + last.length === offset) last.length += length;
    else this.layout.extents.push({ seg, offset, length });
  }

  /** Puts the open segment, if it holds anything. */
  private async flush() {
    if (this.cur < 0 || this.used === 0) return;
    await this.epoch;
    const id = this.layout.segments[this.cur];
    const { repo } = this.store;
    const used = this.used;
    // the bytes put are the ones the receiver hashed: verified under the stamp the put
    // returns (S3: its ETag), for the next syncs' commits that copy from them
    await putNew(this.backend, segmentKey(id), this.buf.subarray(0, used), (stamp) => repo.verified.add(id, stamp, 0, used)).catch((e) => {
      throw new WriteFailed(e);
    });
    // kept for the next syncs' reads (a copy: the buffer is filled again)
    repo.written.add(id, this.buf.slice(0, used));
    this.cur = -1;
    this.used = 0;
  }

  // ---- COMMITTING ---------------------------------------------------------------------------

  commit = async (index: ChunkIndex): Promise<number> => {
    if (this.writer === WRITING) this.writer = COMMITTING;
    await this.flush();
    const own0 = await this.epoch;
    const bySource = await this.verifyCopies();
    await this.verifyResumed(index);
    const body = encodeVersion(index, this.layout);
    const id = sha256hex(body);
    const { version, unchanged } = await this.swapHead(index, body, id, this.refsAt(id, own0), bySource);
    const { store, name, layout } = this;
    if (unchanged) {
      if (!this.landed) this.writer = UNCHANGED;
      await this.dropOwn();
    } else {
      store.noteTraits(name, id, index.fastfps);
      store.repo.noteIndex(id, index, layout, body.length);
      // beyond the bound of segments a version reads (compact.ts): compacted after the answer
      if (layout.segments.length > maxSegments(index.size)) store.repo.later(`compact ${store.user} ${name}`, (log) => compactFile(store.repo, store.user, name, log));
    }
    return version;
  };

  /** A version is only ever built from bytes verified for it: every copied stretch is verified
   *  now (source.ts `verify`: read, or a stamp shows it unchanged since this process read it).
   *  The stretches, by source. */
  private async verifyCopies(): Promise<Map<VersionSource, { offset: number; length: number }[]>> {
    const bySource = new Map<VersionSource, { offset: number; length: number }[]>();
    for (const c of this.copies) {
      const rs = bySource.get(c.from);
      if (rs) rs.push(c);
      else bySource.set(c.from, [c]);
    }
    for (const [src, ranges] of bySource) {
      await src.verify(ranges).catch(async (e) => {
        // a segment of the basis gone since a collection ended: collected (the basis was
        // removed, or repacked, meanwhile), not damage; the client pushes again
        if (e instanceof DamageError && e.missing && (await gcEpoch(this.store.repo)) > src.epoch) throw new GcRefusal(`the store collected a segment of the version this push copies from; push again`);
        throw e;
      });
    }
    return bySource;
  }

  /** An interrupted upload's bytes (its own segments, written by an earlier session, perhaps
   *  through another server, and what it copied) are verified as copies are. */
  private async verifyResumed(index: ChunkIndex) {
    const { resume, layout } = this;
    if (!resume) return;
    const thisSession = new Set(this.own.slice(resume.own.length));
    const src = new VersionSource(this.backend, layout, index, `the resumed upload of ${this.name}`, 0, this.store.repo.verified);
    const ranges = [];
    let pos = 0;
    for (const e of layout.extents) {
      if (!thisSession.has(layout.segments[e.seg])) ranges.push({ offset: pos, length: e.length });
      pos += e.length;
    }
    await src.verify(ranges);
  }

  /** What the version (index `id`) references, each known at an epoch: its own objects at the
   *  one read before they were written (`own0`), a resumed upload's at the one it was
   *  suspended with, copies at their versions'. */
  private refsAt(id: string, own0: number): Refs {
    const refs: Refs = new Map([[indexKey(id), own0]]);
    const mine = new Set(this.own);
    const earlier = new Set(this.resume?.layout.segments ?? []);
    for (const s of this.layout.segments) {
      const key = segmentKey(s);
      if (earlier.has(s)) addRef(refs, key, this.resumedEpoch);
      if (this.copied.has(key)) addRef(refs, key, this.copied.get(key)!);
      if (mine.has(s) && !earlier.has(s)) addRef(refs, key, own0);
      if (!refs.has(key)) addRef(refs, key, 0);
    }
    return refs;
  }

  /** The head swap (Store.changeHead) that adds the version index `body` (id `id`) as the
   *  latest version, or answers the latest as unchanged. */
  private async swapHead(index: ChunkIndex, body: Uint8Array, id: string, refs: Refs, bySource: Map<VersionSource, { offset: number; length: number }[]>) {
    const { store, backend, name, expectLatest, client, modified } = this;
    const root = Buffer.from(index.root).toString('hex');
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
    let indexWritten = false;
    return store.changeHead(
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
        const entry: VersionEntry = { version: next, index: id, size: index.size, mtime: new Date().toISOString(), root, algo: index.algo, change: this.written, ...(client && { client }), ...(modified !== undefined && { modified }) };
        const versions = applyRetention([...vs, entry], store.repo.settings);
        return { head: { ...carryMark(h), name, next: next + 1, versions }, result: { version: next, unchanged: false }, adds: { entries: [entry], refs, ours: true } };
      },
      { landed: () => (this.writer = LANDED), seen: this.seen },
    );
  }

  // ---- ABORTED ------------------------------------------------------------------------------

  abort = async (): Promise<void> => {
    this.cur = -1;
    this.used = 0;
    if (this.writer !== LANDED) this.writer = ABORTED;
    await this.dropOwn();
  };

  /** Deletes this upload's own segments that nothing else may reference, unless it landed. */
  private async dropOwn() {
    if (this.landed) return;
    for (const id of this.own.slice(this.shared)) await this.backend.delete(segmentKey(id)).catch(() => {});
  }
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
  // every head change starts in this turn: one group. Its entries share the reads of their
  // parents' heads (typeClash): a request's files are mostly in a few folders
  const parents: ParentFiles = new Map();
  const outcomes = await Promise.all(
    entries.map((e, k) =>
      bulkCommit(store, e, layouts[k], epoch, client, parents, () => (landed = true)).then(
        (version): BulkOutcome => ({ version }),
        (error): BulkOutcome => ({ error }),
      ),
    ),
  );
  await dropSegments();
  return outcomes;
}

/** Commits one entry of a bulk upload whose segments are written (`bulkVersions`). */
async function bulkCommit(store: VersionHost, e: BulkEntry, layout: Layout, epoch: number, client: string | undefined, parents: ParentFiles, onLanded: () => void): Promise<number> {
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
      const clash = vs.length ? null : await store.typeClash?.(name, 'file', parents);
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
