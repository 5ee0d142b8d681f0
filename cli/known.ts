/**
 * The CLI's known versions (shared/src/known.ts) on disk, so that a `dsync push` of a file the
 * previous run pushed or pulled goes up in one round trip: one file per server and name under
 * `$DSYNC_CACHE_DIR`, else `$XDG_CACHE_HOME/dsync/known`, else `~/.cache/dsync/known`. A file
 * that does not read back whole is ignored (and the push runs the three phases); the server's
 * root check covers the rest.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import type { KnownVersion, KnownVersions } from '../shared/src/known.ts';

export function knownDir(env = process.env): string {
  if (env.DSYNC_CACHE_DIR) return env.DSYNC_CACHE_DIR;
  return path.join(env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'dsync', 'known');
}

const MAGIC = 'DSKN1';

export class FileKnown implements KnownVersions {
  constructor(private dir = knownDir()) {}

  private file(key: string) {
    return path.join(this.dir, createHash('sha256').update(key).digest('hex'));
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
      return v;
    } catch {
      return undefined;
    }
  }

  set(key: string, v: KnownVersion) {
    const n = v.lengths.length;
    const fine = v.fine && { params: v.fine.params, n: v.fine.lengths.length };
    const head = JSON.stringify({ magic: MAGIC, key, version: v.version, root: Buffer.from(v.root).toString('hex'), params: v.params, algo: v.algo, n, H: n ? v.hashes.length / n : 0, fine });
    const bytes = (a: Uint8Array | Uint32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    const to = this.file(key);
    const tmp = `${to}.${process.pid}.tmp`;
    try {
      mkdirSync(this.dir, { recursive: true });
      writeFileSync(tmp, Buffer.concat([Buffer.from(head + '\n'), bytes(v.lengths), v.hashes, ...(v.fine ? [bytes(v.fine.lengths), v.fine.prefixes] : [])]));
      renameSync(tmp, to);
    } catch {
      rmSync(tmp, { force: true }); // a cache that cannot be written only costs a round trip
    }
  }

  delete(key: string) {
    rmSync(this.file(key), { force: true });
  }
}
