/**
 * A vault's formats, byte by byte (docs/vaults.md, "Formats"): the sealed chunk, a reference to
 * one (Ref), a file's manifest, the tree, the head, and PADME padding. Every decoder takes
 * exactly its bytes: a short or long input, a bad count, a bad name or a bad version is a
 * VaultError, never a partial value. Numbers are big-endian.
 */
import { VAULT_DEVICE_MAX, VAULT_HEAD_MAX, VAULT_KEEP_MAX, VAULT_LIST_MAX } from '../base/limits.ts';
import { validateName } from '../wire/names.ts';

/** What a vault refuses: a wrong passphrase, a damaged or moved object, a rolled-back head. */
export class VaultError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VaultError';
  }
}

/** A change refused because the vault holds another version, name or file than the one it
 *  was made against (another device's change landed first): nothing written. */
export class VaultChanged extends VaultError {
  constructor(message: string) {
    super(message);
    this.name = 'VaultChanged';
  }
}

export const ID_BYTES = 32;
/** AES-GCM: a random 96-bit nonce and a 128-bit tag. */
export const NONCE_BYTES = 12;
export const TAG_BYTES = 16;
/** A chunk sealed with AES-GCM is its plaintext and this much more (nonce and tag). */
export const SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES;
/** A content chunk sealed with AES-CTR is its plaintext and this much more: its key stream
 *  position, masked (keys.ts `sealContent`). */
export const CTR_OVERHEAD = 16;

/** What a sealed chunk holds: file contents (content key) or a piece of a list, a manifest or
 *  the tree (metadata key). Part of the chunk's associated data. */
export const Kind = { Content: 0, List: 1 } as const;
export type KindCode = (typeof Kind)[keyof typeof Kind];

/** How a chunk is sealed: AES-256-GCM (a list piece; a content chunk an earlier dsync wrote), or
 *  AES-256-CTR, authenticated by its keyed id (every content chunk sealed now: docs/vaults.md,
 *  "Formats"). */
export const Seal = { Gcm: 0, Ctr: 1 } as const;
export type SealCode = (typeof Seal)[keyof typeof Seal];

/** What a chunk sealed so holds beside its plaintext. */
export const sealOverhead = (seal: SealCode) => (seal === Seal.Ctr ? CTR_OVERHEAD : SEAL_OVERHEAD);

/** Where a sealed chunk lives: its chunk id (keyed BLAKE3 of its plaintext), the pack (its id,
 *  hex: `packIdInput`), the byte range of the sealed chunk in it, and how it is sealed. A list
 *  piece's is 72 bytes on disk (its seal is always Gcm). */
export interface Ref {
  id: Uint8Array;
  pack: string;
  offset: number;
  /** sealed length: plaintext + sealOverhead(seal) */
  length: number;
  seal: SealCode;
}
export const REF_BYTES = ID_BYTES + 32 + 4 + 4;

/** The plaintext length of the chunk a Ref names. */
export const plainLength = (r: Ref) => r.length - sealOverhead(r.seal);

/** One version of a file: its number (1, 2, … in push order; never reused), a random id (the
 *  manifest names it), its size, its contents' root (chunks.ts `versionRoot`: BLAKE3 over its
 *  chunks' keyed ids; what the two-way engine compares a local file with: sealed in the tree,
 *  never sent in the clear; null for a version an earlier dsync wrote, whose root is then its
 *  manifest's), modification time (ms), when it was pushed (ms), the label of the device that
 *  pushed it, the pieces of its manifest, and the packs its chunks lie in (the manifest's
 *  table, sorted: what a head names as in use without reading every manifest). */
export interface Version {
  n: number;
  id: Uint8Array;
  size: number;
  root: Uint8Array | null;
  mtime: number;
  pushed: number;
  device: string;
  manifest: Ref[];
  packs: string[];
}

/** A file in the tree: a random id (kept across renames; its manifests name it), its name,
 *  when it was deleted (ms; 0 while it is live) and its versions, oldest first. */
export interface TreeFile {
  id: Uint8Array;
  name: string;
  deleted: number;
  versions: Version[];
}

/** The tree: how many versions a file keeps (the vault's retention) and the files, live and
 *  deleted, in name order. */
export interface Tree {
  keep: number;
  files: TreeFile[];
}

/** A file's manifest: the file and version it belongs to, and its chunks in file order. */
export interface Manifest {
  file: Uint8Array;
  version: Uint8Array;
  refs: Ref[];
}

/** File ids and version ids: 16 random bytes. */
export const FILE_ID_BYTES = 16;
/** A version's root: BLAKE3 over its chunks' keyed ids. */
export const ROOT_BYTES = 32;

/** The head's sealed contents: its sequence number (the server's counter once written), the
 *  SHA-256 of the head it replaces (zeros for the first), when it was written, the tree's
 *  pieces. */
export interface HeadRecord {
  seq: number;
  prev: Uint8Array;
  time: number;
  tree: Ref[];
}

const HEX = Array.from({ length: 256 }, (_, x) => x.toString(16).padStart(2, '0'));
/** Lowercase hex (a table: a push names every chunk by it, 32 000 of them on 256 MiB). */
export const hex = (b: Uint8Array) => {
  let s = '';
  for (let i = 0; i < b.length; i++) s += HEX[b[i]];
  return s;
};
export function unhex(s: string): Uint8Array {
  if (!/^([0-9a-f]{2})*$/.test(s)) throw new VaultError('not lowercase hex');
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}
export const utf8 = (s: string) => new TextEncoder().encode(s);

/** PADME (Nikitin et al., "Reducing Metadata Leakage from Encrypted Files and Communication
 *  with PURBs", PETS 2019): L rounded up so that only the top ⌊log2 E⌋ + 1 bits of its E+1 bits
 *  may be set, E = ⌊log2 L⌋; at most 12% more, and a padded size leaks O(log log L) bits. */
export function padme(L: number): number {
  if (L < 2) return L;
  const E = Math.floor(Math.log2(L));
  const S = Math.floor(Math.log2(E)) + 1;
  const mask = 2 ** (E - S) - 1;
  return Math.ceil(L / (mask + 1)) * (mask + 1);
}

/** A pack's blocks: the server keeps the SHA-256 of each beside the pack, to check a ranged read
 *  (server/src/store/vault-packs.ts); a pack's id is over them (`packIdInput`). */
export const PACK_BLOCK = 64 << 10;
export const PACK_SUMS_MAGIC = utf8('DSVS\x01');
/** The bytes of `packIdInput` before the block sums. */
export const PACK_SUMS_PREFIX = PACK_SUMS_MAGIC.length + 8;

/** A pack is named by the SHA-256 of these bytes (docs/vaults.md, "Formats"): PACK_SUMS_MAGIC, its
 *  size (u64) and the SHA-256 of each PACK_BLOCK of it (the last one shorter), so that each byte
 *  is hashed once, by the client that uploads it and by the server that receives it and keeps
 *  the block sums. A pack an earlier dsync uploaded is named by the SHA-256 of its bytes. */
export function packIdInput(size: number, sums: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(PACK_SUMS_PREFIX + 32 * sums.length);
  out.set(PACK_SUMS_MAGIC);
  new DataView(out.buffer).setBigUint64(PACK_SUMS_MAGIC.length, BigInt(size));
  sums.forEach((sum, i) => out.set(sum, PACK_SUMS_PREFIX + 32 * i));
  return out;
}

/** Appends fixed-width fields (big-endian). */
export class Writer {
  private buf = new Uint8Array(256);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
      next.set(this.buf.subarray(0, this.length));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }
  u8(v: number): this {
    const at = this.room(1);
    this.view.setUint8(at, v);
    return this;
  }
  u16(v: number): this {
    const at = this.room(2);
    this.view.setUint16(at, v);
    return this;
  }
  u32(v: number): this {
    const at = this.room(4);
    this.view.setUint32(at, v);
    return this;
  }
  /** A whole number up to 2^53 - 1. */
  u64(v: number): this {
    if (!Number.isSafeInteger(v) || v < 0) throw new VaultError(`${v} is no count`);
    const at = this.room(8);
    this.view.setUint32(at, Math.floor(v / 2 ** 32));
    this.view.setUint32(at + 4, v >>> 0);
    return this;
  }
  bytes(b: Uint8Array): this {
    const at = this.room(b.length); // may replace this.buf
    this.buf.set(b, at);
    return this;
  }
  /** An unsigned LEB128 varint of a u32: 7 bits a byte, low first, the high bit set on every
   *  byte but the last; the shortest form. */
  varint(v: number): this {
    if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new VaultError(`${v} is no u32`);
    while (v >= 0x80) {
      this.u8((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    return this.u8(v);
  }
  /** A list piece's Ref (always sealed with AES-GCM). */
  ref(r: Ref): this {
    if (r.id.length !== ID_BYTES) throw new VaultError('a chunk id is 32 bytes');
    if (r.seal !== Seal.Gcm) throw new VaultError('a list piece is sealed with AES-GCM');
    if (r.pack.length !== 64) throw new VaultError('a Ref names a pack that is not uploaded');
    return this.bytes(r.id).bytes(unhex(r.pack)).u32(r.offset).u32(r.length);
  }
  done(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

/** Reads fixed-width fields; any read past the end is a VaultError naming `what`. */
export class Reader {
  private view: DataView;
  at = 0;
  constructor(
    private readonly b: Uint8Array,
    private readonly what: string,
  ) {
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }
  get left(): number {
    return this.b.length - this.at;
  }
  private take(n: number): number {
    if (n > this.left) throw new VaultError(`${this.what} is cut short`);
    const at = this.at;
    this.at += n;
    return at;
  }
  u8(): number {
    return this.view.getUint8(this.take(1));
  }
  u16(): number {
    return this.view.getUint16(this.take(2));
  }
  u32(): number {
    return this.view.getUint32(this.take(4));
  }
  u64(): number {
    const at = this.take(8);
    const hi = this.view.getUint32(at);
    if (hi >= 2 ** 21) throw new VaultError(`${this.what} holds a number over 2^53`);
    return hi * 2 ** 32 + this.view.getUint32(at + 4);
  }
  bytes(n: number): Uint8Array {
    const at = this.take(n);
    return this.b.slice(at, at + n);
  }
  /** A varint as Writer.varint writes it: a longer form than the shortest, or a value over
   *  2^32 - 1, is refused. */
  varint(): number {
    let v = 0;
    for (let i = 0; ; i++) {
      const b = this.u8();
      v += (b & 0x7f) * 2 ** (7 * i);
      if (b < 0x80) {
        if (i > 0 && b === 0) throw new VaultError(`${this.what} holds a varint in a longer form than needed`);
        if (v > 0xffffffff) throw new VaultError(`${this.what} holds a varint over 2^32 - 1`);
        return v;
      }
      if (i === 4) throw new VaultError(`${this.what} holds a varint over 5 bytes`);
    }
  }
  ref(): Ref {
    const id = this.bytes(ID_BYTES);
    const pack = hex(this.bytes(32));
    const offset = this.u32();
    const length = this.u32();
    if (length <= SEAL_OVERHEAD) throw new VaultError(`${this.what} refers to a sealed chunk of ${length} bytes`);
    return { id, pack, offset, length, seal: Seal.Gcm };
  }
  /** A count of items of at least `each` bytes that must fit in what is left. */
  count(each: number): number {
    const n = this.u32();
    if (n * each > this.left) throw new VaultError(`${this.what} counts ${n} items in ${this.left} bytes`);
    return n;
  }
  end(): void {
    if (this.left !== 0) throw new VaultError(`${this.what} has ${this.left} bytes too many`);
  }
}

// ---------------------------------------------------------------------------------------------
// Lists: a manifest (a file's chunks) and the tree (the files)

/** The manifest before content chunks were sealed with AES-CTR: read, its chunks all AES-GCM. */
const MANIFEST_V3 = 0x4f; // 'O'
const MANIFEST_V4 = 0x50; // 'P'
/** The tree before versions carried their root and named their packs: refused with a clear
 *  error. */
const TREE_V2 = 0x55; // 'U'
/** The tree whose versions carry the root of the default chunking (plain Dsync's): read, its
 *  roots dropped (nothing computes that root of a vault's file any more). */
const TREE_V3 = 0x56; // 'V'
const TREE_V4 = 0x57; // 'W'
const decoder = new TextDecoder('utf-8', { fatal: true });

/** A decoded manifest and its table of packs, in the order it lists them. */
export interface ManifestTable extends Manifest {
  packs: string[];
}

/** A file's manifest: a version byte, the file id (16), the version id (16), the packs its
 *  chunks lie in (a varint count, then each pack id once, 32 bytes), the count of chunks
 *  (varint), then per chunk, in file order: its id (32), its pack's index in the table times 2
 *  plus its Seal, its offset in the pack and its sealed length (varints). The table lists first the packs of
 *  `order` (the previous version's table) that the chunks still use, in that order, then the
 *  others as they first appear: an edit appends packs, so the entries it does not touch keep
 *  their bytes and the list pieces that hold them stay the same. */
export function encodeManifest(m: Manifest, order: string[] = []): Uint8Array {
  if (m.file.length !== FILE_ID_BYTES || m.version.length !== FILE_ID_BYTES) throw new VaultError('a file or version id is 16 bytes');
  const used = new Set(m.refs.map((r) => r.pack));
  const index = new Map<string, number>();
  for (const p of [...order, ...m.refs.map((r) => r.pack)]) if (used.has(p) && !index.has(p)) index.set(p, index.size);
  const w = new Writer().u8(MANIFEST_V4).bytes(m.file).bytes(m.version).varint(index.size);
  for (const p of index.keys()) {
    if (!/^[0-9a-f]{64}$/.test(p)) throw new VaultError('a Ref names a pack that is not uploaded');
    w.bytes(unhex(p));
  }
  w.varint(m.refs.length);
  for (const r of m.refs) {
    if (r.id.length !== ID_BYTES) throw new VaultError('a chunk id is 32 bytes');
    if (r.length <= sealOverhead(r.seal)) throw new VaultError(`a Ref of a sealed chunk of ${r.length} bytes`);
    w.bytes(r.id).varint(index.get(r.pack)! * 2 + r.seal).varint(r.offset).varint(r.length);
  }
  return w.done();
}

export function decodeManifest(b: Uint8Array): ManifestTable {
  if (b.length > VAULT_LIST_MAX) throw new VaultError('a manifest is over VAULT_LIST_MAX');
  const r = new Reader(b, 'a manifest');
  const format = r.u8();
  if (format !== MANIFEST_V3 && format !== MANIFEST_V4) throw new VaultError('a manifest of an unknown version');
  const file = r.bytes(FILE_ID_BYTES);
  const version = r.bytes(FILE_ID_BYTES);
  const np = r.varint();
  if (np * 32 > r.left) throw new VaultError(`a manifest counts ${np} packs in ${r.left} bytes`);
  const packs: string[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < np; i++) {
    const p = hex(r.bytes(32));
    if (seen.has(p)) throw new VaultError('a manifest lists a pack twice');
    seen.add(p);
    packs.push(p);
  }
  const n = r.varint();
  if (n * (ID_BYTES + 3) > r.left) throw new VaultError(`a manifest counts ${n} chunks in ${r.left} bytes`);
  const refs: Ref[] = [];
  const unused = new Set(packs);
  for (let i = 0; i < n; i++) {
    const id = r.bytes(ID_BYTES);
    const v = r.varint();
    const [k, seal] = format === MANIFEST_V3 ? [v, Seal.Gcm] : [Math.floor(v / 2), (v % 2) as SealCode];
    if (k >= packs.length) throw new VaultError(`a manifest names pack ${k} of ${packs.length}`);
    const offset = r.varint();
    const length = r.varint();
    if (length <= sealOverhead(seal)) throw new VaultError(`a manifest refers to a sealed chunk of ${length} bytes`);
    refs.push({ id, pack: packs[k], offset, length, seal });
    unused.delete(packs[k]);
  }
  r.end();
  if (unused.size) throw new VaultError('a manifest lists a pack no chunk lies in');
  return { file, version, refs, packs };
}

/** A device's label as a version records it: UTF-8, 1 to VAULT_DEVICE_MAX bytes, no control
 *  character. */
export function checkDevice(label: string): string {
  const n = utf8(label).length;
  if (n < 1 || n > VAULT_DEVICE_MAX || /[\u0000-\u001f\u007f-\u009f]/.test(label)) throw new VaultError(`a device label is 1 to ${VAULT_DEVICE_MAX} bytes of UTF-8 without control characters: ${JSON.stringify(label)}`);
  return label;
}

const byName = (a: TreeFile, b: TreeFile) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** The tree: a version byte, keep (u16, 1 to VAULT_KEEP_MAX), a count (u32), then per file (in
 *  name order, each name and each file id once): file id (16), name length (u16) and name
 *  (UTF-8 NFC, a valid file name), deleted (u64 ms, 0 = live), the count of its versions (u32,
 *  1 to keep), and per version, oldest first, numbers rising: number (u32, ≥ 1), version id
 *  (16), size (u64), whether a root follows (u8, 1 or 0) and the root (32), mtime (u64 ms),
 *  pushed (u64 ms), device label length (u8) and label, the count of its manifest's pieces
 *  (u32) and their Refs, the count of the packs its chunks lie in (u32) and their ids (32
 *  bytes each, ascending). */
export function encodeTree(tree: Tree): Uint8Array {
  checkKeep(tree.keep);
  const files = [...tree.files].sort(byName);
  const w = new Writer().u8(TREE_V4).u16(tree.keep).u32(files.length);
  for (const f of files) {
    const name = utf8(validateName(f.name));
    if (f.id.length !== FILE_ID_BYTES) throw new VaultError('a file id is 16 bytes');
    if (f.versions.length < 1 || f.versions.length > tree.keep) throw new VaultError(`${JSON.stringify(f.name)} holds ${f.versions.length} versions (1 to ${tree.keep})`);
    w.bytes(f.id).u16(name.length).bytes(name).u64(f.deleted).u32(f.versions.length);
    for (const v of f.versions) {
      if (v.id.length !== FILE_ID_BYTES) throw new VaultError('a version id is 16 bytes');
      if (v.root && v.root.length !== ROOT_BYTES) throw new VaultError('a version root is 32 bytes');
      const device = utf8(checkDevice(v.device));
      w.u32(v.n).bytes(v.id).u64(v.size).u8(v.root ? 1 : 0);
      if (v.root) w.bytes(v.root);
      w.u64(v.mtime).u64(v.pushed).u8(device.length).bytes(device).u32(v.manifest.length);
      for (const r of v.manifest) w.ref(r);
      writePackIds(w, v.packs);
    }
  }
  return w.done();
}

/** A retention: 1 to VAULT_KEEP_MAX versions a file. */
export function checkKeep(keep: number): number {
  if (!Number.isInteger(keep) || keep < 1 || keep > VAULT_KEEP_MAX) throw new VaultError(`a vault keeps 1 to ${VAULT_KEEP_MAX} versions of a file, not ${keep}`);
  return keep;
}

function text(r: Reader, n: number, what: string): string {
  const b = r.bytes(n);
  try {
    return decoder.decode(b);
  } catch {
    throw new VaultError(`a tree holds ${what} that is not UTF-8`);
  }
}

export function decodeTree(b: Uint8Array): Tree {
  if (b.length > VAULT_LIST_MAX) throw new VaultError('a tree is over VAULT_LIST_MAX');
  const r = new Reader(b, 'a tree');
  const format = r.u8();
  if (format === TREE_V2) throw new VaultError('a tree of an older format (0x55: its versions carry no root and name no packs): this vault was made by an earlier dsync and is not read; make a new one');
  if (format !== TREE_V3 && format !== TREE_V4) throw new VaultError('a tree of an unknown version');
  let keep: number;
  try {
    keep = checkKeep(r.u16());
  } catch (e) {
    throw new VaultError(`a tree holds a bad retention: ${(e as Error).message}`);
  }
  const VERSION_MIN = 4 + FILE_ID_BYTES + 8 + (format === TREE_V3 ? ROOT_BYTES : 1) + 8 + 8 + 1 + 4 + 4;
  const n = r.count(FILE_ID_BYTES + 2 + 8 + 4 + VERSION_MIN);
  const files: TreeFile[] = [];
  const ids = new Set<string>();
  for (let i = 0; i < n; i++) {
    const id = r.bytes(FILE_ID_BYTES);
    if (ids.has(hex(id))) throw new VaultError('a tree holds a file id twice');
    ids.add(hex(id));
    const name = text(r, r.u16(), 'a name');
    try {
      if (validateName(name) !== name) throw new Error('not in NFC');
    } catch (e) {
      throw new VaultError(`a tree holds an invalid name: ${(e as Error).message}`);
    }
    if (i > 0 && !(files[i - 1].name < name)) throw new VaultError('a tree is out of name order');
    const deleted = r.u64();
    const count = r.count(VERSION_MIN);
    if (count < 1 || count > keep) throw new VaultError(`a tree holds a file of ${count} versions (1 to ${keep})`);
    const versions: Version[] = [];
    for (let k = 0; k < count; k++) {
      const vn = r.u32();
      if (vn < 1 || (k > 0 && vn <= versions[k - 1].n)) throw new VaultError('a tree holds version numbers out of order');
      const vid = r.bytes(FILE_ID_BYTES);
      const size = r.u64();
      let root: Uint8Array | null = null;
      if (format === TREE_V3) r.bytes(ROOT_BYTES);
      else {
        const has = r.u8();
        if (has > 1) throw new VaultError('a tree holds a bad root flag');
        if (has) root = r.bytes(ROOT_BYTES);
      }
      const mtime = r.u64();
      const pushed = r.u64();
      let device = text(r, r.u8(), 'a device label');
      try {
        device = checkDevice(device);
      } catch (e) {
        throw new VaultError(`a tree holds a bad device label: ${(e as Error).message}`);
      }
      const pieces = r.count(REF_BYTES);
      const manifest: Ref[] = [];
      for (let m = 0; m < pieces; m++) manifest.push(r.ref());
      versions.push({ n: vn, id: vid, size, root, mtime, pushed, device, manifest, packs: readPackIds(r) });
    }
    files.push({ id, name, deleted, versions });
  }
  r.end();
  return { keep, files };
}

/** The packs `refs` lie in: each once, ascending (a version's `packs`). */
export function packsOf(refs: Ref[]): string[] {
  return [...new Set(refs.map((r) => r.pack))].sort();
}

/** A version's packs: a count (u32), then each id (32 bytes), ascending, each once. */
function writePackIds(w: Writer, packs: string[]): void {
  w.u32(packs.length);
  for (let i = 0; i < packs.length; i++) {
    if (!/^[0-9a-f]{64}$/.test(packs[i])) throw new VaultError('a version names a pack that is not uploaded');
    if (i > 0 && !(packs[i - 1] < packs[i])) throw new VaultError("a version's packs are not ascending, each once");
    w.bytes(unhex(packs[i]));
  }
}

function readPackIds(r: Reader): string[] {
  const n = r.count(32);
  const packs: string[] = [];
  for (let i = 0; i < n; i++) {
    packs.push(hex(r.bytes(32)));
    if (i > 0 && !(packs[i - 1] < packs[i])) throw new VaultError("a tree holds a version's packs out of order or twice");
  }
  return packs;
}

// ---------------------------------------------------------------------------------------------
// The head's plaintext (sealed in keys.ts's sealHead)

/** seq (u64), prev (32), time (u64 ms), tree pieces (u32 count, Refs), then zeros up to the
 *  PADME size of the whole, so the head's size says little about the tree's. */
export function encodeHeadRecord(h: HeadRecord): Uint8Array {
  if (h.prev.length !== 32) throw new VaultError('a head names its predecessor by 32 bytes');
  const w = new Writer().u64(h.seq).bytes(h.prev).u64(h.time).u32(h.tree.length);
  for (const r of h.tree) w.ref(r);
  const body = w.done();
  const out = new Uint8Array(padme(body.length));
  out.set(body);
  if (1 + SEAL_OVERHEAD + out.length > VAULT_HEAD_MAX) throw new VaultError('the tree is too large for a head');
  return out;
}

export function decodeHeadRecord(b: Uint8Array): HeadRecord {
  const r = new Reader(b, 'a head');
  const seq = r.u64();
  const prev = r.bytes(32);
  const time = r.u64();
  const n = r.count(REF_BYTES);
  const tree: Ref[] = [];
  for (let i = 0; i < n; i++) tree.push(r.ref());
  const pad = r.bytes(r.left);
  if (pad.some((x) => x !== 0) || b.length !== padme(b.length - pad.length)) throw new VaultError('a head is padded wrongly');
  if (seq < 1) throw new VaultError('a head numbered 0');
  return { seq, prev, time, tree };
}
