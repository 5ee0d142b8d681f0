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
import type { ChunkIndex } from '../../../shared/src/chunking/chunk-index.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import type { ChunkParams } from '../../../shared/src/wire/protocol.ts';
import type { Held, SinkFor } from '../../../shared/src/session/sink.ts';
import { SimilarFiles } from './similarity.ts';
import type { Backend } from './backend.ts';
import type { Repo } from './repo.ts';
import { guessHead, noteHead, readHead } from './heads.ts';
import { type HeadChange, type SeenHead, changeHead } from './commit.ts';
import { type FileHead, type Layout, type VersionEntry, parseFileHead } from './format.ts';
import { type Refs, addRef } from './gc-state.ts';
import { changeMarkerKey, fileHeadKey, indexKey, segmentKey, uploadsKey } from './keys.ts';
import { type FileInfo, keepFolder, noteInCatalog, readCatalog } from './catalog.ts';
import { DamageError } from './errors.ts';
import { type FolderRecord, Listing, type Refused } from './listing.ts';
import { noVersion, removeVersions, renameFile, restoreVersion, retainVersions } from './history.ts';
import type { SearchPage } from './search.ts';
import { VersionSource } from './source.ts';
import { type UploadState, claimUpload, forgetUpload, holdsUpload, markUploads, mayHoldUploads, suspendUpload } from './uploads.ts';
import { type BulkEntry, type BulkOutcome, type ParentFiles, type VersionSink, VersionWriter, bulkVersions } from './writer.ts';

/** A version as listings show it: its file head entry without the index id. */
export type VersionInfo = Omit<VersionEntry, 'index' | 'epoch' | 'repack'>;
export type { FileInfo };

/**
 * Gives `sink` checkpoints (Sink.checkpoint, docs/store.md §6): each lists the upload's state
 * as a suspend does, in place of the one before, so that a server killed mid-upload leaves it
 * resumable. The last checkpoint is unlisted before the sink commits or aborts: a state listed
 * after the commit would, once expired, have its segments (now the version's) deleted; after an
 * abort it would name segments the abort deletes. A commit whose checkpoint cannot be unlisted
 * fails.
 */
function withCheckpoints(sink: VersionSink, list: (held: Held) => Promise<string>, forget: (at: { digest: Uint8Array; id: string }) => Promise<void>) {
  let at: { digest: Uint8Array; id: string } | null = null;
  const unlist = async () => {
    if (at) await forget(at);
    at = null;
  };
  sink.checkpoint = async (held) => {
    at = { digest: held.digest.slice(), id: await list(held) };
  };
  const { commit, abort, suspend } = sink;
  sink.commit = async (index) => (await unlist(), commit(index));
  sink.abort = async () => (await unlist().catch(() => {}), abort());
  // a suspend lists the state in place of the last checkpoint's (same key)
  sink.suspend = async (held) => ((at = null), suspend!(held));
}

/** One user's files (the namespace `ns/<user>/`). */
export class Store {
  readonly backend: Backend;
  /** the folder catalogs read as listings */
  readonly listing: Listing;
  /** the files a new name's push may take as its basis */
  private readonly similarFiles: SimilarFiles;

  constructor(
    readonly repo: Repo,
    readonly user: string,
  ) {
    this.backend = repo.backend;
    this.listing = new Listing(repo, user);
    this.similarFiles = new SimilarFiles(repo, this.listing, (name) => this.latest(name));
  }

  /** The file head of `name`, or null. */
  async head(name: string): Promise<FileHead | null> {
    return (await this.headSeen(name)).head;
  }

  /** The file head of `name` and its tag (for a later change to start from, `changeHead`). */
  async headSeen(name: string): Promise<SeenHead> {
    const key = fileHeadKey(this.user, name);
    const got = await readHead(this.backend, key);
    return { head: got && parseFileHead(got.body, key), tag: got?.tag ?? null };
  }

  /**
   * The file head of `name` as this process last read or wrote it (`guessed`), else read: only
   * for a push session to start from (docs/store.md §4 step 0, §12). Another process may have
   * changed the head since; the commit's compare-and-swap lands only if it did not, and every
   * decision the session makes from a guess to refuse, or to write nothing, is made again from
   * a read. Never an answer to a reader.
   */
  async headGuess(name: string): Promise<SeenHead> {
    const key = fileHeadKey(this.user, name);
    const got = guessHead(this.backend, key);
    if (!got) return this.headSeen(name);
    return { head: parseFileHead(got.body, key), tag: got.tag, guessed: true };
  }

  /** Forgets this process's guess of the file head of `name` (`headGuess`): the next push reads it. */
  forgetHead(name: string): void {
    noteHead(this.backend, fileHeadKey(this.user, name), null);
  }

  /**
   * Notes `head` (as just read from the store) in its folder's catalog if the catalog lags it:
   * a push refused because the name exists, or is at another version, than the client's
   * listing said, repairs at once a catalog a killed server left behind (docs/store.md §11),
   * instead of the client meeting the refusal again until a repair pass. One catalog read
   * when it does not lag.
   */
  async noteListed(head: FileHead): Promise<void> {
    await noteInCatalog(this.backend, this.user, head, this.repo.linked);
  }

  /** Changes the head of `name` by compare-and-swap (commit.ts `changeHead`: versions it adds
   *  are guarded against gc and confirmed before this returns). */
  changeHead<T>(name: string, change: (h: FileHead | null) => HeadChange<T> | Promise<HeadChange<T>>, hooks: { landed?: () => void; seen?: SeenHead } = {}): Promise<T> {
    return changeHead(this.repo, this.user, name, change, hooks);
  }

  /** The content objects `entries` reference, each known at its version's epoch. */
  async refsOf(entries: VersionEntry[]): Promise<Refs> {
    const refs: Refs = new Map();
    for (const e of entries) {
      addRef(refs, indexKey(e.index), e.epoch ?? 0);
      for (const s of (await this.repo.readIndex(e.index, this.user)).layout.segments) addRef(refs, segmentKey(s), e.epoch ?? 0);
    }
    return refs;
  }

  async versionNumbers(name: string): Promise<number[]> {
    return ((await this.head(name))?.versions ?? []).map((v) => v.version);
  }

  async latest(name: string): Promise<number> {
    const vs = (await this.head(name))?.versions ?? [];
    return vs.length ? vs[vs.length - 1].version : 0;
  }

  async versions(name: string): Promise<VersionInfo[]> {
    return ((await this.head(name))?.versions ?? []).map(({ index: _, epoch: __, repack: ___, ...v }) => v);
  }

  // ---- listing (listing.ts) -------------------------------------------------------------------

  /** One page of a folder's listing (`Listing.listFolder`). */
  listFolder(folder: string, cursor?: string, limit?: number, refused?: Refused): Promise<{ files: FileInfo[]; folders: string[]; next: string | null }> {
    return this.listing.listFolder(folder, cursor, limit, refused);
  }

  /** Every folder under `folder` with its own files and subfolders (`Listing.folderRecords`). */
  folderRecords(folder?: string, refused?: Refused): Promise<FolderRecord[]> {
    return this.listing.folderRecords(folder, refused);
  }

  /** One page of the files whose path contains `query` (`Listing.search`). */
  search(query: string, cursor: string, limit: number, maxFolders: number, refused?: Refused): Promise<SearchPage> {
    return this.listing.search(query, cursor, limit, maxFolders, refused);
  }

  /** Every file and every subfolder under `folder` (`Listing.tree`). */
  tree(folder?: string, refused?: Refused): Promise<{ files: FileInfo[]; folders: string[] }> {
    return this.listing.tree(folder, refused);
  }

  /** Every file with at least one version under `folder` ('' for all), by name. */
  async list(folder = ''): Promise<FileInfo[]> {
    return (await this.listing.tree(folder)).files;
  }

  // ---- folders (catalog.ts: a folder is listed while it holds something or is kept) ---------

  /** Whether `folder` is listed: linked into its parent's catalog. */
  async folderExists(folder: string): Promise<boolean> {
    const [parent, base] = folder.includes('/') ? [folder.slice(0, folder.lastIndexOf('/')), folder.slice(folder.lastIndexOf('/') + 1)] : ['', folder];
    return !!(await readCatalog(this.backend, this.user, parent)).folders[base];
  }

  /** Makes `folder` (and its parents) a listed folder even while empty: an empty folder made
   *  on purpose. Making one that exists changes nothing but its being kept. */
  async makeFolder(folder: string): Promise<void> {
    await keepFolder(this.backend, this.user, folder, true, this.repo.linked);
  }

  /**
   * Deletes `folder`: every file under it (as `remove` does, each file's every version) and
   * every folder kept under it, so the folder leaves its parent's listing. Returns the names of
   * the files removed. A file that lands in it meanwhile stays, and so does its folder. With
   * `emptyOnly`, only a folder with no file under it, and no file is removed.
   */
  async removeFolder(folder: string, o: { emptyOnly?: boolean } = {}): Promise<string[]> {
    if (!(await this.folderExists(folder))) throw new ProtocolError(ErrorCode.NotFound, `no folder ${folder}/`);
    const { files, folders } = await this.listing.tree(folder);
    // emptyOnly (the sync engine's rmdir): a folder that holds a file is refused, and no file
    // is ever removed; a file landing after this look relinks the folder (pruning is safe
    // against writers, catalog.ts), so nothing another device writes meanwhile is lost
    if (o.emptyOnly && files.length) throw new ProtocolError(ErrorCode.Inconsistent, `${folder}/ is not empty`);
    const removed: string[] = [];
    for (const f of o.emptyOnly ? [] : files) {
      try {
        await this.remove(f.name);
        removed.push(f.name);
      } catch (e) {
        // removed by another client meanwhile
        if (!(e instanceof ProtocolError && e.code === ErrorCode.NotFound)) throw e;
      }
    }
    // the deepest first, so each goes empty before its parent is looked at
    for (const f of [...folders].reverse()) await keepFolder(this.backend, this.user, f.slice(0, -1), false, this.repo.linked);
    await keepFolder(this.backend, this.user, folder, false, this.repo.linked);
    return removed;
  }

  /**
   * A value that changes whenever a commit, rename or delete by any process changes this
   * namespace's listing: its change marker (`changed/<user>`, written after every catalog swap:
   * catalog.ts `markChanged`), one read whatever the number of folders; '' while the namespace
   * has none. The live-updates stream polls it.
   */
  async changeToken(): Promise<string> {
    const h = await this.backend.getHead(changeMarkerKey(this.user));
    return h ? `${h.tag}:${Buffer.from(h.body).toString('hex')}` : '';
  }

  /** The head entry of a version; `head`: the file head as this session read it (else read). */
  private async entry(name: string, version: number, head?: FileHead | null): Promise<VersionEntry> {
    const e = (head === undefined ? await this.head(name) : head)?.versions.find((v) => v.version === version);
    if (!e) throw noVersion(name, version);
    return e;
  }

  async readVersion(name: string, version: number, head?: FileHead | null): Promise<{ index: ChunkIndex; layout: Layout }> {
    return this.repo.readIndex((await this.entry(name, version, head)).index, `${name} version ${version}`);
  }

  async readIndex(name: string, version: number, head?: FileHead | null): Promise<ChunkIndex> {
    return (await this.readVersion(name, version, head)).index;
  }

  /** Opens a version for reading (verified reads; nothing held open). */
  async openVersion(name: string, version: number, head?: FileHead | null): Promise<{ source: VersionSource; close: () => Promise<void> }> {
    return this.open(name, version, head, false);
  }

  /** A version's source; `asBasis`: reads of segments this process wrote come from memory
   *  (Repo.written; a basis' reads feed refined chunks, which a version stores whole). */
  private async open(name: string, version: number, head: FileHead | null | undefined, asBasis: boolean): Promise<{ source: VersionSource; close: () => Promise<void> }> {
    const entry = await this.entry(name, version, head);
    const what = `${name} version ${version}`;
    const { index, layout } = await this.repo.readIndex(entry.index, what);
    return { source: new VersionSource(this.backend, layout, index, what, entry.epoch ?? 0, this.repo.verified, entry.index, asBasis ? this.repo.written : undefined), close: async () => {} };
  }

  /**
   * Opens a version to build on, verified whole (read, or a stamp per segment showing it
   * unchanged since this process read it: docs/store.md §9), so that a damaged version is
   * found before anything is built on it. Damage is thrown (a `DamageError`); the caller
   * decides. `asked: false` (a push's basis): what this process verified before counts without
   * asking the segments' stamps, since the push's commit verifies every stretch it copies, after
   * every read (damage found only there fails the push, which the client sends again, §4).
   * `meanwhile` (a push's basis): the verification runs while the session does (`verified`,
   * which the commit awaits; `close` stops it), except for a version a read of this process
   * found damaged, verified first (§4 step 0).
   */
  async openBasis(name: string, version: number, head?: FileHead | null, o: { asked?: boolean; meanwhile?: boolean } = {}): Promise<{ source: VersionSource; verified: Promise<void>; close: () => Promise<void> }> {
    const { source } = await this.open(name, version, head, true);
    const whole = [{ offset: 0, length: source.size }];
    const stop = new AbortController();
    const verify = async () => {
      await source.verify(whole, o.asked ?? true, stop.signal);
      this.repo.verified.noteWhole(source.id!);
    };
    if (!o.meanwhile || this.repo.verified.foundDamaged(source.id!)) {
      await verify();
      return { source, verified: Promise.resolve(), close: async () => {} };
    }
    const verified = verify();
    verified.catch(() => {}); // (awaited by the commit, or by close)
    return {
      source,
      verified,
      close: async () => {
        stop.abort();
        await verified.catch(() => {});
      },
    };
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
   * is resumed where it stopped; otherwise a new version is started (see `create`). `seen`: the
   * file head as the session read it, for the commit's swap to start from.
   */
  sinkFor(name: string, basisVersion: number, params: ChunkParams, algo: number, expectLatest?: number, client?: string, seen?: SeenHead, modified?: number): SinkFor {
    const match = (digest: Uint8Array) => [basisVersion, Buffer.from(digest).toString('hex'), params.min, params.avg, params.max, params.op, params.every, algo].join(':');
    const key = uploadsKey(this.user, name);
    return async ({ digest }) => {
      const kept = digest && (await claimUpload(this.backend, key, match(digest)));
      const sink = this.create(name, expectLatest, client, kept || undefined, seen, modified);
      // the state this upload listed last (a checkpoint's): the next listing replaces it, and
      // only it (another upload of the same target lists its own under the same key)
      let listed: string | undefined;
      const list = async (held: Held) => {
        const state = await sink.state();
        const window = this.repo.settings.resumeWindowMs;
        const expires = Date.now() + window;
        // the file head is marked first: a listed upload's head is marked (docs/store.md §6)
        await markUploads(this.backend, fileHeadKey(this.user, name), expires, window);
        return (listed = await suspendUpload(this.backend, key, match(held.digest), expires, { ...state, count: held.count, hashes: held.hashes, digest: held.digest }, listed));
      };
      sink.suspend = async (held) => {
        // a swap that landed (or may have) references the upload's segments: nothing to keep
        if (!sink.landed) await list(held);
      };
      withCheckpoints(sink, list, (at) => forgetUpload(this.backend, key, match(at.digest), at.id));
      return kept ? { sink, held: { digest: kept.digest, count: kept.count, hashes: kept.hashes } } : { sink };
    };
  }

  /** Whether an interrupted upload of `name` built on `basisVersion` waits to be resumed: a
   *  new push of it then matches only once its whole Checksum List is known (its digest
   *  decides whether it resumes). `head`: the file head as the session has it; the uploads head
   *  is read only when it is marked as possibly holding one, or there is none (docs/store.md §6). */
  async holdsResumable(name: string, basisVersion: number, head: FileHead | null): Promise<boolean> {
    return mayHoldUploads(head) && holdsUpload(this.backend, uploadsKey(this.user, name), `${basisVersion}:`);
  }

  /** The stored file most similar to a target with these chunk FastFps, if any is similar
   *  enough (similarity.ts `SimilarFiles`). */
  similar(fastfps: Uint32Array): Promise<{ name: string; version: number } | null> {
    return this.similarFiles.similar(fastfps);
  }

  /**
   * Starts writing a new version of `name` (writer.ts). `expectLatest`, if given, is the
   * version the writer built on: the commit fails with StaleBasis if another commit landed
   * since. `resume`: an interrupted upload's state to continue. `seen`: the file head as the
   * caller read it (the commit's swap starts from it, `changeHead`). `modified`: the pusher's
   * modification time of the file (ms since the epoch), kept in the version's entry.
   */
  create(name: string, expectLatest?: number, client?: string, resume?: UploadState, seen?: SeenHead, modified?: number): VersionSink {
    return new VersionWriter(this, name, expectLatest, client, resume, seen, modified);
  }

  /** Writes many small files' new versions at once, each committed or refused on its own, all
   *  in one group commit (writer.ts `bulkVersions`). */
  bulk(entries: BulkEntry[], client?: string): Promise<BulkOutcome[]> {
    return bulkVersions(this, entries, client);
  }

  /** Records the similarity traits of `name`'s new latest version (its index `id`). */
  noteTraits(name: string, id: string, fastfps: Uint32Array): void {
    this.similarFiles.note(name, id, fastfps);
  }

  // ---- a file's history (history.ts: no bytes move) --------------------------------------------

  /** Removes one version, or the whole file (`removeVersions`); returns the versions removed. */
  remove(name: string, version?: number, latest?: number): Promise<number[]> {
    return removeVersions(this, name, version, latest);
  }

  /** Applies retention to `name` (`retainVersions`); returns how many versions went. */
  retain(name: string): Promise<number> {
    return retainVersions(this, name);
  }

  /** Adds a new version of `name` with the bytes of `version` (`restoreVersion`). */
  restore(name: string, version: number): Promise<number> {
    return restoreVersion(this, name, version);
  }

  /** Moves every version of `from` to `to` (`renameFile`); returns the number the latest
   *  version of `from` has at `to`. */
  rename(from: string, to: string, expect?: number): Promise<number> {
    return renameFile(this, from, to, expect);
  }

  /**
   * Why `name` cannot be a file (`as: 'file'`) or a folder (`as: 'folder'`) now, or null
   * (docs/store.md §11, "Files and folders"): a parent of it is a file with a version, or, for a
   * file, the folder `name/` lists something (a file, a subfolder, or kept); for a folder, the
   * file `name` has a version. Reads the heads of its parents and its own catalog (or head):
   * checked before a swap that makes a new name, not within it (no swap spans two heads).
   * `parents`: whether each parent is a file, shared by the checks of one bulk upload's entries
   * (writer.ts `bulkVersions`), so that a parent is read once per request, not once per entry.
   */
  async typeClash(name: string, as: 'file' | 'folder', parents?: ParentFiles): Promise<string | null> {
    const isFile = async (parent: string) => !!(await this.head(parent))?.versions.length;
    for (let k = name.indexOf('/'); k >= 0; k = name.indexOf('/', k + 1)) {
      const parent = name.slice(0, k);
      let file = parents?.get(parent);
      if (!file) {
        file = isFile(parent);
        parents?.set(parent, file);
      }
      if (await file) return `${parent} is a file`;
    }
    if (as === 'folder') return (await this.head(name))?.versions.length ? `${name} is a file` : null;
    let lists: boolean;
    try {
      const c = await readCatalog(this.backend, this.user, name);
      lists = !!c.kept || Object.keys(c.folders).length > 0 || Object.values(c.files).some((e) => e.versions > 0);
    } catch (e) {
      if (!(e instanceof DamageError)) throw e;
      lists = (await this.listing.folderEntries(name)).length > 0;
    }
    return lists ? `${name} is a folder` : null;
  }
}
