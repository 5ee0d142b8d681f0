/**
 * The bodies of the store's objects (docs/store.md, "Objects"): the version index (binary,
 * content-addressed by its SHA-256) and the heads (JSON). Everything read is validated: a
 * damaged or hostile object is a clear error, never a crash or a wrong answer.
 */
import { MAX_CLIENT_LABEL, MAX_MODIFIED_MS } from '../../../shared/src/base/limits.ts';
import { createHash, randomBytes } from 'node:crypto';
import type { ChunkIndex } from '../../../shared/src/chunking/chunk-index.ts';
import { hashLength } from '../../../shared/src/wire/protocol.ts';
import { DamageError, damagedObject } from './errors.ts';
import { INDEX_ID, SEGMENT_ID } from './keys.ts';

const INDEX_MAGIC = 0x58495344; // "DSIX" little-endian
/** Format 4 carries a random nonce, so that no two commits write the same index key (format 3,
 *  without it, is still read). */
const INDEX_FORMAT = 4;
const NONCE_BYTES = 16;

/** A segment holds at most this many Delta Bytes: an upload buffers one segment in memory,
 *  and on S3 a segment is one PUT. */
export const SEGMENT_BYTES = 8 << 20;

/** `length` bytes at `offset` of segment `seg` (an index into Layout.segments). */
export interface Extent {
  seg: number;
  offset: number;
  length: number;
}
/** Where a version's bytes are: its extents in file order, over segment ids (32 hex). */
export interface Layout {
  segments: string[];
  extents: Extent[];
}

export const sha256hex = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/**
 * Serialises a version index: the chunk index and its layout, with a random nonce: every
 * commit's index is a new object under a new key, never one that exists or existed (a late
 * DELETE of a collected index can then never hit a live one, docs/store.md §8).
 */
export function encodeVersion(ix: ChunkIndex, layout: Layout): Buffer {
  const H = hashLength(ix.algo);
  const n = ix.lengths.length;
  const buf = Buffer.alloc(32 + NONCE_BYTES + H + n * (8 + H) + 4 + 16 * layout.segments.length + 4 + 20 * layout.extents.length);
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
  buf.set(randomBytes(NONCE_BYTES), o);
  o += NONCE_BYTES;
  buf.set(ix.root, o);
  o += H;
  Buffer.from(ix.lengths.buffer, ix.lengths.byteOffset, 4 * n).copy(buf, o);
  o += 4 * n;
  Buffer.from(ix.fastfps.buffer, ix.fastfps.byteOffset, 4 * n).copy(buf, o);
  o += 4 * n;
  buf.set(ix.hashes, o);
  o += n * H;
  o = buf.writeUInt32LE(layout.segments.length, o);
  for (const id of layout.segments) o += Buffer.from(id, 'hex').copy(buf, o);
  o = buf.writeUInt32LE(layout.extents.length, o);
  for (const e of layout.extents) {
    o = buf.writeUInt32LE(e.seg, o);
    o = buf.writeBigUInt64LE(BigInt(e.offset), o);
    o = buf.writeBigUInt64LE(BigInt(e.length), o);
  }
  return buf;
}

/** Parses a version index, format 4 or 3 (its SHA-256 is checked against its key by the caller). */
export function decodeVersion(buf: Buffer): { index: ChunkIndex; layout: Layout } {
  if (buf.length < 32 || buf.readUInt32LE(0) !== INDEX_MAGIC || (buf[4] !== INDEX_FORMAT && buf[4] !== 3)) throw damagedObject('version index: bad header');
  // the root follows the nonce in format 4, the chunk count in format 3
  const rootAt = buf[4] === INDEX_FORMAT ? 32 + NONCE_BYTES : 32;
  try {
    const algo = buf[5];
    const H = hashLength(algo);
    const params = { op: buf[6], every: buf[7], min: buf.readUInt32LE(8), avg: buf.readUInt32LE(12), max: buf.readUInt32LE(16) };
    const size = Number(buf.readBigUInt64LE(20));
    const n = buf.readUInt32LE(28);
    let o = rootAt + H;
    if (buf.length < o + n * (8 + H)) throw damagedObject('version index: truncated');
    const copy = (at: number, len: number) => new Uint8Array(buf.subarray(at, at + len));
    const lengths = new Uint32Array(copy(o, 4 * n).buffer);
    const fastfps = new Uint32Array(copy(o + 4 * n, 4 * n).buffer);
    const hashes = copy(o + 8 * n, n * H);
    o += n * (8 + H);
    let sum = 0;
    for (const l of lengths) sum += l;
    if (sum !== size) throw damagedObject('version index: chunk lengths do not add up to the size');
    const segments: string[] = [];
    const nSegs = buf.readUInt32LE(o);
    o += 4;
    if (buf.length < o + 16 * nSegs) throw damagedObject('version index: truncated');
    for (let k = 0; k < nSegs; k++, o += 16) segments.push(buf.toString('hex', o, o + 16));
    const nExtents = buf.readUInt32LE(o);
    o += 4;
    if (buf.length !== o + 20 * nExtents) throw damagedObject('version index: wrong length');
    const extents: Extent[] = [];
    let total = 0;
    for (let k = 0; k < nExtents; k++, o += 20) {
      const e = { seg: buf.readUInt32LE(o), offset: Number(buf.readBigUInt64LE(o + 4)), length: Number(buf.readBigUInt64LE(o + 12)) };
      if (e.seg >= segments.length || e.length === 0 || !Number.isSafeInteger(e.offset + e.length)) throw damagedObject('version index: bad extent');
      extents.push(e);
      total += e.length;
    }
    if (total !== size) throw damagedObject('version index: the layout does not add up to the file');
    return { index: { params, algo, size, lengths, fastfps, hashes, root: copy(rootAt, H) }, layout: { segments, extents } };
  } catch (e) {
    throw e instanceof DamageError ? e : damagedObject(`version index: ${(e as Error).message}`);
  }
}

/** One live version in a file head. */
export interface VersionEntry {
  version: number;
  /** the version index's id (SHA-256 hex of its body) */
  index: string;
  size: number;
  /** commit time, ISO 8601 */
  mtime: string;
  /** the file's modification time as its pusher gave it (Hello's `modified`), ms since the
   *  epoch, 0 … MAX_MODIFIED_MS; absent: the pusher gave none (a client of protocol version 9) */
  modified?: number;
  /** hex of the root hash, and its algorithm */
  root: string;
  algo: number;
  /** bytes this version added to the store (its own segments) */
  change: number;
  /** the client that pushed it, when it said */
  client?: string;
  /** every content object this version references existed at a moment when gc/state's epoch
   *  was at least this (docs/store.md §8; absent: 0) */
  epoch?: number;
  /** made by a restore: the number of the version whose bytes it has */
  restoredFrom?: number;
  /** a repack under way (docs/store.md §10, "Repacking"): another index of the same bytes, in
   *  other segments, and the epoch its objects are known at. Readers never use it; gc marks
   *  it; it becomes `index` only once confirmed against gc (repack.ts) */
  repack?: { index: string; epoch: number };
}

/** A file head: the name, the next version number (never reused), the live versions. */
export interface FileHead {
  name: string;
  next: number;
  /** incremented by every change of the head (folder catalogs keep the newest, catalog.ts) */
  seq?: number;
  versions: VersionEntry[];
  /** an interrupted upload of this name may be listed in its uploads head until about this
   *  time (ms since the epoch; docs/store.md §6): a push reads the uploads head only then */
  uploads?: number;
}

/** One interrupted upload kept for resuming (docs/store.md, "Uploads"). */
export interface UploadEntry {
  /** what a resuming push must match: basis version, list digest, chunking, algorithm */
  key: string;
  /** ms since the epoch after which the upload is dropped */
  expires: number;
  /** the id of the upload's state object (stored as a segment, uploads.ts) */
  state: string;
}
export interface UploadsHead {
  uploads: UploadEntry[];
}

const isInt = (x: unknown, min = 0): x is number => Number.isSafeInteger(x) && (x as number) >= min;
const isStr = (x: unknown): x is string => typeof x === 'string';
/** An entry's `modified`: absent, or an integer in 0 … MAX_MODIFIED_MS (the codec's range). */
export const isModified = (x: unknown): x is number | undefined => x === undefined || (isInt(x) && x <= MAX_MODIFIED_MS);

/** Whether `l` is a well-formed layout (segment ids, extents within them). */
export function checkLayout(l: any): l is Layout {
  return (
    !!l && Array.isArray(l.segments) && l.segments.every((s: unknown) => isStr(s) && SEGMENT_ID.test(s)) &&
    Array.isArray(l.extents) && l.extents.every((e: any) => e && isInt(e.seg) && e.seg < l.segments.length && isInt(e.offset) && isInt(e.length, 1))
  );
}

/** A head's JSON body; damage if it is not JSON. */
export function parseJson(body: Uint8Array, key: string): any {
  try {
    return JSON.parse(Buffer.from(body).toString('utf8'));
  } catch {
    throw damagedObject(`${key}: not JSON`);
  }
}

export function parseFileHead(body: Uint8Array, key: string): FileHead {
  const h = parseJson(body, key);
  const ok =
    h && isStr(h.name) && isInt(h.next, 1) && (h.seq === undefined || isInt(h.seq)) && (h.uploads === undefined || isInt(h.uploads)) && Array.isArray(h.versions) &&
    h.versions.every((v: any, i: number) =>
      v && isInt(v.version, 1) && v.version < h.next && (i === 0 || v.version > h.versions[i - 1].version) &&
      isStr(v.index) && INDEX_ID.test(v.index) && isInt(v.size) && isStr(v.mtime) && isModified(v.modified) && isStr(v.root) && /^[0-9a-f]+$/.test(v.root) &&
      isInt(v.algo) && isInt(v.change) && (v.epoch === undefined || isInt(v.epoch)) && (v.client === undefined || (isStr(v.client) && v.client.length <= MAX_CLIENT_LABEL)) &&
      (v.restoredFrom === undefined || (isInt(v.restoredFrom, 1) && v.restoredFrom < v.version)) &&
      (v.repack === undefined || (v.repack && isStr(v.repack.index) && INDEX_ID.test(v.repack.index) && isInt(v.repack.epoch) && Object.keys(v.repack).length === 2)));
  if (!ok) throw damagedObject(`${key}: not a file head`);
  return h as FileHead;
}

export function parseUploadsHead(body: Uint8Array, key: string): UploadsHead {
  const h = parseJson(body, key);
  const ok =
    h && Array.isArray(h.uploads) &&
    h.uploads.every((u: any) => u && isStr(u.key) && isInt(u.expires) && isStr(u.state) && SEGMENT_ID.test(u.state));
  if (!ok) throw damagedObject(`${key}: not an uploads head`);
  return h as UploadsHead;
}

export const jsonBody = (x: unknown) => Buffer.from(JSON.stringify(x), 'utf8');

/** Drops the versions retention does not keep (never the latest). */
export function applyRetention(versions: VersionEntry[], s: { keepVersions: number; keepDays: number }, now = Date.now()): VersionEntry[] {
  let out = versions;
  if (s.keepVersions > 0 && out.length > s.keepVersions) out = out.slice(out.length - s.keepVersions);
  if (s.keepDays > 0) {
    const cut = now - s.keepDays * 86_400_000;
    out = out.filter((v, i) => i === out.length - 1 || Date.parse(v.mtime) >= cut);
  }
  return out;
}
