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
import type { Held, SinkFor } from '../../shared/src/sink.ts';
import { MIN_SHARED, sharedTraits, traitsOf } from './similarity.ts';
import type { Backend } from './store/backend.ts';
import type { Repo } from './store/repo.ts';
import { type FileHead, type Layout, type VersionEntry, applyRetention, jsonBody, parseFileHead } from './store/format.ts';
import { gcEpoch, guardCommit } from './store/gc.ts';
import { updateHead } from './store/heads.ts';
import { fileHeadKey, indexKey, nsPrefix, segmentKey, uploadsKey } from './store/keys.ts';
import { type CatalogEntry, catalogKey, noteInCatalog, parseCatalog } from './store/catalog.ts';
import { VersionSource } from './store/source.ts';
import { type UploadState, claimUpload, holdsUpload, suspendUpload } from './store/uploads.ts';
import { type VersionSink, versionSink } from './store/writer.ts';

export { VersionSource } from './store/source.ts';
export { SEGMENT_BYTES } from './store/writer.ts';
export { runGc, type GcOptions, type GcReport } from './store/gc.ts';
export { runCheck, type CheckReport } from './store/check.ts';
export { encodeName } from './store/keys.ts';
export { applyRetention, decodeVersion, encodeVersion, isDamage, type Layout, type Extent } from './store/format.ts';

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


const noVersion = (name: string, version: number) => new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);

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
   * Changes the head of `name` by compare-and-swap (see heads.ts): every commit, delete,
   * rename and restore goes through here. A new head's references
   * are guarded against a running garbage collection (gc.ts, `guardCommit`): `refs` lists the
   * content objects it adds, `epoch` is the gc epoch the operation began in.
   */
  async changeHead<T>(name: string, change: (h: FileHead | null) => { head: FileHead | null; result: T; refs?: string[] } | Promise<{ head: FileHead | null; result: T; refs?: string[] }>, epoch?: number): Promise<T> {
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
    const id = (await this.entry(name, version)).index;
    const { index, layout } = await this.repo.readIndex(id, `${name} version ${version}`);
    return { source: new VersionSource(this.backend, layout, index, `${name} version ${version}`, epoch, this.repo.verified, id), close: async () => {} };
  }

  /**
   * Opens a version as the basis of a push, verified whole first (read, or a stamp per segment
   * showing it unchanged since this process read it: docs/store.md, "Integrity"), so that a
   * damaged version is found before the push builds on it: then it is no basis, and the client
   * sends those bytes. Damage is thrown (`isDamage`); the caller decides.
   */
  async openBasis(name: string, version: number): Promise<{ source: VersionSource; close: () => Promise<void> }> {
    const opened = await this.openVersion(name, version);
    await opened.source.verify([{ offset: 0, length: opened.source.size }]);
    return opened;
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
   * Starts writing a new version of `name` (writer.ts). `expectLatest`, if given, is the
   * version the writer built on: the commit fails with StaleBasis if another commit landed
   * since. `resume`: an interrupted upload's state to continue.
   */
  create(name: string, expectLatest?: number, client?: string, resume?: UploadState): VersionSink {
    return versionSink(this, name, expectLatest, client, resume);
  }

  /** Records the similarity traits of `name`'s new latest version (its index `id`). */
  noteTraits(name: string, id: string, fastfps: Uint32Array): void {
    this.traits?.map.set(name, { index: id, traits: traitsOf(fastfps) });
  }

  // ---- metadata changes (no bytes move) -----------------------------------------------------

  /** Removes one version, or the whole file (every version). Its version numbers are never
   *  reused. Returns the versions removed. */
  async remove(name: string, version?: number): Promise<number[]> {
    return this.changeHead(name, (h) => {
      const vs = h?.versions ?? [];
      const gone = version === undefined ? vs : vs.filter((v) => v.version === version);
      if (!gone.length) throw version === undefined ? new ProtocolError(ErrorCode.NotFound, `${name} does not exist`) : noVersion(name, version);
      return { head: { ...h!, versions: vs.filter((v) => !gone.includes(v)) }, result: gone.map((v) => v.version) };
    });
  }

  /** Applies retention (keepVersions, keepDays) to `name`; returns how many versions went. */
  async retain(name: string): Promise<number> {
    return this.changeHead(name, (h) => {
      const kept = h ? applyRetention(h.versions, this.repo.settings) : [];
      if (!h || kept.length === h.versions.length) return { head: null, result: 0 };
      return { head: { ...h, versions: kept }, result: h.versions.length - kept.length };
    });
  }

  /** Adds a new version of `name` with the bytes of `version` (the same index). */
  async restore(name: string, version: number): Promise<number> {
    const epoch = await gcEpoch(this.repo);
    // a new version is built from bytes verified for it: the old version's, and its index
    const { source } = await this.openBasis(name, version);
    if (!(await this.repo.indexIntact(source.id!))) throw new ProtocolError(ErrorCode.Internal, `damaged store: ${name} version ${version}: its index ${source.id} does not match its hash`);
    return this.changeHead(
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
    await this.changeHead(
      to,
      (h) => {
        if (h?.versions.length) throw new ProtocolError(ErrorCode.Inconsistent, `${to} exists`);
        let next = h?.next ?? 1;
        const versions = src.versions.map((v) => ({ ...v, version: next++ }));
        return { head: { name: to, next, versions }, result: undefined, refs };
      },
      epoch,
    );
    await this.changeHead(from, (h) => ({ head: h && { ...h, versions: h.versions.filter((v) => !src.versions.some((s) => s.version === v.version)) }, result: undefined }));
  }
}
