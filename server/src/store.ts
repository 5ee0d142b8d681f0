/**
 * The embedded store: a local data directory holding every version of every file, each with
 * the chunk index computed when it was written (docs/protocol.md, "Store").
 *
 *   <root>/files/<encoded name>/name      the file's name (UTF-8)
 *   <root>/files/<encoded name>/v<N>.dat  the bytes version N added (its segment)
 *   <root>/files/<encoded name>/v<N>.idx  version N's chunk index and layout
 *   <root>/tmp/                           uploads in progress (emptied at start-up)
 *
 * A version references the chunks it shares with its basis instead of copying them: its
 * layout lists extents, each a piece of some version's segment (its own, holding the Delta
 * Bytes, or an earlier one's). Segments are written once and never change, so a sync costs
 * the server work in proportion to what changed, not to the file's size.
 *
 * A version exists once its .idx is in place; its segment is renamed in before it, and both
 * are fsynced first, so a crash at any point leaves every committed version intact and at
 * most an orphan segment or temporary file, which `open` removes.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants, promises as fs } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { type ChunkIndex, type Source } from '../../shared/src/chunk-index.ts';
import type { HashPool } from '../../shared/src/hash-pool.ts';
import { strong_hash } from '../../shared/src/wasm.ts';
import { ErrorCode, ProtocolError, hashLength } from '../../shared/src/protocol.ts';
import type { Held, Sink, SinkFor } from '../../shared/src/session.ts';
import { MIN_SHARED, sharedTraits, traitsOf } from './similarity.ts';
import type { ChunkParams } from '../../shared/src/protocol.ts';

export interface VersionInfo {
  version: number;
  size: number;
  mtime: string;
  /** hex of the root hash and its algorithm */
  root: string;
  algo: number;
}
export interface FileInfo {
  name: string;
  latest: number;
  size: number;
  versions: number;
  mtime: string;
}

const INDEX_MAGIC = 0x58495344; // "DSIX" little-endian
/** 1: the version's .dat holds all of its bytes (no layout); 2: a layout follows the hashes */
const INDEX_FORMAT = 2;

/** `length` bytes at `offset` of segment `seg` (an index into Layout.segments). */
export interface Extent {
  seg: number;
  offset: number;
  length: number;
}
/** Where a version's bytes are: its extents in file order, over segment files named relative
 *  to the namespace's files/ directory ("<encoded name>/v<N>.dat"). */
export interface Layout {
  segments: string[];
  extents: Extent[];
}
const SEGMENT_PATH = /^[A-Za-z0-9_%-]+\/v[1-9][0-9]*\.dat$/;

/** Maps a name to a directory name: [A-Za-z0-9_-] kept, every other byte as %XX; long names hashed. */
export function encodeName(name: string): string {
  let out = '';
  for (const b of Buffer.from(name, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9_-]/.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out.length <= 200 ? out : 'h-' + createHash('sha256').update(name).digest('hex');
}

/** Serialises the index and layout of one version (format in docs/protocol.md, "Store"). */
export function encodeVersion(ix: ChunkIndex, layout: Layout): Buffer {
  const H = hashLength(ix.algo);
  const n = ix.lengths.length;
  const head = 4 + 4 + 12 + 8 + 4 + H;
  const body = n * (8 + H);
  const segs = layout.segments.map((p) => Buffer.from(p, 'utf8'));
  const lay = 4 + segs.reduce((a, b) => a + 2 + b.length, 0) + 4 + 20 * layout.extents.length;
  const buf = Buffer.alloc(head + body + lay + H);
  let o = buf.writeUInt32LE(INDEX_MAGIC, 0);
  o = buf.writeUInt8(INDEX_FORMAT, o);
  o = buf.writeUInt8(ix.algo, o);
  o = buf.writeUInt8(ix.params.op, o);
  o = buf.writeUInt8(ix.params.every, o);
  o = buf.writeUInt32LE(ix.params.min, o);
  o = buf.writeUInt32LE(ix.params.avg, o);
  o = buf.writeUInt32LE(ix.params.max, o);
  o = buf.writeBigUInt64LE(BigInt(ix.size), o);
  o = buf.writeUInt32LE(n, o);
  buf.set(ix.root, o);
  o += H;
  Buffer.from(ix.lengths.buffer, ix.lengths.byteOffset, 4 * n).copy(buf, o);
  o += 4 * n;
  Buffer.from(ix.fastfps.buffer, ix.fastfps.byteOffset, 4 * n).copy(buf, o);
  o += 4 * n;
  buf.set(ix.hashes, o);
  o += n * H;
  o = buf.writeUInt32LE(segs.length, o);
  for (const p of segs) {
    o = buf.writeUInt16LE(p.length, o);
    o += p.copy(buf, o);
  }
  o = buf.writeUInt32LE(layout.extents.length, o);
  for (const e of layout.extents) {
    o = buf.writeUInt32LE(e.seg, o);
    o = buf.writeBigUInt64LE(BigInt(e.offset), o);
    o = buf.writeBigUInt64LE(BigInt(e.length), o);
  }
  // A trailing checksum: the hash of everything before it, so a damaged index is detected.
  buf.set(strong_hash(ix.algo, buf.subarray(0, o)), o);
  return buf;
}

/**
 * Parses a version's .idx. `self` is the version's own segment path, the whole layout of a
 * format-1 index (written before layouts existed: its .dat holds every byte).
 */
export function decodeVersion(buf: Buffer, self: string): { index: ChunkIndex; layout: Layout } {
  const corrupt = (why: string) => new ProtocolError(ErrorCode.Internal, `damaged chunk index: ${why}`);
  if (buf.length < 32 || buf.readUInt32LE(0) !== INDEX_MAGIC || (buf[4] !== 1 && buf[4] !== 2)) throw corrupt('bad header');
  const algo = buf[5];
  const H = hashLength(algo);
  const params = { op: buf[6], every: buf[7], min: buf.readUInt32LE(8), avg: buf.readUInt32LE(12), max: buf.readUInt32LE(16) };
  const size = Number(buf.readBigUInt64LE(20));
  const n = buf.readUInt32LE(28);
  const head = 32 + H;
  const body = head + n * (8 + H);
  if (buf.length < body + H) throw corrupt('wrong length');
  const end = buf.length - H;
  if (!Buffer.from(strong_hash(algo, buf.subarray(0, end))).equals(buf.subarray(end))) throw corrupt('checksum mismatch');
  const copy = (o: number, len: number) => new Uint8Array(buf.subarray(o, o + len));
  const lengths = new Uint32Array(copy(head, 4 * n).buffer);
  const fastfps = new Uint32Array(copy(head + 4 * n, 4 * n).buffer);
  const index = { params, algo, size, lengths, fastfps, hashes: copy(head + 8 * n, n * H), root: copy(32, H) };
  if (buf[4] === 1) {
    if (end !== body) throw corrupt('wrong length');
    return { index, layout: { segments: [self], extents: size ? [{ seg: 0, offset: 0, length: size }] : [] } };
  }
  // Format 2: the layout. Reads past the end throw RangeError: a truncated index.
  try {
    let o = body;
    const segments: string[] = [];
    const nSegs = buf.readUInt32LE(o);
    o += 4;
    for (let k = 0; k < nSegs; k++) {
      const len = buf.readUInt16LE(o);
      const p = buf.toString('utf8', o + 2, o + 2 + len);
      if (!SEGMENT_PATH.test(p)) throw corrupt(`bad segment path ${JSON.stringify(p)}`);
      segments.push(p);
      o += 2 + len;
    }
    const nExtents = buf.readUInt32LE(o);
    o += 4;
    const extents: Extent[] = [];
    let total = 0;
    for (let k = 0; k < nExtents; k++, o += 20) {
      const e = { seg: buf.readUInt32LE(o), offset: Number(buf.readBigUInt64LE(o + 4)), length: Number(buf.readBigUInt64LE(o + 12)) };
      if (e.seg >= segments.length || e.length === 0) throw corrupt('bad extent');
      extents.push(e);
      total += e.length;
    }
    if (o !== end || total !== size) throw corrupt('the layout does not add up to the file');
    return { index, layout: { segments, extents } };
  } catch (e) {
    throw e instanceof ProtocolError ? e : corrupt('truncated layout');
  }
}

/** A Source over an open file; with a hash pool, its chunks are hashed by the pool's workers,
 *  which read the file through the same descriptor. */
export function fileSource(fh: FileHandle, size: number, pool?: HashPool | null): Source {
  return {
    size,
    ...(pool && { hashRun: (offset: number, lengths: Uint32Array, algo: number) => pool.hash({ fd: fh.fd }, offset, lengths, algo) }),
    async read(offset, length, into) {
      const buf = into && into.length >= length ? into : Buffer.allocUnsafe(length);
      let done = 0;
      while (done < length) {
        const { bytesRead } = await fh.read(buf, done, length - done, offset + done);
        if (bytesRead === 0) break;
        done += bytesRead;
      }
      return new Uint8Array(buf.buffer, buf.byteOffset, done);
    },
  };
}

/**
 * A stored version's bytes, read through its layout. Segment files are opened on first use
 * and closed by `close`.
 */
export class VersionSource implements Source {
  readonly size: number;
  /** the file offset where each extent starts, plus the size at the end */
  private starts: Float64Array;
  private handles = new Map<number, Promise<FileHandle>>();

  constructor(
    /** the namespace's files/ directory, which segment paths are relative to */
    readonly filesDir: string,
    readonly layout: Layout,
  ) {
    this.starts = new Float64Array(layout.extents.length + 1);
    layout.extents.forEach((e, k) => (this.starts[k + 1] = this.starts[k] + e.length));
    this.size = this.starts[layout.extents.length];
  }

  /** The extents covering bytes [offset, offset + length) of this version, trimmed to it. */
  slice(offset: number, length: number): { segment: string; offset: number; length: number }[] {
    const out = [];
    for (let k = this.extentAt(offset), pos = offset; pos < offset + length; k++) {
      const e = this.layout.extents[k];
      const skip = pos - this.starts[k];
      const n = Math.min(e.length - skip, offset + length - pos);
      out.push({ segment: this.layout.segments[e.seg], offset: e.offset + skip, length: n });
      pos += n;
    }
    return out;
  }

  async read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array> {
    length = Math.max(0, Math.min(length, this.size - offset));
    const buf = into && into.length >= length ? into : Buffer.allocUnsafe(length);
    let done = 0;
    for (let k = this.extentAt(offset); done < length; k++) {
      const e = this.layout.extents[k];
      const skip = offset + done - this.starts[k];
      const n = Math.min(e.length - skip, length - done);
      const fh = await this.handle(e.seg);
      for (let got = 0; got < n; ) {
        const { bytesRead } = await fh.read(buf, done + got, n - got, e.offset + skip + got);
        if (bytesRead === 0) throw new ProtocolError(ErrorCode.Internal, `segment ${this.layout.segments[e.seg]} is shorter than its layout says`);
        got += bytesRead;
      }
      done += n;
    }
    return new Uint8Array(buf.buffer, buf.byteOffset, length);
  }

  async close() {
    const hs = [...this.handles.values()];
    this.handles.clear();
    for (const h of hs) await (await h.catch(() => null))?.close();
  }

  /** Index of the extent holding byte `offset` (binary search over `starts`). */
  private extentAt(offset: number): number {
    let lo = 0;
    let hi = this.layout.extents.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.starts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private handle(seg: number): Promise<FileHandle> {
    let h = this.handles.get(seg);
    if (!h) this.handles.set(seg, (h = fs.open(path.join(this.filesDir, this.layout.segments[seg]), constants.O_RDONLY)));
    return h;
  }
}

/** Bytes gathered before a write to a new version's file. */
const WRITE_BUFFER = 1 << 20;
/** Bytes written between two background flushes of an upload's segment to disk. */
const SYNC_EVERY = 32 << 20;

/** Interrupted uploads kept for resuming, per namespace; the oldest is dropped beyond this. */
const MAX_SUSPENDED = 32;

export class Store {
  private locks = new Map<string, Promise<void>>();
  private suspended = new Map<string, { sink: Sink; held: Held; timer: NodeJS.Timeout }>();
  /** similarity traits of each file's latest version, built on first use, kept on commit */
  private traits: Map<string, { version: number; traits: Uint32Array }> | null = null;

  /** `resumeWindowMs`: how long an interrupted upload waits for its client to come back. */
  constructor(
    readonly root: string,
    private resumeWindowMs = 600_000,
  ) {}

  /**
   * The sink for a push of `name` built on `basisVersion`: an interrupted upload of the same
   * target (same Checksum List, basis, chunking and algorithm) is resumed where it stopped, otherwise a
   * new version is started (see `create`).
   */
  sinkFor(name: string, basisVersion: number, params: ChunkParams, algo: number, expectLatest?: number): SinkFor {
    const keyOf = (digest: Uint8Array) => [this.resumePrefix(name, basisVersion), Buffer.from(digest).toString('hex'), params.min, params.avg, params.max, params.op, params.every, algo].join('\0');
    return async ({ digest }) => {
      const kept = digest && this.suspended.get(keyOf(digest));
      if (kept) {
        this.suspended.delete(keyOf(digest));
        clearTimeout(kept.timer);
        return { sink: kept.sink, held: kept.held };
      }
      const sink = await this.create(name, expectLatest);
      sink.suspend = async (held) => {
        const key = keyOf(held.digest);
        await sink.flush();
        if (this.suspended.size >= MAX_SUSPENDED) {
          const [oldKey, old] = this.suspended.entries().next().value!;
          this.suspended.delete(oldKey);
          clearTimeout(old.timer);
          await old.sink.abort();
        }
        const timer = setTimeout(() => {
          this.suspended.delete(key);
          void sink.abort();
        }, this.resumeWindowMs);
        timer.unref();
        this.suspended.set(key, { sink, held, timer });
      };
      return { sink };
    };
  }

  /** Whether an interrupted upload of `name` built on `basisVersion` waits to be resumed: a
   *  new push of it then matches only once its whole Checksum List is known (its digest
   *  decides whether it resumes). */
  holdsResumable(name: string, basisVersion: number): boolean {
    const prefix = this.resumePrefix(name, basisVersion) + '\0';
    for (const key of this.suspended.keys()) if (key.startsWith(prefix)) return true;
    return false;
  }

  private resumePrefix(name: string, basisVersion: number) {
    return `${name}\0${basisVersion}`;
  }

  /** The stored file most similar to a target with these chunk FastFps, if any is similar enough. */
  async similar(fastfps: Uint32Array): Promise<{ name: string; version: number } | null> {
    if (fastfps.length < MIN_SHARED) return null;
    if (!this.traits) {
      const all = new Map<string, { version: number; traits: Uint32Array }>();
      for (const f of await this.list()) all.set(f.name, { version: f.latest, traits: traitsOf((await this.readIndex(f.name, f.latest)).fastfps) });
      this.traits ??= all;
    }
    const want = traitsOf(fastfps);
    let best: string | null = null;
    let bestShared = MIN_SHARED - 1;
    for (const [name, t] of this.traits) {
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

  /** Aborts every interrupted upload (server shutdown). */
  async dropSuspended() {
    for (const { sink, timer } of this.suspended.values()) {
      clearTimeout(timer);
      await sink.abort();
    }
    this.suspended.clear();
  }

  /** Creates the directories and removes what a crash left behind. */
  async open(): Promise<this> {
    await fs.mkdir(this.filesDir, { recursive: true });
    await fs.rm(path.join(this.root, 'tmp'), { recursive: true, force: true });
    await fs.mkdir(path.join(this.root, 'tmp'), { recursive: true });
    for (const d of await fs.readdir(this.filesDir)) {
      const dir = path.join(this.filesDir, d);
      const names = new Set(await fs.readdir(dir));
      for (const f of names) {
        const m = /^v(\d+)\.(dat|idx)$/.exec(f);
        // a segment whose commit did not reach its .idx; a format-1 .idx (renamed in before
        // its .dat) whose .dat never came; temporary files
        const orphan =
          (m && m[2] === 'dat' && !names.has(`v${m[1]}.idx`)) ||
          (m && m[2] === 'idx' && !names.has(`v${m[1]}.dat`) && (await indexFormat(path.join(dir, f))) === 1) ||
          f.startsWith('.tmp');
        if (orphan) await fs.rm(path.join(dir, f), { force: true });
      }
    }
    return this;
  }

  private get filesDir() {
    return path.join(this.root, 'files');
  }

  private dir(name: string) {
    return path.join(this.filesDir, encodeName(name));
  }

  /** Version numbers of `name`, ascending (empty if it does not exist). */
  async versionNumbers(name: string): Promise<number[]> {
    let entries: string[];
    try {
      entries = await fs.readdir(this.dir(name));
    } catch {
      return [];
    }
    return entries
      .map((f) => /^v(\d+)\.idx$/.exec(f))
      .filter((m): m is RegExpExecArray => !!m)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
  }

  async latest(name: string): Promise<number> {
    const v = await this.versionNumbers(name);
    return v.length ? v[v.length - 1] : 0;
  }

  async versions(name: string): Promise<VersionInfo[]> {
    const out: VersionInfo[] = [];
    for (const v of await this.versionNumbers(name)) {
      const st = await fs.stat(this.indexPath(name, v));
      const ix = await this.readIndex(name, v);
      out.push({ version: v, size: ix.size, mtime: st.mtime.toISOString(), root: Buffer.from(ix.root).toString('hex'), algo: ix.algo });
    }
    return out;
  }

  async list(): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    for (const d of (await fs.readdir(this.filesDir)).sort()) {
      let name: string;
      try {
        name = await fs.readFile(path.join(this.filesDir, d, 'name'), 'utf8');
      } catch {
        continue;
      }
      const vs = await this.versionNumbers(name);
      if (!vs.length) continue;
      const latest = vs[vs.length - 1];
      const st = await fs.stat(this.indexPath(name, latest));
      out.push({ name, latest, size: (await this.readIndex(name, latest)).size, versions: vs.length, mtime: st.mtime.toISOString() });
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The version's chunk index and layout file. */
  indexPath(name: string, version: number) {
    return path.join(this.dir(name), `v${version}.idx`);
  }

  async readVersion(name: string, version: number): Promise<{ index: ChunkIndex; layout: Layout }> {
    return decodeVersion(await fs.readFile(this.indexPath(name, version)), `${encodeName(name)}/v${version}.dat`);
  }

  async readIndex(name: string, version: number): Promise<ChunkIndex> {
    return (await this.readVersion(name, version)).index;
  }

  /** Opens a version for reading; `close` it when done. */
  async openVersion(name: string, version: number): Promise<{ source: VersionSource; close: () => Promise<void> }> {
    let layout: Layout;
    try {
      layout = (await this.readVersion(name, version)).layout;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);
      throw e;
    }
    const source = new VersionSource(this.filesDir, layout);
    return { source, close: () => source.close() };
  }

  /** The bytes of a version, in pieces of up to `piece` bytes. */
  async *stream(name: string, version: number, piece = 1 << 20): AsyncGenerator<Uint8Array> {
    const { source, close } = await this.openVersion(name, version);
    try {
      for (let o = 0; o < source.size; o += piece) yield await source.read(o, Math.min(piece, source.size - o));
    } finally {
      await close();
    }
  }

  /** The whole bytes of a version (for small files and tests; `stream` for the rest). */
  async bytes(name: string, version: number): Promise<Buffer> {
    const parts: Uint8Array[] = [];
    for await (const p of this.stream(name, version)) parts.push(p);
    return Buffer.concat(parts);
  }

  /**
   * Starts writing a new version of `name`. `expectLatest`, if given, is the version the writer
   * built on: the commit fails with StaleBasis if another commit landed since. Written bytes go
   * to the new version's segment; bytes copied from a stored version are referenced, not copied.
   */
  async create(name: string, expectLatest?: number): Promise<Sink & { flush(): Promise<void> }> {
    const tmp = path.join(this.root, 'tmp', `${Date.now()}-${randomBytes(6).toString('hex')}`);
    const fh = await fs.open(tmp, 'wx');
    let closed = false;
    // segments[0] is the new version's own, named at commit when its number is known
    const layout: Layout = { segments: [''], extents: [] };
    const segIndex = new Map<string, number>();
    let segSize = 0;
    const append = (seg: number, offset: number, length: number) => {
      const last = layout.extents[layout.extents.length - 1];
      if (last && last.seg === seg && last.offset + last.length === offset) last.length += length;
      else layout.extents.push({ seg, offset, length });
    };
    // Chunks arrive a few KiB at a time; gather them into large writes (one system call and
    // one promise per MiB instead of per chunk).
    const buf = Buffer.allocUnsafe(WRITE_BUFFER);
    let used = 0;
    // Written bytes are flushed to disk in the background every SYNC_EVERY bytes, so that the
    // commit's fsync does not find a large upload's every byte still to write.
    let unsynced = 0;
    let syncing: Promise<void> | null = null;
    const writeAll = async (b: Uint8Array) => {
      for (let done = 0; done < b.length; ) done += (await fh.write(b, done, b.length - done)).bytesWritten;
      unsynced += b.length;
      if (unsynced >= SYNC_EVERY && !syncing) {
        unsynced = 0;
        const p: Promise<void> = fh.datasync().finally(() => {
          if (syncing === p) syncing = null;
        });
        p.catch(() => {}); // awaited, with its error, by the commit
        syncing = p;
      }
    };
    const flush = async () => {
      if (used) await writeAll(buf.subarray(0, used));
      used = 0;
    };
    const close = async () => {
      if (!closed) {
        closed = true;
        await fh.close();
      }
    };
    const write = async (bytes: Uint8Array) => {
      if (!bytes.length) return;
      append(0, segSize, bytes.length);
      segSize += bytes.length;
      if (used + bytes.length > WRITE_BUFFER) await flush();
      if (bytes.length >= WRITE_BUFFER) return writeAll(bytes);
      buf.set(bytes, used);
      used += bytes.length;
    };
    return {
      write,
      copy: async (from, offset, length) => {
        if (!(from instanceof VersionSource) || from.filesDir !== this.filesDir) return write(await from.read(offset, length));
        for (const piece of from.slice(offset, length)) {
          let seg = segIndex.get(piece.segment);
          if (seg === undefined) segIndex.set(piece.segment, (seg = layout.segments.push(piece.segment) - 1));
          append(seg, piece.offset, piece.length);
        }
      },
      flush,
      commit: async (index) => {
        await flush();
        await syncing;
        await fh.sync();
        await close();
        return this.withLock(name, async () => {
          const latest = await this.latest(name);
          if (expectLatest !== undefined && latest !== expectLatest) {
            throw new ProtocolError(ErrorCode.StaleBasis, `${name} is at version ${latest}, not ${expectLatest}: sync again against the latest version`);
          }
          const v = latest + 1;
          const dir = this.dir(name);
          if (latest === 0) {
            await fs.mkdir(dir, { recursive: true });
            await writeAtomic(path.join(dir, 'name'), Buffer.from(name, 'utf8'));
          }
          layout.segments[0] = `${encodeName(name)}/v${v}.dat`;
          if (segSize) await fs.rename(tmp, path.join(dir, `v${v}.dat`));
          else await fs.rm(tmp, { force: true });
          await writeAtomic(this.indexPath(name, v), encodeVersion(index, layout));
          await syncDir(dir);
          this.traits?.set(name, { version: v, traits: traitsOf(index.fastfps) });
          return v;
        });
      },
      abort: async () => {
        await close();
        await fs.rm(tmp, { force: true });
      },
    };
  }

  /** Runs `fn` with the per-name commit lock held (one process owns a data directory). */
  private async withLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(name) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const chained = prev.then(() => mine);
    this.locks.set(name, chained);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.locks.get(name) === chained) this.locks.delete(name);
    }
  }
}

/** Writes a file via a fsynced temporary and rename, so readers see the old or the new bytes. */
async function writeAtomic(file: string, data: Buffer) {
  const tmp = path.join(path.dirname(file), `.tmp-${randomBytes(6).toString('hex')}`);
  const fh = await fs.open(tmp, 'wx');
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fs.rename(tmp, file);
}

/** The format byte of an index file (0 if unreadable). */
async function indexFormat(file: string): Promise<number> {
  const fh = await fs.open(file, constants.O_RDONLY);
  try {
    const head = Buffer.alloc(5);
    await fh.read(head, 0, 5, 0);
    return head.readUInt32LE(0) === INDEX_MAGIC ? head[4] : 0;
  } finally {
    await fh.close();
  }
}

async function syncDir(dir: string) {
  const fh = await fs.open(dir, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
