/**
 * A vault's packs on the server (docs/vaults.md, "The server"): content objects under their id
 * (shared/src/vault/format.ts `packIdInput`: a SHA-256 over the SHA-256 of each PACK_BLOCK; a
 * pack an earlier dsync uploaded: the SHA-256 of its bytes). A pack is stored only when its
 * bytes give its id, and served only after what is read of it is checked again (a damaged pack
 * is a DamageError, never wrong bytes): a whole pack against its id, a range against the
 * SHA-256 of each PACK_BLOCK it touches, kept beside a pack of more than one block (its
 * **sums**, bound to its id, vault-format.ts), so that a small range costs a small read; a pack of one block has none:
 * any range of it reads it whole, checked against its id. Nothing is deleted here but a pack
 * found damaged when its good bytes are stored again (`put`), and sums found damaged (made
 * again from the verified pack); the collection (vault-gc.ts) deletes the packs no head names.
 */
import { createHash } from 'node:crypto';
import { VAULT_PACKS_PAGE } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { type Backend, NotFoundError } from './backend.ts';
import { DamageError } from './errors.ts';
import { PACK_ID, vaultPackKey, vaultPacksPrefix, vaultSumsKey } from './keys.ts';
import { PACK_BLOCK } from '../../../shared/src/vault/format.ts';
import { type Hashed, hashed } from '../../../shared/src/vault/pack-hasher.ts';
import { type Sums, checkPackId, decodeSums, encodeSums, hasSums, malformed } from './vault-format.ts';
import { SegmentBytes } from './verified.ts';

/** Bytes of verified packs this process keeps in memory (least recently used dropped first),
 *  so that a client reading a pack in several ranges costs one read of it from the store. */
const VERIFIED_PACK_BYTES = 64 << 20;
/** Checked sums kept in memory (each at most 8 KiB for a 16 MiB pack), least recently used
 *  dropped first. */
const SUMS_KEPT = 1024;

/** Whether `bytes`, whose hashes are `h`, are the pack `pack`: by the id their block sums give,
 *  or (a pack an earlier dsync uploaded) by the SHA-256 of the bytes, hashed again only then. */
const isPack = (bytes: Uint8Array, h: Hashed, pack: string) => h.id === pack || sha256hex(bytes) === pack;

/** Whether `bytes`, read from offset `from` (a block boundary), match their blocks' sums. */
function blocksMatch(bytes: Uint8Array, from: number, blocks: Buffer): boolean {
  for (let at = 0; at < bytes.length; at += PACK_BLOCK) {
    const i = (from + at) / PACK_BLOCK;
    const sum = createHash('sha256').update(bytes.subarray(at, at + PACK_BLOCK)).digest();
    if (!sum.equals(blocks.subarray(32 * i, 32 * i + 32))) return false;
  }
  return true;
}

/** A pack opened for reading (`VaultPacks.open`): its size, and its bytes [start, end), each
 *  checked before it is returned. */
export interface OpenPack {
  size: number;
  read(start: number, end: number): Promise<Uint8Array>;
}

const sha256hex = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** The packs of every vault of the store: their storing, reading (checked) and listing. */
export class VaultPacks {
  private verified = new SegmentBytes(VERIFIED_PACK_BYTES);
  /** sums read and checked, by key (a pack's bytes never change, nor do its sums) */
  private sums = new Map<string, Sums>();

  /** `mustExist`: throws unless the vault exists (nothing is stored for a vault no client
   *  created). */
  constructor(
    private backend: Backend,
    private mustExist: (user: string, id: string) => Promise<void>,
    private log: (e: Record<string, unknown>) => void,
  ) {}

  /**
   * Stores a pack whose hashes the caller computed as it received its bytes (`PackHasher`),
   * and its sums (`hasSums`). True when stored now, false when it was there already. A stored
   * copy that is no longer its id's (read twice) is replaced by these good bytes.
   */
  async put(user: string, id: string, pack: string, bytes: Uint8Array, h: Hashed): Promise<boolean> {
    checkPackId(pack);
    if (!isPack(bytes, h, pack)) throw malformed(`the pack's bytes hash to ${h.id}, not to its id ${pack}: not stored`);
    await this.mustExist(user, id);
    const key = vaultPackKey(user, id, pack);
    let created = false;
    for (let attempt = 0; ; attempt++) {
      if (await this.backend.putIfAbsent(key, bytes)) {
        created = true;
        break;
      }
      const intact = async () => {
        const stored = await this.backend.get(key);
        return isPack(stored, hashed(stored), pack);
      };
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
    if (hasSums(bytes.length)) await this.putSums(user, id, pack, encodeSums(pack, h.size, h.blocks));
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
    const h = hashed(body);
    if (!isPack(body, h, pack)) {
      this.log({ error: 'damage', vault: id, pack, message: 'a stored pack does not match its hash: not served' });
      throw new DamageError(`damaged store: vault ${id} pack ${pack} does not match its hash (not served; uploading it again replaces it)`);
    }
    this.verified.add(key, body);
    const had = await this.sumsOf(user, id, pack);
    if (had === null && !hasSums(body.length)) return body;
    const sums = encodeSums(pack, h.size, h.blocks);
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
  async open(user: string, id: string, pack: string): Promise<OpenPack> {
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
        const from = Math.floor(start / PACK_BLOCK) * PACK_BLOCK;
        const to = Math.min(size, Math.ceil(end / PACK_BLOCK) * PACK_BLOCK);
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
  async list(user: string, id: string, after?: string): Promise<{ packs: { id: string; size: number }[]; more: boolean }> {
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
}
