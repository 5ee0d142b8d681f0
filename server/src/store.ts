/**
 * The store (docs/store.md): every version of every file of every user, over one Backend (a
 * local directory or S3-compatible object storage) that any number of server processes share.
 * Immutable content objects (segments of Delta Bytes, content-addressed version indexes) and
 * small heads changed by compare-and-swap: a commit IS the swap of the file head adding a
 * version, so concurrent writers through different processes never lose one another's.
 *
 * A version references the chunks it shares with its basis instead of copying them: its
 * layout lists extents over segments. A sync costs the store work in proportion to what
 * changed, not to the file's size.
 */
import { createHash } from 'node:crypto';
import type { ChunkIndex } from '../../shared/src/chunk-index.ts';
import { ErrorCode, ProtocolError } from '../../shared/src/protocol.ts';
import type { ChunkParams } from '../../shared/src/protocol.ts';
import type { Held, Sink, SinkFor } from '../../shared/src/sink.ts';
import { MIN_SHARED, sharedTraits, traitsOf } from './similarity.ts';
import type { Backend } from './store/backend.ts';
import type { Repo, StoreSettings } from './store/repo.ts';
import { type FileHead, type Layout, type VersionEntry, encodeVersion, jsonBody, parseFileHead, sha256hex } from './store/format.ts';
import { gcEpoch, guardCommit } from './store/gc.ts';
import { updateHead } from './store/heads.ts';
import { fileHeadKey, indexKey, newSegmentId, nsPrefix, segmentKey, uploadsKey } from './store/keys.ts';
import { type CatalogEntry, catalogKey, noteInCatalog, parseCatalog } from './store/catalog.ts';
import { VersionSource } from './store/source.ts';
import { compact } from './store/compact.ts';
import { type UploadState, claimUpload, holdsUpload, suspendUpload } from './store/uploads.ts';

export { VersionSource } from './store/source.ts';
export { Repo, openStore, type StoreSettings } from './store/repo.ts';
export { runGc, type GcOptions, type GcReport } from './store/gc.ts';
export { runCheck, type CheckReport } from './store/check.ts';
export { encodeName } from './store/keys.ts';
export { decodeVersion, encodeVersion, type Layout, type Extent } from './store/format.ts';

/** A segment holds at most this many Delta Bytes: an upload buffers one segment in memory,
 *  and on S3 a segment is one PUT. */
export const SEGMENT_BYTES = 8 << 20;
/** Similarity traits are brought up to the folder catalogs when older than this (other processes commit). */
const TRAITS_REFRESH_MS = 30_000;

/** A version as listings show it: its file head entry without the index id. */
export type VersionInfo = Omit<VersionEntry, 'index'>;
export interface FileInfo {
  name: string;
  latest: number;
  size: number;
  versions: number;
  mtime: string;
}

/** Whether `e` reports a damaged or missing stored object (format.ts, source.ts). */
export const isDamage = (e: unknown) => e instanceof ProtocolError && e.code === ErrorCode.Internal && /^damaged store/.test(e.message);

const stale = (name: string, latest: number, expected: number) =>
  new ProtocolError(ErrorCode.StaleBasis, `${name} is at version ${latest}, not ${expected}: sync again against the latest version`);
const noVersion = (name: string, version: number) => new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);

/** Drops the versions retention does not keep (never the latest). */
export function applyRetention(versions: VersionEntry[], s: Pick<StoreSettings, 'keepVersions' | 'keepDays'>, now = Date.now()): VersionEntry[] {
  let out = versions;
  if (s.keepVersions > 0 && out.length > s.keepVersions) out = out.slice(out.length - s.keepVersions);
  if (s.keepDays > 0) {
    const cut = now - s.keepDays * 86_400_000;
    out = out.filter((v, i) => i === out.length - 1 || Date.parse(v.mtime) >= cut);
  }
  return out;
}

/** One user's files (the namespace `ns/<user>/`). */
export class Store {
  readonly backend: Backend;
  /** similarity traits of each file's latest version, by index id */
  private traits: { at: number; map: Map<string, { index: string; traits: Uint32Array }> } | null = null;

  constructor(
    readonly repo: Repo,
    readonly user: string,
  ) {
    this.backend = repo.backend;
  }

  private headKey(name: string) {
    return fileHeadKey(this.user, name);
  }

  /** The file head of `name`, or null. */
  async head(name: string): Promise<FileHead | null> {
    const key = this.headKey(name);
    const got = await this.backend.getHead(key);
    return got && parseFileHead(got.body, key);
  }

  /**
   * Changes the head of `name` by compare-and-swap (see heads.ts). A new head's references
   * are guarded against a running garbage collection (gc.ts, `guardCommit`): `refs` lists the
   * content objects it adds, `epoch` is the gc epoch the operation began in.
   */
  private async update<T>(name: string, change: (h: FileHead | null) => { head: FileHead | null; result: T; refs?: string[] } | Promise<{ head: FileHead | null; result: T; refs?: string[] }>, epoch?: number): Promise<T> {
    const key = this.headKey(name);
    let written = null as FileHead | null;
    const result = await updateHead(this.backend, key, async (b) => {
      const old = b && parseFileHead(b, key);
      const { head, result, refs } = await change(old);
      if (head) head.seq = (old?.seq ?? 0) + 1;
      written = head;
      // half the window is the margin for the swap itself
      const deadline = head && refs?.length ? (await guardCommit(this.repo, refs, epoch ?? 0, this.repo.settings.gcWindowMs)) - this.repo.settings.gcWindowMs / 2 : undefined;
      return { body: head && jsonBody(head), result, deadline };
    });
    // the folder catalog follows; if this fails the head stands and gc repairs the catalog
    if (written) await noteInCatalog(this.backend, this.user, written, this.repo.linked).catch(() => {});
    return result;
  }

  /** The keys of the content objects a version references. */
  private async refsOf(entries: VersionEntry[]): Promise<string[]> {
    const refs = new Set<string>();
    for (const e of entries) {
      refs.add(indexKey(e.index));
      for (const s of (await this.repo.readIndex(e.index, this.user)).layout.segments) refs.add(segmentKey(s));
    }
    return [...refs];
  }

  async versionNumbers(name: string): Promise<number[]> {
    return ((await this.head(name))?.versions ?? []).map((v) => v.version);
  }

  async latest(name: string): Promise<number> {
    const vs = (await this.head(name))?.versions ?? [];
    return vs.length ? vs[vs.length - 1].version : 0;
  }

  async versions(name: string): Promise<VersionInfo[]> {
    return ((await this.head(name))?.versions ?? []).map(({ index: _, ...v }) => v);
  }

  /** A folder's catalog entries and subfolders, full names, in byte order of their names
   * (a subfolder's name ends in '/'). */
  private async folderEntries(folder: string): Promise<[string, CatalogEntry | null][]> {
    const key = catalogKey(this.user, folder);
    const c = parseCatalog((await this.backend.getHead(key))?.body ?? null, key);
    const prefix = folder ? folder + '/' : '';
    const all: [string, CatalogEntry | null][] = [];
    for (const [base, e] of Object.entries(c.files)) if (e.versions) all.push([prefix + base, e]);
    for (const f of Object.keys(c.folders)) all.push([prefix + f + '/', null]);
    return all.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  /**
   * One page of a folder's listing (one catalog read): its files and subfolders in name order
   * after `cursor`, at most `limit` together, and the cursor of the next page (null: the last).
   * `folder` is '' for the top or a folder name without a trailing '/'.
   */
  async listFolder(folder: string, cursor = '', limit = 1000): Promise<{ files: FileInfo[]; folders: string[]; next: string | null }> {
    const all = await this.folderEntries(folder);
    const page = all.filter(([n]) => n > cursor).slice(0, limit);
    const more = page.length > 0 && page[page.length - 1][0] < all[all.length - 1][0];
    return {
      files: page.flatMap(([name, e]) => (e ? [{ name, latest: e.latest, size: e.size, versions: e.versions, mtime: e.mtime }] : [])),
      folders: page.flatMap(([n, e]) => (e ? [] : [n])),
      next: more ? page[page.length - 1][0] : null,
    };
  }

  /** Visits every file under `folder` ('' for all) in name order: one catalog read per folder.
   *  A damaged catalog hides its own folder until gc rebuilds it. */
  private async walk(folder: string, visit: (name: string, e: CatalogEntry) => void): Promise<void> {
    let all;
    try {
      all = await this.folderEntries(folder);
    } catch {
      return;
    }
    for (const [name, e] of all) {
      if (e) visit(name, e);
      else await this.walk(name.slice(0, -1), visit);
    }
  }

  /** Every file with at least one version under `folder` ('' for all), by name. */
  async list(folder = ''): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    await this.walk(folder, (name, e) => out.push({ name, latest: e.latest, size: e.size, versions: e.versions, mtime: e.mtime }));
    return out;
  }

  /**
   * A value that changes whenever a commit, rename or delete by any process changes this
   * namespace's listing: a digest of its folder catalogs' keys, sizes and times, from one list
   * of the catalogs (O(folders), no object read). The live-updates stream polls it.
   */
  async changeToken(): Promise<string> {
    const h = createHash('sha256');
    for await (const e of this.backend.list(`${nsPrefix(this.user)}folders/`)) h.update(`${e.key}\0${e.size}\0${e.modified}\n`);
    return h.digest('hex');
  }

  private async entry(name: string, version: number): Promise<VersionEntry> {
    const e = (await this.head(name))?.versions.find((v) => v.version === version);
    if (!e) throw noVersion(name, version);
    return e;
  }

  async readVersion(name: string, version: number): Promise<{ index: ChunkIndex; layout: Layout }> {
    return this.repo.readIndex((await this.entry(name, version)).index, `${name} version ${version}`);
  }

  async readIndex(name: string, version: number): Promise<ChunkIndex> {
    return (await this.readVersion(name, version)).index;
  }

  /** Opens a version for reading (verified reads; nothing held open). */
  async openVersion(name: string, version: number): Promise<{ source: VersionSource; close: () => Promise<void> }> {
    const epoch = await gcEpoch(this.repo);
    const { index, layout } = await this.readVersion(name, version);
    return { source: new VersionSource(this.backend, layout, index, `${name} version ${version}`, epoch, this.repo.verified), close: async () => {} };
  }

  /** The bytes of a version, in verified pieces of up to `piece` bytes. */
  async *stream(name: string, version: number, piece = 1 << 20): AsyncGenerator<Uint8Array> {
    const { source } = await this.openVersion(name, version);
    for (let o = 0; o < source.size; o += piece) yield await source.read(o, Math.min(piece, source.size - o));
  }

  /** The whole bytes of a version (for small files and tests; `stream` for the rest). */
  async bytes(name: string, version: number): Promise<Buffer> {
    const parts: Uint8Array[] = [];
    for await (const p of this.stream(name, version)) parts.push(p);
    return Buffer.concat(parts);
  }

  // ---- writing ------------------------------------------------------------------------------

  /**
   * The sink for a push of `name` built on `basisVersion`: an interrupted upload of the same
   * target (same Checksum List, basis, chunking and algorithm), suspended through any server,
   * is resumed where it stopped; otherwise a new version is started (see `create`).
   */
  sinkFor(name: string, basisVersion: number, params: ChunkParams, algo: number, expectLatest?: number, client?: string): SinkFor {
    const match = (digest: Uint8Array) => [basisVersion, Buffer.from(digest).toString('hex'), params.min, params.avg, params.max, params.op, params.every, algo].join(':');
    const key = uploadsKey(this.user, name);
    return async ({ digest }) => {
      const kept = digest && (await claimUpload(this.backend, key, match(digest)));
      const sink = this.create(name, expectLatest, client, kept || undefined);
      sink.suspend = async (held: Held) => {
        const state = await sink.state();
        await suspendUpload(this.backend, key, match(held.digest), Date.now() + this.repo.settings.resumeWindowMs, { ...state, count: held.count, hashes: held.hashes, digest: held.digest });
      };
      return kept ? { sink, held: { digest: kept.digest, count: kept.count, hashes: kept.hashes } } : { sink };
    };
  }

  /** Whether an interrupted upload of `name` built on `basisVersion` waits to be resumed: a
   *  new push of it then matches only once its whole Checksum List is known (its digest
   *  decides whether it resumes). */
  holdsResumable(name: string, basisVersion: number): Promise<boolean> {
    return holdsUpload(this.backend, uploadsKey(this.user, name), `${basisVersion}:`);
  }

  /** The stored file most similar to a target with these chunk FastFps, if any is similar enough. */
  async similar(fastfps: Uint32Array): Promise<{ name: string; version: number } | null> {
    if (fastfps.length < MIN_SHARED) return null;
    if (!this.traits || Date.now() - this.traits.at > TRAITS_REFRESH_MS) {
      const old = this.traits?.map;
      const map = new Map<string, { index: string; traits: Uint32Array }>();
      const latest: [string, string][] = [];
      await this.walk('', (name, e) => e.index && latest.push([name, e.index]));
      for (const [name, index] of latest) {
        const had = old?.get(name);
        if (had?.index === index) map.set(name, had);
        else {
          try {
            map.set(name, { index, traits: traitsOf((await this.repo.readIndex(index, name)).index.fastfps) });
          } catch {
            // a damaged index is no basis; it breaks nothing else
          }
        }
      }
      this.traits = { at: Date.now(), map };
    }
    const want = traitsOf(fastfps);
    let best: string | null = null;
    let bestShared = MIN_SHARED - 1;
    for (const [name, t] of this.traits.map) {
      const n = sharedTraits(want, t.traits);
      if (n > bestShared) {
        bestShared = n;
        best = name;
      }
    }
    // the file's latest version now (the traits may be of an earlier one: still a good basis)
    const version = best ? await this.latest(best) : 0;
    return best && version ? { name: best, version } : null;
  }

  /**
   * Starts writing a new version of `name`. `expectLatest`, if given, is the version the writer
   * built on: the commit fails with StaleBasis if another commit landed since. Written bytes go
   * to new segments; bytes copied from a stored version are referenced, not copied. `resume`:
   * an interrupted upload's state to continue.
   */
  create(name: string, expectLatest?: number, client?: string, resume?: UploadState): Sink & { state(): Promise<Omit<UploadState, 'count' | 'hashes' | 'digest'>> } {
    const backend = this.backend;
    const layout: Layout = resume ? structuredClone(resume.layout) : { segments: [], extents: [] };
    const own: string[] = resume ? [...resume.own] : [];
    let written = resume?.written ?? 0;
    const segIndex = new Map<string, number>(layout.segments.map((s, k) => [s, k]));
    // the segment being filled: its index in layout.segments, its bytes so far
    let cur = -1;
    let buf = new Uint8Array(0);
    // the gc epoch this upload began in, or the one its copied bytes were read in if older
    // (guardCommit)
    const epoch = gcEpoch(this.repo);
    epoch.catch(() => {}); // awaited, with its error, by the commit
    let copiedEpoch = Infinity;
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
      await backend.putIfAbsent(segmentKey(layout.segments[cur]), buf.subarray(0, used)).catch((e) => {
        throw writeFailed(e);
      });
      // written from bytes the receiver hashed: known good
      this.repo.verified.add(layout.segments[cur], 0, used);
      cur = -1;
      used = 0;
    };
    const write = async (bytes: Uint8Array) => {
      for (let o = 0; o < bytes.length; ) {
        if (cur < 0) {
          const id = newSegmentId();
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
    const dropOwn = async () => {
      for (const id of own) await backend.delete(segmentKey(id)).catch(() => {});
    };
    return {
      write,
      copy: async (from, offset, length) => {
        if (!(from instanceof VersionSource) || from.backend !== backend) return write(await from.read(offset, length));
        copiedEpoch = Math.min(copiedEpoch, from.epoch);
        copies.push({ from, offset, length });
        for (const piece of from.slice(offset, length)) {
          let seg = segIndex.get(piece.segment);
          if (seg === undefined) segIndex.set(piece.segment, (seg = layout.segments.push(piece.segment) - 1));
          append(seg, piece.offset, piece.length);
        }
      },
      state: async () => {
        await flush();
        return { layout: structuredClone(layout), written, own: [...own] };
      },
      commit: async (index) => {
        await flush();
        for (const c of copies) await c.from.verify(c.offset, c.length);
        // an interrupted upload's segments (written by an earlier session, perhaps through
        // another server) are read back against their chunk hashes once
        if (resume?.own.length) {
          const earlier = new Set(resume.own);
          const src = new VersionSource(backend, layout, index, `the resumed upload of ${name}`, 0, this.repo.verified);
          let pos = 0;
          for (const e of layout.extents) {
            if (earlier.has(layout.segments[e.seg])) await src.verify(pos, e.length);
            pos += e.length;
          }
        }
        const final = await compact(backend, layout, index, SEGMENT_BYTES, own, this.repo.verified).catch((e) => {
          throw e instanceof ProtocolError ? e : writeFailed(e);
        });
        const body = encodeVersion(index, final);
        const id = sha256hex(body);
        const root = Buffer.from(index.root).toString('hex');
        let indexWritten = false;
        const { version, unchanged } = await this.update(name, async (h) => {
          const vs = h?.versions ?? [];
          const last = vs[vs.length - 1];
          const latest = last?.version ?? 0;
          if (expectLatest !== undefined && latest !== expectLatest) throw stale(name, latest, expectLatest);
          // the same content as the latest version is unchanged, unless that version's index
          // is damaged: then this push stores a good one
          if (last && last.root === root && last.algo === index.algo && (await this.repo.readIndex(last.index, name).then(() => true, (e) => !isDamage(e)))) {
            return { head: null, result: { version: latest, unchanged: true } };
          }
          if (!indexWritten) {
            await backend.putIfAbsent(indexKey(id), body).catch((e) => {
              throw writeFailed(e);
            });
            indexWritten = true;
          }
          const next = h?.next ?? 1;
          const entry: VersionEntry = { version: next, index: id, size: index.size, mtime: new Date().toISOString(), root, algo: index.algo, change: written, ...(client && { client }) };
          const versions = applyRetention([...vs, entry], this.repo.settings);
          const refs = [indexKey(id), ...final.segments.map(segmentKey)];
          return { head: { name, next: next + 1, versions }, result: { version: next, unchanged: false }, refs };
        }, Math.min(await epoch, copiedEpoch));
        if (unchanged) await dropOwn();
        // own segments compaction emptied (best effort: gc collects them otherwise)
        else for (const s of own) if (!final.segments.includes(s)) await backend.delete(segmentKey(s)).catch(() => {});
        else this.traits?.map.set(name, { index: id, traits: traitsOf(index.fastfps) });
        return version;
      },
      abort: async () => {
        cur = -1;
        used = 0;
        await dropOwn();
      },
    };
  }

  // ---- metadata changes (no bytes move) -----------------------------------------------------

  /** Removes one version, or the whole file (every version). Its version numbers are never
   *  reused. Returns the versions removed. */
  async remove(name: string, version?: number): Promise<number[]> {
    return this.update(name, (h) => {
      const vs = h?.versions ?? [];
      const gone = version === undefined ? vs : vs.filter((v) => v.version === version);
      if (!gone.length) throw version === undefined ? new ProtocolError(ErrorCode.NotFound, `${name} does not exist`) : noVersion(name, version);
      return { head: { ...h!, versions: vs.filter((v) => !gone.includes(v)) }, result: gone.map((v) => v.version) };
    });
  }

  /** Applies retention (keepVersions, keepDays) to `name`; returns how many versions went. */
  async retain(name: string): Promise<number> {
    return this.update(name, (h) => {
      const kept = h ? applyRetention(h.versions, this.repo.settings) : [];
      if (!h || kept.length === h.versions.length) return { head: null, result: 0 };
      return { head: { ...h, versions: kept }, result: h.versions.length - kept.length };
    });
  }

  /** Adds a new version of `name` with the bytes of `version` (the same index). */
  async restore(name: string, version: number): Promise<number> {
    const epoch = await gcEpoch(this.repo);
    return this.update(
      name,
      async (h) => {
        const old = h?.versions.find((v) => v.version === version);
        if (!h || !old) throw noVersion(name, version);
        const entry: VersionEntry = { ...old, version: h.next, mtime: new Date().toISOString(), change: 0 };
        return { head: { ...h, next: h.next + 1, versions: applyRetention([...h.versions, entry], this.repo.settings) }, result: h.next, refs: await this.refsOf([old]) };
      },
      epoch,
    );
  }

  /**
   * Moves every version of `from` to `to`, which must not exist (or have no versions left):
   * `to` gets them under new numbers (its own, never reused), then `from` is removed. A crash
   * between the two leaves both names, never neither.
   */
  async rename(from: string, to: string): Promise<void> {
    if (from === to) return;
    const epoch = await gcEpoch(this.repo);
    const src = await this.head(from);
    if (!src?.versions.length) throw new ProtocolError(ErrorCode.NotFound, `${from} does not exist`);
    const refs = await this.refsOf(src.versions);
    await this.update(
      to,
      (h) => {
        if (h?.versions.length) throw new ProtocolError(ErrorCode.Inconsistent, `${to} exists`);
        let next = h?.next ?? 1;
        const versions = src.versions.map((v) => ({ ...v, version: next++ }));
        return { head: { name: to, next, versions }, result: undefined, refs };
      },
      epoch,
    );
    await this.update(from, (h) => ({ head: h && { ...h, versions: h.versions.filter((v) => !src.versions.some((s) => s.version === v.version)) }, result: undefined }));
  }
}

/** The error a session ends with when the store cannot take its bytes: a full disk says so. */
function writeFailed(e: unknown): ProtocolError {
  const { code, message } = e as NodeJS.ErrnoException;
  const full = code === 'ENOSPC' || code === 'EDQUOT';
  return new ProtocolError(ErrorCode.Internal, `${full ? "the server's disk is full" : 'the store could not write'} (${message}); nothing was stored, the previous version is intact`);
}
