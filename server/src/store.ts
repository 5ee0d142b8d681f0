/**
 * The embedded store: a local data directory holding every version of every file, each with
 * the chunk index computed when it was written (docs/protocol.md, "Store").
 *
 *   <root>/files/<encoded name>/name      the file's name (UTF-8)
 *   <root>/files/<encoded name>/v<N>.dat  version N's bytes
 *   <root>/files/<encoded name>/v<N>.idx  version N's chunk index
 *   <root>/tmp/                           uploads in progress (emptied at start-up)
 *
 * A version exists once its .dat is in place; its .idx is renamed in before it, and both are
 * fsynced first, so a crash at any point leaves every committed version intact and at most
 * an orphan temporary file, which `open` removes.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants, promises as fs } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { type ChunkIndex, type Source } from '../../shared/src/chunk-index.ts';
import { strong_hash } from '../../wasm/pkg/dsync_wasm.js';
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
const INDEX_FORMAT = 1;

/** Maps a name to a directory name: [A-Za-z0-9_-] kept, every other byte as %XX; long names hashed. */
export function encodeName(name: string): string {
  let out = '';
  for (const b of Buffer.from(name, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9_-]/.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out.length <= 200 ? out : 'h-' + createHash('sha256').update(name).digest('hex');
}

/** Serialises the index of one version (format in docs/protocol.md, "Store"). */
export function encodeIndex(ix: ChunkIndex): Buffer {
  const H = hashLength(ix.algo);
  const n = ix.lengths.length;
  const head = 4 + 4 + 12 + 8 + 4 + H;
  const body = n * (8 + H);
  const buf = Buffer.alloc(head + body + H);
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
  // A trailing checksum: the hash of everything before it, so a damaged index is detected.
  buf.set(strong_hash(ix.algo, buf.subarray(0, o)), o);
  return buf;
}

export function decodeIndex(buf: Buffer): ChunkIndex {
  const corrupt = (why: string) => new ProtocolError(ErrorCode.Internal, `damaged chunk index: ${why}`);
  if (buf.length < 32 || buf.readUInt32LE(0) !== INDEX_MAGIC || buf[4] !== INDEX_FORMAT) throw corrupt('bad header');
  const algo = buf[5];
  const H = hashLength(algo);
  const params = { op: buf[6], every: buf[7], min: buf.readUInt32LE(8), avg: buf.readUInt32LE(12), max: buf.readUInt32LE(16) };
  const size = Number(buf.readBigUInt64LE(20));
  const n = buf.readUInt32LE(28);
  const head = 32 + H;
  if (buf.length !== head + n * (8 + H) + H) throw corrupt('wrong length');
  const end = buf.length - H;
  if (!Buffer.from(strong_hash(algo, buf.subarray(0, end))).equals(buf.subarray(end))) throw corrupt('checksum mismatch');
  const copy = (o: number, len: number) => new Uint8Array(buf.subarray(o, o + len));
  const lengths = new Uint32Array(copy(head, 4 * n).buffer);
  const fastfps = new Uint32Array(copy(head + 4 * n, 4 * n).buffer);
  return { params, algo, size, lengths, fastfps, hashes: copy(head + 8 * n, n * H), root: copy(32, H) };
}

/** A Source over an open file. */
export function fileSource(fh: FileHandle, size: number): Source {
  return {
    size,
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

/** Bytes gathered before a write to a new version's file. */
const WRITE_BUFFER = 1 << 20;

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
   * target (same root, basis, chunking and algorithm) is resumed where it stopped, otherwise a
   * new version is started (see `create`).
   */
  sinkFor(name: string, basisVersion: number, params: ChunkParams, algo: number, expectLatest?: number): SinkFor {
    return async ({ root }) => {
      const key = [name, basisVersion, Buffer.from(root).toString('hex'), params.min, params.avg, params.max, params.op, params.every, algo].join('\0');
      const kept = this.suspended.get(key);
      if (kept) {
        this.suspended.delete(key);
        clearTimeout(kept.timer);
        return { sink: kept.sink, held: kept.held };
      }
      const sink = await this.create(name, expectLatest);
      sink.suspend = async (held) => {
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
    await fs.mkdir(path.join(this.root, 'files'), { recursive: true });
    await fs.rm(path.join(this.root, 'tmp'), { recursive: true, force: true });
    await fs.mkdir(path.join(this.root, 'tmp'), { recursive: true });
    for (const d of await fs.readdir(path.join(this.root, 'files'))) {
      const dir = path.join(this.root, 'files', d);
      const names = new Set(await fs.readdir(dir));
      for (const f of names) {
        const m = /^v(\d+)\.idx$/.exec(f);
        if ((m && !names.has(`v${m[1]}.dat`)) || f.startsWith('.tmp')) await fs.rm(path.join(dir, f), { force: true });
      }
    }
    return this;
  }

  private dir(name: string) {
    return path.join(this.root, 'files', encodeName(name));
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
      .map((f) => /^v(\d+)\.dat$/.exec(f))
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
      const st = await fs.stat(this.dataPath(name, v));
      const ix = await this.readIndex(name, v);
      out.push({ version: v, size: st.size, mtime: st.mtime.toISOString(), root: Buffer.from(ix.root).toString('hex'), algo: ix.algo });
    }
    return out;
  }

  async list(): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    for (const d of (await fs.readdir(path.join(this.root, 'files'))).sort()) {
      let name: string;
      try {
        name = await fs.readFile(path.join(this.root, 'files', d, 'name'), 'utf8');
      } catch {
        continue;
      }
      const vs = await this.versionNumbers(name);
      if (!vs.length) continue;
      const st = await fs.stat(this.dataPath(name, vs[vs.length - 1]));
      out.push({ name, latest: vs[vs.length - 1], size: st.size, versions: vs.length, mtime: st.mtime.toISOString() });
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  dataPath(name: string, version: number) {
    return path.join(this.dir(name), `v${version}.dat`);
  }

  async readIndex(name: string, version: number): Promise<ChunkIndex> {
    return decodeIndex(await fs.readFile(path.join(this.dir(name), `v${version}.idx`)));
  }

  /** Opens a version for reading; `close` it when done. */
  async openVersion(name: string, version: number): Promise<{ source: Source; close: () => Promise<void> }> {
    let fh: FileHandle;
    try {
      fh = await fs.open(this.dataPath(name, version), constants.O_RDONLY);
    } catch {
      throw new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);
    }
    const { size } = await fh.stat();
    return { source: fileSource(fh, size), close: () => fh.close() };
  }

  /**
   * Starts writing a new version of `name`. `expectLatest`, if given, is the version the writer
   * built on: the commit fails with StaleBasis if another commit landed since.
   */
  async create(name: string, expectLatest?: number): Promise<Sink & { flush(): Promise<void> }> {
    const tmp = path.join(this.root, 'tmp', `${Date.now()}-${randomBytes(6).toString('hex')}`);
    const fh = await fs.open(tmp, 'wx');
    let closed = false;
    // Chunks arrive a few KiB at a time; gather them into large writes (one system call and
    // one promise per MiB instead of per chunk).
    const buf = Buffer.allocUnsafe(WRITE_BUFFER);
    let used = 0;
    const writeAll = async (b: Uint8Array) => {
      for (let done = 0; done < b.length; ) done += (await fh.write(b, done, b.length - done)).bytesWritten;
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
    return {
      write: async (bytes) => {
        if (used + bytes.length > WRITE_BUFFER) await flush();
        if (bytes.length >= WRITE_BUFFER) return writeAll(bytes);
        buf.set(bytes, used);
        used += bytes.length;
      },
      flush,
      commit: async (index) => {
        await flush();
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
          await writeAtomic(path.join(dir, `v${v}.idx`), encodeIndex(index));
          await fs.rename(tmp, path.join(dir, `v${v}.dat`));
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

async function syncDir(dir: string) {
  const fh = await fs.open(dir, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
