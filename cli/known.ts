/**
 * The CLI's known versions (shared/src/session/known.ts) on disk, so that a `dsync push` of a file the
 * previous run pushed or pulled goes up in one round trip: one file per server and name under
 * `$DSYNC_CACHE_DIR`, else `$XDG_CACHE_HOME/dsync/known`, else `~/.cache/dsync/known`. A file
 * that does not read back whole is ignored (and the push runs the three phases); the server's
 * root check covers the rest.
 *
 * With each pushed version of up to KNOWN_MAX_FILE bytes it keeps the version's bytes too (a
 * kept basis, shared/src/session/kept.ts) in a `.kept` file beside it, up to `keepMax` bytes of them
 * in all (`--keep-max`, default KEEP_MAX): the least recently used are dropped for room. The
 * header records their SHA-256; kept bytes that do not read back to it are dropped, never used.
 *
 * Beside them it keeps the record of uploads begun and not seen commit (`uploads`,
 * shared/src/session/known.ts UploadRecord): an `.upload` file per server and name, written before the
 * first byte of an upload that can leave a checkpoint goes out and removed at its Result. It
 * outlives a killed `dsync` (Ctrl-C, SIGKILL) and a lost connection, so the push run again says
 * it may resume; a push that finds none does not (one store request less on S3). A record that
 * cannot be read leaves the push to decide by the file's size; one that cannot be written costs
 * the bytes sent again if that upload is cut off.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { KNOWN_MAX_FILE, type KnownVersion, type KnownVersions, type UploadRecord } from '../shared/src/session/known.ts';
import { KEEP_MAX } from '../shared/src/base/limits.ts';

export function knownDir(env = process.env): string {
  if (env.DSYNC_CACHE_DIR) return env.DSYNC_CACHE_DIR;
  return path.join(env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'dsync', 'known');
}

const MAGIC = 'DSKN1';
const KEPT = '.kept';
const UPLOAD = '.upload';
/** How long the list of kept files read from the folder stands in for the folder (makeRoom). */
const KEPT_RESCAN_MS = 30_000;

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

export class FileKnown implements KnownVersions {
  constructor(
    private dir = knownDir(),
    private keepMax = KEEP_MAX,
  ) {}

  private file(key: string) {
    return path.join(this.dir, sha256(Buffer.from(key)));
  }

  readonly readsBack = true;

  keeps(size: number): boolean {
    return size <= Math.min(this.keepMax, KNOWN_MAX_FILE);
  }

  /** Uploads begun and not seen commit: the file `<key's hash>.upload` is there (its content,
   *  a JSON line, is for a person reading the folder). */
  readonly uploads: UploadRecord = {
    cutOff: (key) => {
      try {
        return statSync(this.file(key) + UPLOAD, { throwIfNoEntry: false }) !== undefined;
      } catch {
        return undefined; // the folder cannot be read: decide by size
      }
    },
    begin: (key) => {
      try {
        mkdirSync(this.dir, { recursive: true });
        writeFileSync(this.file(key) + UPLOAD, JSON.stringify({ magic: 'DSUP1', key, began: new Date().toISOString() }) + '\n');
      } catch {
        // not noted: if this upload is cut off, the push run again sends its bytes again
      }
    },
    end: (key) => {
      try {
        rmSync(this.file(key) + UPLOAD, { force: true });
      } catch {
        // left: the next push of this file says it may resume, one store request more
      }
    },
  };

  /** The kept bytes of `file` if they read back to their recorded hash and size; else none,
   *  and the file is dropped. */
  private readKept(file: string, h: { sha256: string }, size: number): Uint8Array | undefined {
    try {
      const b = readFileSync(file + KEPT);
      if (b.length === size && sha256(b) === h.sha256) {
        const now = new Date();
        utimesSync(file + KEPT, now, now); // recently used
        const k = this.keptFiles?.get(file + KEPT);
        if (k) k.used = now.getTime();
        return new Uint8Array(b.buffer, b.byteOffset, b.length);
      }
    } catch {
      return undefined; // none kept (dropped for room, or never written)
    }
    rmSync(file + KEPT, { force: true });
    this.keptFiles?.delete(file + KEPT);
    return undefined;
  }

  /** The kept files of the folder (path → size and when last used), read at most once every
   *  KEPT_RESCAN_MS: another `dsync` process may keep files in the same folder meanwhile, and a
   *  pass of thousands of files must not read the whole folder once per file. */
  private keptFiles: Map<string, { size: number; used: number }> | null = null;
  private keptReadAt = -Infinity;

  private keptNow(): Map<string, { size: number; used: number }> {
    if (this.keptFiles && performance.now() - this.keptReadAt < KEPT_RESCAN_MS) return this.keptFiles;
    const files = new Map<string, { size: number; used: number }>();
    for (const f of readdirSync(this.dir)) {
      if (!f.endsWith(KEPT)) continue;
      const st = statSync(path.join(this.dir, f), { throwIfNoEntry: false });
      if (st) files.set(path.join(this.dir, f), { size: st.size, used: st.mtimeMs });
    }
    this.keptReadAt = performance.now();
    return (this.keptFiles = files);
  }

  /** Drops the least recently used kept files until `room` more bytes fit under keepMax. */
  private makeRoom(room: number, except: string) {
    const files = this.keptNow();
    files.delete(except);
    let total = 0;
    for (const k of files.values()) total += k.size;
    if (total + room <= this.keepMax) return;
    for (const [f, k] of [...files].sort((a, b) => a[1].used - b[1].used)) {
      if (total + room <= this.keepMax) break;
      rmSync(f, { force: true });
      files.delete(f);
      total -= k.size;
    }
  }

  get(key: string): KnownVersion | undefined {
    let buf: Buffer;
    try {
      buf = readFileSync(this.file(key));
    } catch {
      return undefined;
    }
    try {
      // a JSON header line, then the lengths (4 bytes each) and the hashes, then (if any) the
      // finer cut's lengths and hash prefixes (8 bytes each)
      const nl = buf.indexOf(10);
      const h = JSON.parse(buf.subarray(0, nl).toString('utf8'));
      if (h.magic !== MAGIC || h.key !== key) return undefined;
      const body = buf.subarray(nl + 1);
      const m = h.fine?.n ?? 0;
      if (body.length !== h.n * (4 + h.H) + m * 12) return undefined;
      const u32 = (at: number, n: number) => {
        const a = new Uint32Array(n);
        Buffer.from(a.buffer).set(body.subarray(at, at + 4 * n));
        return a;
      };
      const v: KnownVersion = { version: h.version, root: Buffer.from(h.root, 'hex'), params: h.params, algo: h.algo, lengths: u32(0, h.n), hashes: new Uint8Array(body.subarray(h.n * 4, h.n * (4 + h.H))) };
      if (h.fine) v.fine = { params: h.fine.params, lengths: u32(h.n * (4 + h.H), m), prefixes: new Uint8Array(body.subarray(h.n * (4 + h.H) + 4 * m)) };
      if (h.kept) v.kept = this.readKept(this.file(key), h.kept, v.lengths.reduce((a, l) => a + l, 0));
      return v;
    } catch {
      return undefined;
    }
  }

  set(key: string, v: KnownVersion) {
    const n = v.lengths.length;
    const fine = v.fine && { params: v.fine.params, n: v.fine.lengths.length };
    const keep = v.kept && this.keeps(v.kept.length) ? v.kept : undefined;
    const kept = keep && { sha256: sha256(keep) };
    const head = JSON.stringify({ magic: MAGIC, key, version: v.version, root: Buffer.from(v.root).toString('hex'), params: v.params, algo: v.algo, n, H: n ? v.hashes.length / n : 0, fine, kept });
    const bytes = (a: Uint8Array | Uint32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const to = this.file(key);
    const tmp = `${to}.${process.pid}.tmp`;
    try {
      mkdirSync(this.dir, { recursive: true });
      rmSync(to + KEPT, { force: true }); // the previous version's bytes
      this.keptFiles?.delete(to + KEPT);
      if (keep) {
        this.makeRoom(keep.length, to + KEPT);
        writeFileSync(tmp, keep);
        renameSync(tmp, to + KEPT);
        this.keptFiles?.set(to + KEPT, { size: keep.length, used: Date.now() });
      }
      writeFileSync(tmp, Buffer.concat([Buffer.from(head + '\n'), bytes(v.lengths), v.hashes, ...(v.fine ? [bytes(v.fine.lengths), v.fine.prefixes] : [])]));
      renameSync(tmp, to);
    } catch {
      rmSync(tmp, { force: true }); // a cache that cannot be written only costs a round trip
    }
  }

  delete(key: string) {
    rmSync(this.file(key), { force: true });
    rmSync(this.file(key) + KEPT, { force: true });
    this.keptFiles?.delete(this.file(key) + KEPT);
  }
}
