/**
 * Vaults (docs/vaults.md, "The server"): per user and vault, objects only the vault's clients
 * can read. The server keeps them and checks what it can without a key:
 *
 *   - one wrapped-key file, written when the vault is created (a content object: a second
 *     create of the id finds it and is refused); a passphrase change replaces it by a head of
 *     its own (compare-and-swap on the keyfile the client read; the one as created is then
 *     deleted), which only a version-1 keyfile with the same key check may replace;
 *   - packs, content objects under the SHA-256 of their bytes: a pack is stored only when its
 *     bytes hash to its id, and served only after what is read of it is checked again (a
 *     damaged pack is a DamageError, never wrong bytes): a whole pack against its id, a range
 *     against the SHA-256 of each SUM_BLOCK it touches, kept beside a pack of more than one
 *     block (its **sums**, bound to its id), so that a small range costs a small read; a pack of
 *     one block has none: any range of it reads it whole, checked against its id;
 *   - one head, a head object changed only by compare-and-swap on the count of heads written
 *     (its **counter**), so two devices cannot overwrite each other's head; with it, the packs
 *     the head names as in use (the client's list) and the packs a collection condemned.
 *
 * Keys (keys.ts): vaults/<user>/keys/<id>, vaults/<user>/keyfiles/<id>, vaults/<user>/heads/<id>,
 * vaults/<user>/packs/<id>/<pack>, vaults/<user>/sums/<id>/<pack>. The collection
 * (`collectVaultPacks`, run by gc) deletes the packs no head names and older than a grace
 * period; check and repack list only ns/, data/ and index/. Besides that, nothing is deleted
 * here but a pack found damaged when its good bytes are stored again (`putPack`), and sums
 * found damaged (made again from the verified pack).
 */
import { createHash } from 'node:crypto';
import { VAULT_HEAD_MAX, VAULT_HEAD_PACKS_MAX, VAULT_KEYFILE_MAX, VAULT_PACKS_PAGE } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { type Backend, NotFoundError, UnknownOutcome } from './backend.ts';
import { DamageError } from './errors.ts';
import { PACK_ID, VAULTS_PREFIX, VAULT_ID, vaultHeadKey, vaultKeyfileHeadKey, vaultKeyfileKey, vaultKeyfilesPrefix, vaultKeysPrefix, vaultPackKey, vaultPacksPrefix, vaultSumsKey } from './keys.ts';
import { KEYFILE_BYTES, keyfileParts, keyfileTag } from '../../../shared/src/vault/keys.ts';
import { VaultError } from '../../../shared/src/vault/format.ts';
import { SegmentBytes } from './verified.ts';

/** Bytes of verified packs this process keeps in memory (least recently used dropped first),
 *  so that a client reading a pack in several ranges costs one read of it from the store. */
const VERIFIED_PACK_BYTES = 64 << 20;

/** A pack's sums cover blocks of this many bytes (the last one shorter): a ranged read reads
 *  and hashes at most a block more on either side of the range. A pack of at most one block
 *  has no sums (`hasSums`). */
export const SUM_BLOCK = 64 << 10;
/** Whether a pack of `size` bytes has sums stored beside it: one of a single block is read
 *  whole by any range and checked against its id, so sums would only cost an object to write
 *  and one to read (a small push's packs: the new chunks and list pieces of a few KB). */
export const hasSums = (size: number) => size > SUM_BLOCK;
/** Checked sums kept in memory (each at most 8 KiB for a 16 MiB pack), least recently used
 *  dropped first. */
const SUMS_KEPT = 1024;
/** Vaults remembered to exist (the oldest forgotten first, then asked of the store again). */
const VAULTS_KNOWN = 100_000;

/** Stored sums: SUMS_MAGIC, the pack's size (8 bytes, big-endian), the SHA-256 of each block,
 *  then the SHA-256 of the pack's id (32 bytes) and everything before it, so that damaged
 *  sums, or another pack's, do not check. */
const SUMS_MAGIC = Buffer.from('DSVS\x01', 'latin1');
const SUMS_PREFIX = SUMS_MAGIC.length + 8;

interface Sums {
  size: number;
  /** 32 bytes a block */
  blocks: Buffer;
}

/**
 * The hashes of a pack as its bytes come in, in pieces of any size: the SHA-256 of the whole
 * (its id) and of each SUM_BLOCK (its sums). The upload route feeds it as it receives.
 */
export class PackHasher {
  private whole = createHash('sha256');
  private block = createHash('sha256');
  private inBlock = 0;
  private blocks: Buffer[] = [];
  private size = 0;

  update(piece: Uint8Array): void {
    this.whole.update(piece);
    this.size += piece.length;
    for (let at = 0; at < piece.length; ) {
      const n = Math.min(piece.length - at, SUM_BLOCK - this.inBlock);
      this.block.update(piece.subarray(at, at + n));
      at += n;
      this.inBlock += n;
      if (this.inBlock === SUM_BLOCK) this.endBlock();
    }
  }

  private endBlock() {
    this.blocks.push(this.block.digest());
    this.block = createHash('sha256');
    this.inBlock = 0;
  }

  /** The pack's id (hex) and its sums as stored; once. */
  digest(): { sha256: string; sums: Uint8Array } {
    if (this.inBlock) this.endBlock();
    const sha256 = this.whole.digest('hex');
    return { sha256, sums: encodeSums(sha256, this.size, this.blocks) };
  }
}

const bound = (pack: string, body: Uint8Array) => createHash('sha256').update(Buffer.from(pack, 'hex')).update(body).digest();

function encodeSums(pack: string, size: number, blocks: Buffer[]): Uint8Array {
  const head = Buffer.allocUnsafe(SUMS_PREFIX);
  SUMS_MAGIC.copy(head, 0);
  head.writeBigUInt64BE(BigInt(size), SUMS_MAGIC.length);
  const body = Buffer.concat([head, ...blocks]);
  return Buffer.concat([body, bound(pack, body)]);
}

/** Stored sums of `pack`, or null when they are not sums of it (damaged, or another's). */
function decodeSums(pack: string, stored: Uint8Array): Sums | null {
  const b = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  if (b.length < SUMS_PREFIX + 32 || !b.subarray(0, SUMS_MAGIC.length).equals(SUMS_MAGIC)) return null;
  const size = Number(b.readBigUInt64BE(SUMS_MAGIC.length));
  const body = b.subarray(0, b.length - 32);
  if (!Number.isSafeInteger(size) || size < 1 || body.length !== SUMS_PREFIX + 32 * Math.ceil(size / SUM_BLOCK) || !bound(pack, body).equals(b.subarray(b.length - 32))) return null;
  return { size, blocks: body.subarray(SUMS_PREFIX) };
}

/** Whether `bytes`, read from offset `from` (a block boundary), match their blocks' sums. */
function blocksMatch(bytes: Uint8Array, from: number, blocks: Buffer): boolean {
  for (let at = 0; at < bytes.length; at += SUM_BLOCK) {
    const i = (from + at) / SUM_BLOCK;
    const sum = createHash('sha256').update(bytes.subarray(at, at + SUM_BLOCK)).digest();
    if (!sum.equals(blocks.subarray(32 * i, 32 * i + 32))) return false;
  }
  return true;
}

/** A pack opened for reading (`Vaults.openPack`): its size, and its bytes [start, end), each
 *  checked before it is returned. */
export interface OpenPack {
  size: number;
  read(start: number, end: number): Promise<Uint8Array>;
}

/** A stored head: HEAD_MAGIC, the counter (8 bytes, big-endian), the length of the client's
 *  body (u32) and the body, the count of packs it names in use (u32) and their ids (32 bytes
 *  each, ascending), the count of packs a collection condemned (u32) and their ids (ascending).
 *  HEAD_MAGIC_V1 heads (the counter, then the body) name no packs: nothing of their vault is
 *  collected. */
const HEAD_MAGIC = Buffer.from('DSVH\x02', 'latin1');
const HEAD_MAGIC_V1 = Buffer.from('DSVH\x01', 'latin1');
const HEAD_PREFIX = HEAD_MAGIC.length + 8;

const sha256hex = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const malformed = (why: string) => new ProtocolError(ErrorCode.Malformed, why);

/** A vault's head as stored: its counter, the client's bytes, the packs it names in use (null:
 *  a head stored before heads named them) and the packs a collection condemned (never in use;
 *  deleted by it, or by the next one when it stopped). */
export interface VaultHead {
  counter: number;
  body: Uint8Array;
  packs: string[] | null;
  condemned: string[];
}

export function encodeVaultHead(h: { counter: number; body: Uint8Array; packs: string[]; condemned: string[] }): Uint8Array {
  const out = Buffer.allocUnsafe(HEAD_PREFIX + 4 + h.body.length + 4 + 32 * h.packs.length + 4 + 32 * h.condemned.length);
  HEAD_MAGIC.copy(out, 0);
  out.writeBigUInt64BE(BigInt(h.counter), HEAD_MAGIC.length);
  let at = out.writeUInt32BE(h.body.length, HEAD_PREFIX);
  out.set(h.body, at);
  at += h.body.length;
  for (const ids of [h.packs, h.condemned]) {
    at = out.writeUInt32BE(ids.length, at);
    for (const p of ids) at += out.write(p, at, 'hex');
  }
  return out;
}

/** Pack ids (32 bytes each) as hex, or null when they are not ascending, each once. */
export function packIdsOf(b: Uint8Array): string[] | null {
  const ids: string[] = [];
  for (let at = 0; at < b.length; at += 32) {
    ids.push(Buffer.from(b.buffer, b.byteOffset + at, 32).toString('hex'));
    if (ids.length > 1 && !(ids[ids.length - 2] < ids[ids.length - 1])) return null;
  }
  return ids;
}

/** A stored head; a DamageError when it is not one `encodeVaultHead` makes (or a head of the
 *  first format). */
export function decodeVaultHead(stored: Uint8Array, key: string): VaultHead {
  const b = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  const damaged = () => new DamageError(`damaged store object: ${key} is not a vault head`);
  const counter = b.length >= HEAD_PREFIX ? Number(b.readBigUInt64BE(HEAD_MAGIC.length)) : 0;
  if (b.length < HEAD_PREFIX || !Number.isSafeInteger(counter) || counter < 1) throw damaged();
  const magic = b.subarray(0, HEAD_MAGIC.length);
  if (magic.equals(HEAD_MAGIC_V1)) {
    if (b.length - HEAD_PREFIX > VAULT_HEAD_MAX) throw damaged();
    return { counter, body: b.subarray(HEAD_PREFIX), packs: null, condemned: [] };
  }
  if (!magic.equals(HEAD_MAGIC)) throw damaged();
  let at = HEAD_PREFIX;
  const take = (n: number) => {
    if (at + n > b.length) throw damaged();
    at += n;
    return b.subarray(at - n, at);
  };
  const n = take(4).readUInt32BE(0);
  if (n > VAULT_HEAD_MAX) throw damaged();
  const body = take(n);
  const lists: string[][] = [];
  for (let i = 0; i < 2; i++) {
    const count = take(4).readUInt32BE(0);
    const ids = packIdsOf(take(32 * count));
    if (!ids) throw damaged();
    lists.push(ids);
  }
  if (at !== b.length) throw damaged();
  return { counter, body, packs: lists[0], condemned: lists[1] };
}

/** A changed keyfile (a head at vaults/<user>/keyfiles/<id>): KEYFILE_MAGIC, the time the
 *  vault was created (ms, 8 bytes, big-endian: its first keyfile's), then the keyfile's bytes. */
const KEYFILE_MAGIC = Buffer.from('DSVK\x01', 'latin1');
const KEYFILE_PREFIX = KEYFILE_MAGIC.length + 8;

function encodeKeyfileHead(created: number, keyfile: Uint8Array): Buffer {
  const b = Buffer.alloc(KEYFILE_PREFIX + keyfile.length);
  KEYFILE_MAGIC.copy(b);
  b.writeBigUInt64BE(BigInt(created), KEYFILE_MAGIC.length);
  b.set(keyfile, KEYFILE_PREFIX);
  return b;
}

function decodeKeyfileHead(stored: Uint8Array, key: string): { created: number; keyfile: Uint8Array } {
  const b = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  const n = b.length - KEYFILE_PREFIX;
  if (n < 1 || n > VAULT_KEYFILE_MAX || !b.subarray(0, KEYFILE_MAGIC.length).equals(KEYFILE_MAGIC)) throw new DamageError(`damaged store object: ${key} is not a vault keyfile`);
  return { created: Number(b.readBigUInt64BE(KEYFILE_MAGIC.length)), keyfile: b.subarray(KEYFILE_PREFIX) };
}

/**
 * A keyfile the server takes, on create and on a passphrase change alike: a version-1 keyfile
 * of exactly KEYFILE_BYTES whose Argon2id parameters are within VAULT_ARGON2_MAX (keys.ts
 * `keyfileParts`); its parts, or Malformed (400) naming what is wrong. The server cannot open
 * it, but a keyfile no client would open (or one asking a client to spend gigabytes) is never
 * stored.
 */
export function checkKeyfile(keyfile: Uint8Array): ReturnType<typeof keyfileParts> {
  try {
    return keyfileParts(keyfile);
  } catch (e) {
    if (!(e instanceof VaultError)) throw e;
    throw malformed(`not a keyfile: ${e.message} (a keyfile is version 1, exactly ${KEYFILE_BYTES} bytes); nothing stored`);
  }
}

/** The checks of the REST routes' inputs (server/src/http/vaults.ts), one home each. */
export function checkVaultId(id: unknown): string {
  if (typeof id !== 'string' || !VAULT_ID.test(id)) throw malformed('a vault id is 32 lowercase hex digits');
  return id;
}
export function checkPackId(pack: unknown): string {
  if (typeof pack !== 'string' || !PACK_ID.test(pack)) throw malformed('a pack id is 64 lowercase hex digits (the SHA-256 of its bytes)');
  return pack;
}

export type HeadSwap = { ok: true; counter: number } | { ok: false; counter: number };

export class Vaults {
  /** vaults (by keyfile key) known to exist: a vault is never deleted, so this never goes stale */
  private knownVaults = new Set<string>();
  private verified = new SegmentBytes(VERIFIED_PACK_BYTES);
  /** sums read and checked, by key (a pack's bytes never change, nor do its sums) */
  private sums = new Map<string, Sums>();

  constructor(
    private backend: Backend,
    private log: (e: Record<string, unknown>) => void = () => {},
  ) {}

  private noteVault(key: string) {
    this.knownVaults.add(key);
    if (this.knownVaults.size > VAULTS_KNOWN) this.knownVaults.delete(this.knownVaults.values().next().value!);
  }

  /** Creates a vault with its wrapped-key file (`checkKeyfile`: Malformed, 400, nothing
   *  stored); Inconsistent (409) when the id exists. */
  async create(user: string, id: string, keyfile: Uint8Array): Promise<void> {
    checkVaultId(id);
    checkKeyfile(keyfile);
    const key = vaultKeyfileKey(user, id);
    // a vault whose keyfile was changed has no content object left: its head says it exists
    // (a change writes its head before it deletes the content object)
    const exists = () => new ProtocolError(ErrorCode.Inconsistent, `vault ${id} exists`);
    if (await this.backend.getHead(vaultKeyfileHeadKey(user, id))) throw exists();
    if (!(await this.backend.putIfAbsent(key, keyfile))) throw exists();
    this.noteVault(key);
  }

  /** The user's vaults, by id, with the time each was created (ms). */
  async list(user: string): Promise<{ id: string; created: number }[]> {
    const created = new Map<string, number>();
    const prefix = vaultKeysPrefix(user);
    for await (const e of this.backend.list(prefix)) {
      const id = e.key.slice(prefix.length);
      if (VAULT_ID.test(id)) created.set(id, Math.floor(e.modified));
    }
    // a changed keyfile's head keeps the time its vault was created
    const changed = vaultKeyfilesPrefix(user);
    for await (const e of this.backend.list(changed)) {
      const id = e.key.slice(changed.length);
      const got = VAULT_ID.test(id) ? await this.backend.getHead(e.key) : null;
      if (got) created.set(id, decodeKeyfileHead(got.body, e.key).created);
    }
    return [...created].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, at]) => ({ id, created: at }));
  }

  /** The vault's wrapped-key file; NotFound (404) when there is no such vault. */
  async keyfile(user: string, id: string): Promise<Uint8Array> {
    const current = await this.currentKeyfile(user, checkVaultId(id));
    if (!current) throw noVault(id);
    this.noteVault(vaultKeyfileKey(user, id));
    return current.keyfile;
  }

  /** The keyfile now: the changed one's head (its tag) if there is one, else the content
   *  object as created (tag null: no head yet); null when there is no such vault. */
  private async currentKeyfile(user: string, id: string): Promise<{ keyfile: Uint8Array; tag: string | null; created: number | null } | null> {
    const headKey = vaultKeyfileHeadKey(user, id);
    for (let i = 0; i < 2; i++) {
      const got = await this.backend.getHead(headKey);
      if (got) {
        const h = decodeKeyfileHead(got.body, headKey);
        return { keyfile: h.keyfile, tag: got.tag, created: h.created };
      }
      try {
        return { keyfile: await this.backend.get(vaultKeyfileKey(user, id)), tag: null, created: null };
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
        // no such vault, or a change wrote its head and deleted this since: read the head again
      }
    }
    return null;
  }

  /**
   * Replaces the vault's keyfile (a passphrase change) by compare-and-swap on the keyfile the
   * client read, named by its tag (`replaces`, keys.ts keyfileTag): Inconsistent (409) when the keyfile is
   * another one now (a change elsewhere landed first, or the client read it before one), so of
   * two changes from one keyfile exactly one lands and a stale device overwrites nothing.
   * `keyfile` must be one the server takes (`checkKeyfile`) whose key check is the stored
   * one's (Malformed, 400, otherwise): a
   * keyfile wrapping another key would lock every device out of the vault's data. Nothing is
   * written on a refusal. The keyfile as created is deleted once the first change landed.
   */
  async replaceKeyfile(user: string, id: string, keyfile: Uint8Array, replaces: string): Promise<void> {
    checkVaultId(id);
    const next = checkKeyfile(keyfile);
    const contentKey = vaultKeyfileKey(user, id);
    const headKey = vaultKeyfileHeadKey(user, id);
    for (let tries = 1; ; tries++) {
      const current = await this.currentKeyfile(user, id);
      if (!current) throw noVault(id);
      if (keyfileTag(current.keyfile) !== replaces) {
        throw new ProtocolError(ErrorCode.Inconsistent, `the keyfile of vault ${id} is not the one this change replaces (the passphrase was changed since it was read): nothing changed; open the vault again`);
      }
      let check: Uint8Array;
      try {
        check = keyfileParts(current.keyfile).check;
      } catch {
        throw new ProtocolError(ErrorCode.Inconsistent, `the stored keyfile of vault ${id} is not a version-1 keyfile: its key check cannot be compared; nothing changed`);
      }
      if (!Buffer.from(check).equals(next.check)) {
        throw malformed(`the new keyfile's key check is not vault ${id}'s: it wraps another key, which would lock every device out of the vault's data; nothing changed`);
      }
      const stored = encodeKeyfileHead(current.created ?? (await this.createdOf(contentKey)), keyfile);
      let landed: boolean;
      try {
        landed = (await this.backend.putHead(headKey, stored, current.tag)) !== null;
      } catch (e) {
        // a retried write refused (S3): it landed if the head holds these very bytes now
        if (!(e instanceof UnknownOutcome)) throw e;
        const now = await this.backend.getHead(headKey);
        landed = now !== null && Buffer.from(now.body).equals(stored);
      }
      if (landed) {
        // the keyfile as created opens with the old passphrase: it goes (a crash before this
        // leaves it unread, the head being read first, and the next change deletes it)
        await this.backend.delete(contentKey);
        return;
      }
      // another change landed first: the next read finds its keyfile (409)
      if (tries >= HEAD_SWAP_TRIES) throw new ProtocolError(ErrorCode.Inconsistent, `the keyfile of vault ${id} kept changing: nothing changed`);
    }
  }

  /** When the content object at `key` was written (ms; now if it cannot be told). */
  private async createdOf(key: string): Promise<number> {
    for await (const e of this.backend.list(key)) if (e.key === key) return Math.floor(e.modified);
    return Date.now();
  }

  /** Throws NotFound (404) unless the vault exists: nothing is stored for a vault no client
   *  created. */
  async mustExist(user: string, id: string): Promise<void> {
    const key = vaultKeyfileKey(user, checkVaultId(id));
    if (this.knownVaults.has(key)) return;
    if ((await this.backend.size(key)) === null && !(await this.backend.getHead(vaultKeyfileHeadKey(user, id)))) throw noVault(id);
    this.noteVault(key);
  }

  /**
   * Stores a pack whose hashes the caller computed as it received its bytes (`PackHasher`),
   * and its sums (`hasSums`). True when stored now, false when it was there already. A stored
   * copy that no longer hashes to its id (read twice) is replaced by these good bytes.
   */
  async putPack(user: string, id: string, pack: string, bytes: Uint8Array, hashed: { sha256: string; sums: Uint8Array }): Promise<boolean> {
    checkPackId(pack);
    if (hashed.sha256 !== pack) throw malformed(`the pack's bytes hash to ${hashed.sha256}, not to its id ${pack}: not stored`);
    await this.mustExist(user, id);
    const key = vaultPackKey(user, id, pack);
    let created = false;
    for (let attempt = 0; ; attempt++) {
      if (await this.backend.putIfAbsent(key, bytes)) {
        created = true;
        break;
      }
      const intact = async () => sha256hex(await this.backend.get(key)) === pack;
      try {
        if ((await intact()) || (await intact())) break;
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
        continue; // replaced by another request's repair meanwhile: store it again
      }
      if (attempt >= 2) throw new DamageError(`damaged store: vault ${id} pack ${pack} does not match its hash, and replacing it failed`);
      this.log({ error: 'damage', vault: id, pack, message: 'a stored pack does not match its hash: replaced by the bytes uploaded again' });
      this.verified.drop(key);
      await this.backend.delete(key);
    }
    this.verified.add(key, bytes);
    // after the pack: sums without their pack are never read; a pack without its sums (a crash
    // between the two) has them made again by its first read
    if (hasSums(bytes.length)) await this.putSums(user, id, pack, hashed.sums);
    return created;
  }

  /** Stores the sums of a pack, once: a pack's sums are always the same bytes, and ones found
   *  otherwise are damaged and written again. */
  private async putSums(user: string, id: string, pack: string, sums: Uint8Array): Promise<void> {
    const key = vaultSumsKey(user, id, pack);
    if (!(await this.backend.putIfAbsent(key, sums))) {
      const had = await this.backend.get(key).catch((e) => (e instanceof NotFoundError ? null : Promise.reject(e)));
      if (!had || !Buffer.from(had).equals(Buffer.from(sums))) {
        this.log({ error: 'damage', vault: id, pack, message: 'the sums of a pack are damaged: written again' });
        await this.backend.delete(key);
        await this.backend.putIfAbsent(key, sums);
      }
    }
    const parsed = decodeSums(pack, sums);
    if (parsed) this.keepSums(key, parsed);
  }

  private keepSums(key: string, parsed: Sums) {
    this.sums.delete(key);
    this.sums.set(key, parsed);
    if (this.sums.size > SUMS_KEPT) this.sums.delete(this.sums.keys().next().value!);
  }

  /** The pack's sums, checked against its id; null when there are none, 'damaged' when they
   *  do not check. */
  private async sumsOf(user: string, id: string, pack: string): Promise<Sums | 'damaged' | null> {
    const key = vaultSumsKey(user, id, pack);
    const kept = this.sums.get(key);
    if (kept) return kept;
    let stored;
    try {
      stored = await this.backend.get(key);
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
    const parsed = decodeSums(pack, stored);
    if (!parsed) {
      this.log({ error: 'damage', vault: id, pack, message: 'the sums of a pack are damaged: the pack is read whole' });
      return 'damaged';
    }
    this.keepSums(key, parsed);
    return parsed;
  }

  /** The whole pack, verified against its id; its sums are written again when they are
   *  missing or not the pack's (a pack of one block: damaged ones are deleted, as it has none). */
  private async wholePack(user: string, id: string, pack: string): Promise<Uint8Array> {
    const key = vaultPackKey(user, id, pack);
    const kept = this.verified.whole(key);
    if (kept) return kept;
    let body: Uint8Array;
    try {
      body = await this.backend.get(key);
    } catch (e) {
      if (e instanceof NotFoundError) throw new ProtocolError(ErrorCode.NotFound, `vault ${id} has no pack ${pack}`);
      throw e;
    }
    const h = new PackHasher();
    h.update(body);
    const { sha256, sums } = h.digest();
    if (sha256 !== pack) {
      this.log({ error: 'damage', vault: id, pack, message: 'a stored pack does not match its hash: not served' });
      throw new DamageError(`damaged store: vault ${id} pack ${pack} does not match its hash (not served; uploading it again replaces it)`);
    }
    this.verified.add(key, body);
    const had = await this.sumsOf(user, id, pack);
    if (had === null && !hasSums(body.length)) return body;
    if (had === 'damaged' || !had || !Buffer.from(sums).equals(Buffer.from(encodeSums(pack, had.size, [had.blocks])))) {
      this.sums.delete(vaultSumsKey(user, id, pack));
      if (hasSums(body.length)) await this.putSums(user, id, pack, sums);
      else await this.backend.delete(vaultSumsKey(user, id, pack));
    }
    return body;
  }

  /**
   * Opens a pack for reading: NotFound (404) when it is absent. Each `read` returns checked
   * bytes: from the whole pack verified against its id, or from the blocks the range touches,
   * each against its sum; a block that fails its sum has the whole pack read and verified
   * (it tells a damaged pack, a DamageError, from damaged sums, made again).
   */
  async openPack(user: string, id: string, pack: string): Promise<OpenPack> {
    checkPackId(pack);
    await this.mustExist(user, id);
    const key = vaultPackKey(user, id, pack);
    const kept = this.verified.whole(key);
    const got = kept ? null : await this.sumsOf(user, id, pack);
    const sums = got === 'damaged' ? null : got;
    if (!kept && !sums) {
      const body = await this.wholePack(user, id, pack);
      return { size: body.length, read: async (start, end) => body.subarray(start, end) };
    }
    const size = kept ? kept.length : sums!.size;
    return {
      size,
      read: async (start, end) => {
        if (!(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end && end <= size)) throw new RangeError(`bad range ${start}-${end} of a pack of ${size} bytes`);
        const whole = this.verified.whole(key);
        if (whole) return whole.subarray(start, end);
        const from = Math.floor(start / SUM_BLOCK) * SUM_BLOCK;
        const to = Math.min(size, Math.ceil(end / SUM_BLOCK) * SUM_BLOCK);
        let got: Uint8Array | null = null;
        try {
          got = await this.backend.get(key, { offset: from, length: to - from });
        } catch (e) {
          if (!(e instanceof NotFoundError)) throw e;
        }
        if (got && got.length === to - from && blocksMatch(got, from, sums!.blocks)) return got.subarray(start - from, end - from);
        return (await this.wholePack(user, id, pack)).subarray(start, end);
      },
    };
  }

  /** The vault's packs in id order after `after`, VAULT_PACKS_PAGE at most; `more` when the
   *  listing goes on. */
  async packs(user: string, id: string, after?: string): Promise<{ packs: { id: string; size: number }[]; more: boolean }> {
    if (after !== undefined) checkPackId(after);
    await this.mustExist(user, id);
    const prefix = vaultPacksPrefix(user, id);
    const packs: { id: string; size: number }[] = [];
    for await (const e of this.backend.list(prefix, after === undefined ? {} : { after: prefix + after })) {
      const pack = e.key.slice(prefix.length);
      if (!PACK_ID.test(pack)) continue;
      if (packs.length === VAULT_PACKS_PAGE) return { packs, more: true };
      packs.push({ id: pack, size: e.size });
    }
    return { packs, more: false };
  }

  /** The vault's head: its counter, the client's bytes and the packs it names in use; null
   *  before the first. */
  async head(user: string, id: string): Promise<VaultHead | null> {
    await this.mustExist(user, id);
    const key = vaultHeadKey(user, id);
    const got = await this.backend.getHead(key);
    return got && decodeVaultHead(got.body, key);
  }

  /**
   * Writes the vault's head if it is still at `counter` (0: none yet): then its counter is
   * counter + 1. Otherwise nothing is written and the current counter is told. Of two writers
   * at one counter exactly one lands (the backend's compare-and-swap). `packs` (ascending, each
   * once) are the packs the head references: each one the head before did not name must be
   * stored and not condemned by a collection, else nothing is written (Inconsistent, 409). The
   * check and the write see the same stored head: a collection that condemns a pack meanwhile
   * changes the head's tag, so the write fails its compare-and-swap and checks again
   * (docs/vaults.md, "Pack collection").
   */
  async putHead(user: string, id: string, body: Uint8Array, counter: number, packs: string[]): Promise<HeadSwap> {
    if (!Number.isSafeInteger(counter) || counter < 0 || counter >= Number.MAX_SAFE_INTEGER) throw malformed('a head counter is a whole number from 0');
    if (body.length < 1 || body.length > VAULT_HEAD_MAX) throw malformed(`a head is 1 to ${VAULT_HEAD_MAX} bytes`);
    if (packs.length > VAULT_HEAD_PACKS_MAX) throw malformed(`a head names at most ${VAULT_HEAD_PACKS_MAX} packs in use`);
    for (let i = 0; i < packs.length; i++) if (!PACK_ID.test(packs[i]) || (i > 0 && !(packs[i - 1] < packs[i]))) throw malformed('the packs a head names are pack ids, ascending, each once');
    await this.mustExist(user, id);
    const key = vaultHeadKey(user, id);
    for (let tries = 1; ; tries++) {
      const got = await this.backend.getHead(key);
      const was = got ? decodeVaultHead(got.body, key) : null;
      const current = was?.counter ?? 0;
      if (current !== counter) return { ok: false, counter: current };
      const condemned = was?.condemned ?? [];
      await this.mustHold(user, id, packs, was?.packs ?? [], condemned);
      const stored = encodeVaultHead({ counter: counter + 1, body, packs, condemned });
      try {
        if (await this.backend.putHead(key, stored, got?.tag ?? null)) return { ok: true, counter: counter + 1 };
      } catch (e) {
        // a retried write refused (S3): it landed if the head holds these very bytes now
        if (!(e instanceof UnknownOutcome)) throw e;
        const now = await this.backend.getHead(key);
        if (now && Buffer.from(now.body).equals(stored)) return { ok: true, counter: counter + 1 };
      }
      // another writer's head, or a collection's change of the condemned packs: read again
      if (tries >= HEAD_SWAP_TRIES) {
        const now = await this.backend.getHead(key);
        return { ok: false, counter: now ? decodeVaultHead(now.body, key).counter : 0 };
      }
    }
  }

  /** Refuses (Inconsistent) a head naming a pack that `before` (the packs the stored head
   *  names) lacks and that is condemned or not stored. */
  private async mustHold(user: string, id: string, packs: string[], before: string[], condemned: string[]): Promise<void> {
    const had = new Set(before);
    const doomed = new Set(condemned);
    const fresh = packs.filter((p) => !had.has(p));
    const lacking: string[] = fresh.filter((p) => doomed.has(p));
    for (let i = 0; i < fresh.length; i += 16) {
      const sizes = await Promise.all(fresh.slice(i, i + 16).map((p) => (doomed.has(p) ? 0 : this.backend.size(vaultPackKey(user, id, p)))));
      sizes.forEach((n, k) => n === null && lacking.push(fresh[i + k]));
    }
    if (lacking.length) {
      throw new ProtocolError(ErrorCode.Inconsistent, `the head names ${lacking.length} pack${lacking.length > 1 ? 's' : ''} the vault does not hold (${lacking.slice(0, 3).join(', ')}${lacking.length > 3 ? ', …' : ''}): collected as no head named ${lacking.length > 1 ? 'them' : 'it'} within the grace period, or never stored; nothing written (push again)`);
    }
  }
}

const noVault = (id: string) => new ProtocolError(ErrorCode.NotFound, `no vault ${id}`);
/** Compare-and-swaps a head write tries while only the condemned packs changed under it. */
const HEAD_SWAP_TRIES = 16;

/** How long a pack no head names is kept by default (`--vault-gc-grace-ms`): a device uploads
 *  its packs before the head that names them, and a push may take long. */
export const VAULT_GC_GRACE_MS = 24 * 3_600_000;

export interface VaultCollection {
  /** vaults looked at, packs deleted (with their sums) and their bytes */
  vaults: number;
  packs: number;
  bytes: number;
  /** vaults left alone this time, and why (no head yet, a head that names no packs, a head
   *  that kept moving, a damaged head) */
  skipped: string[];
}

/** The store's vaults and their objects: vaults/<user>/(heads|keys|keyfiles|packs|sums)/<id>[/<pack>]. */
const VAULT_OBJECT = /^vaults\/([^/]+)\/(heads|keys|keyfiles|packs|sums)\/([0-9a-f]{32})(?:\/([0-9a-f]{64}))?$/;

/** One listing of vaults/: per vault with a head, packs or sums (by its head's key), its packs
 *  and their sums; `all`, when given, gets every vault any object names (`<user>/<id>`, the
 *  user as encoded in keys). */
async function listVaults(backend: Backend, all?: Set<string>): Promise<Map<string, { packs: Map<string, { size: number; modified: number }>; sums: Map<string, number> }>> {
  const found = new Map<string, { packs: Map<string, { size: number; modified: number }>; sums: Map<string, number> }>();
  const vaultOf = (user: string, id: string) => {
    const key = `${VAULTS_PREFIX}${user}/heads/${id}`;
    let v = found.get(key);
    if (!v) found.set(key, (v = { packs: new Map(), sums: new Map() }));
    return v;
  };
  for await (const e of backend.list(VAULTS_PREFIX)) {
    const m = VAULT_OBJECT.exec(e.key);
    if (!m) continue;
    const [, user, kind, id, pack] = m;
    all?.add(`${user}/${id}`);
    if (kind === 'heads' && !pack) vaultOf(user, id);
    else if (kind === 'packs' && pack) vaultOf(user, id).packs.set(pack, { size: e.size, modified: e.modified });
    else if (kind === 'sums' && pack) vaultOf(user, id).sums.set(pack, e.modified);
  }
  return found;
}

/** A keyfile head's creation time beyond this far ahead of the checker's clock is damage. */
const CREATED_AHEAD_MS = 24 * 3_600_000;

/**
 * `dsync check` of one vault's keyfile, as the server would serve it and a client decode it:
 * the changed keyfile's head (`vaults/<user>/keyfiles/<id>`) decodes (its magic, a creation time
 * that is a time, the keyfile's size) and the keyfile in it, and the keyfile as created
 * (`vaults/<user>/keys/<id>`), are version-1 keyfiles a client takes (keys.ts `keyfileParts`:
 * version, Argon2id parameters, exact size); where both are left (a change that stopped before
 * deleting the one as created), their key checks agree; a vault with no keyfile at all is
 * reported (no device can open it). Damage in the salt, the key check or the sealed key is
 * beyond what the server can see: only the passphrase or the recovery key tells.
 */
async function checkVaultKeyfile(backend: Backend, user: string, id: string, fail: (line: string) => void): Promise<void> {
  const headKey = `${VAULTS_PREFIX}${user}/keyfiles/${id}`;
  const createdKey = `${VAULTS_PREFIX}${user}/keys/${id}`;
  const damaged = (key: string, why: string) => fail(`${key}: a damaged vault keyfile (${why}): no device can open vault ${id} until it is restored`);
  const checks: { key: string; check: Uint8Array }[] = [];
  const got = await backend.getHead(headKey);
  if (got) {
    try {
      const h = decodeKeyfileHead(got.body, headKey);
      if (!Number.isSafeInteger(h.created) || h.created < 1 || h.created > Date.now() + CREATED_AHEAD_MS) damaged(headKey, `its creation time ${h.created} is not a time`);
      checks.push({ key: headKey, check: keyfileParts(h.keyfile).check });
    } catch (e) {
      if (!(e instanceof VaultError || e instanceof DamageError)) throw e;
      damaged(headKey, e instanceof DamageError ? `not a keyfile head: DSVK 0x01, a creation time, 1 to ${VAULT_KEYFILE_MAX} bytes of keyfile` : e.message);
    }
  }
  let created: Uint8Array | null = null;
  try {
    created = await backend.get(createdKey);
  } catch (e) {
    // a change deletes the keyfile as created once its head is written
    if (!(e instanceof NotFoundError)) throw e;
  }
  if (created) {
    try {
      checks.push({ key: createdKey, check: keyfileParts(created).check });
    } catch (e) {
      if (!(e instanceof VaultError)) throw e;
      // unread while the changed keyfile is there, but a sign of damage all the same
      damaged(createdKey, e.message);
    }
  }
  if (!got && !created) {
    // listed but gone: a keyfile is never deleted while it is the vault's only one
    fail(`${VAULTS_PREFIX}${user}/…/${id}: vault ${id} has objects but no keyfile: no device can open it`);
    return;
  }
  if (checks.length === 2 && !Buffer.from(checks[0].check).equals(checks[1].check)) {
    fail(`${createdKey}: its key check is not that of ${headKey} (a passphrase change keeps the key check): one of them is damaged`);
  }
}

/** `dsync check` of the vaults: every keyfile decodes (`checkVaultKeyfile`), every head parses,
 *  and every pack a head names is stored (one line of `fail` per problem). What is in a pack
 *  only its clients can check. `vaults`: the vaults found (any object names them). */
export async function checkVaults(backend: Backend, fail: (line: string) => void): Promise<{ vaults: number }> {
  const all = new Set<string>();
  const listed = await listVaults(backend, all);
  for (const v of [...all].sort()) {
    const [user, id] = v.split('/');
    try {
      await checkVaultKeyfile(backend, user, id, fail);
    } catch (e) {
      fail(`${VAULTS_PREFIX}${user}/keys/${id}: the keyfile could not be read: ${(e as Error).message}`);
    }
  }
  for (const [headKey, v] of listed) {
    const got = await backend.getHead(headKey);
    if (!got) continue;
    try {
      const h = decodeVaultHead(got.body, headKey);
      const lacking = (h.packs ?? []).filter((p) => !v.packs.has(p));
      if (lacking.length) fail(`${headKey}: the head names ${lacking.length} pack${lacking.length > 1 ? 's' : ''} the store lacks: ${lacking.slice(0, 3).join(', ')}${lacking.length > 3 ? ', …' : ''}`);
    } catch (e) {
      fail(`${headKey}: ${(e as Error).message}`);
    }
  }
  return { vaults: all.size };
}

/**
 * Deletes, with their sums, the packs of every vault that its head does not name in use and
 * that are older than `graceMs` (docs/vaults.md, "Pack collection"). Per vault, as restic's
 * prune keeps what a snapshot references but without a lock:
 *
 *   1. read the head (its tag): the packs it names, those condemned already;
 *   2. condemn the packs it does not name, older than graceMs (and those whose sums alone are
 *      left), by compare-and-swap of the head on that tag: the swap lands only if no head was
 *      written since the read, so no condemned pack is in use;
 *   3. delete the condemned packs and their sums: from the swap on, every head write checks its
 *      new packs against the condemned ones on the very head it swaps (`Vaults.putHead`), so
 *      no head can name one again;
 *   4. take the deleted packs off the condemned list (compare-and-swap again; a collection that
 *      stopped before leaves them condemned, and the next one deletes and clears them).
 *
 * A vault without a head, or whose head names no packs (stored before heads did), is left
 * alone. `now` is the collector's clock against the store's times of upload.
 */
export async function collectVaultPacks(backend: Backend, o: { graceMs: number; log?: (e: Record<string, unknown>) => void; now?: () => number }): Promise<VaultCollection> {
  if (!Number.isSafeInteger(o.graceMs) || o.graceMs < 0) throw new RangeError(`vault gc: graceMs must be a whole number of milliseconds, got ${o.graceMs}`);
  const now = o.now ?? Date.now;
  const out: VaultCollection = { vaults: 0, packs: 0, bytes: 0, skipped: [] };
  for (const [headKey, v] of await listVaults(backend)) {
    out.vaults++;
    const prefix = headKey.replace('/heads/', '/packs/') + '/';
    const sumsPrefix = headKey.replace('/heads/', '/sums/') + '/';
    try {
      // 1, 2: condemn by compare-and-swap on the head read
      let condemned: string[] | null = null;
      for (let tries = 0; tries < HEAD_SWAP_TRIES && !condemned; tries++) {
        const got = await backend.getHead(headKey);
        if (!got) {
          out.skipped.push(`${headKey}: no head yet`);
          break;
        }
        const h = decodeVaultHead(got.body, headKey);
        if (!h.packs) {
          out.skipped.push(`${headKey}: its head names no packs in use (stored before heads did)`);
          break;
        }
        const keep = new Set(h.packs);
        const already = new Set(h.condemned);
        const t = now();
        const more: string[] = [];
        for (const [p, e] of v.packs) if (!keep.has(p) && !already.has(p) && t - e.modified >= o.graceMs) more.push(p);
        for (const [p, modified] of v.sums) if (!v.packs.has(p) && !keep.has(p) && !already.has(p) && t - modified >= o.graceMs) more.push(p);
        const all = [...new Set([...h.condemned, ...more.slice(0, Math.max(0, VAULT_HEAD_PACKS_MAX - h.condemned.length))])].sort();
        if (!all.length) condemned = [];
        else if (!more.length || (await backend.putHead(headKey, encodeVaultHead({ ...h, packs: h.packs, condemned: all }), got.tag))) condemned = all;
        // else a head landed meanwhile: read it again
      }
      if (!condemned) {
        if (!out.skipped.some((s) => s.startsWith(headKey))) out.skipped.push(`${headKey}: its head kept moving while packs were condemned`);
        continue;
      }
      if (!condemned.length) continue;
      // 3: delete them, the pack before its sums (sums without their pack are never read)
      for (const p of condemned) {
        await backend.delete(prefix + p);
        await backend.delete(sumsPrefix + p);
        const listed = v.packs.get(p);
        if (listed) {
          out.packs++;
          out.bytes += listed.size;
        }
      }
      o.log?.({ gc: 'vault packs deleted', head: headKey, packs: condemned.length });
      // 4: off the condemned list
      const gone = new Set(condemned);
      for (let tries = 0; tries < HEAD_SWAP_TRIES; tries++) {
        const got = await backend.getHead(headKey);
        if (!got) break;
        const h = decodeVaultHead(got.body, headKey);
        if (!h.packs) break;
        if (await backend.putHead(headKey, encodeVaultHead({ ...h, packs: h.packs, condemned: h.condemned.filter((p) => !gone.has(p)) }), got.tag)) break;
      }
    } catch (e) {
      if (!(e instanceof DamageError)) throw e;
      out.skipped.push(`${headKey}: ${e.message}`);
      o.log?.({ error: 'damage', head: headKey, message: e.message });
    }
  }
  return out;
}
