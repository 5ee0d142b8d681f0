/**
 * Vaults (docs/vaults.md, "The server"): per user and vault, objects only the vault's clients
 * can read. The server keeps them and checks what it can without a key:
 *
 *   - one wrapped-key file, written once when the vault is created (a content object: a
 *     second create of the id finds it and is refused);
 *   - packs, content objects under the SHA-256 of their bytes: a pack is stored only when its
 *     bytes hash to its id, and served only after they are read back and hash to it again
 *     (a damaged pack is a DamageError, never wrong bytes);
 *   - one head, a head object changed only by compare-and-swap on the count of heads written
 *     (its **counter**), so two devices cannot overwrite each other's head.
 *
 * Keys (keys.ts): vaults/<user>/keys/<id>, vaults/<user>/heads/<id>,
 * vaults/<user>/packs/<id>/<pack>. gc, check and repack list only ns/, data/ and index/, so
 * they never see, count or delete a vault's objects. Nothing is deleted here but a pack found
 * damaged when its good bytes are stored again (`putPack`).
 */
import { createHash } from 'node:crypto';
import { VAULT_HEAD_MAX, VAULT_KEYFILE_MAX, VAULT_PACKS_PAGE } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { type Backend, NotFoundError, UnknownOutcome } from './backend.ts';
import { DamageError } from './errors.ts';
import { PACK_ID, VAULT_ID, vaultHeadKey, vaultKeyfileKey, vaultKeysPrefix, vaultPackKey, vaultPacksPrefix } from './keys.ts';
import { SegmentBytes } from './verified.ts';

/** Bytes of verified packs this process keeps in memory (least recently used dropped first),
 *  so that a client reading a pack in several ranges costs one read of it from the store. */
const VERIFIED_PACK_BYTES = 64 << 20;

/** A stored head: HEAD_MAGIC, the counter (8 bytes, big-endian), the client's body. */
const HEAD_MAGIC = Buffer.from('DSVH\x01', 'latin1');
const HEAD_PREFIX = HEAD_MAGIC.length + 8;

const sha256hex = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const malformed = (why: string) => new ProtocolError(ErrorCode.Malformed, why);

export function encodeVaultHead(counter: number, body: Uint8Array): Uint8Array {
  const out = Buffer.allocUnsafe(HEAD_PREFIX + body.length);
  HEAD_MAGIC.copy(out, 0);
  out.writeBigUInt64BE(BigInt(counter), HEAD_MAGIC.length);
  out.set(body, HEAD_PREFIX);
  return out;
}

/** A stored head's counter and body; a DamageError when it is not one `encodeVaultHead` makes. */
export function decodeVaultHead(stored: Uint8Array, key: string): { counter: number; body: Uint8Array } {
  const b = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  const counter = b.length >= HEAD_PREFIX ? Number(b.readBigUInt64BE(HEAD_MAGIC.length)) : 0;
  if (b.length < HEAD_PREFIX || !b.subarray(0, HEAD_MAGIC.length).equals(HEAD_MAGIC) || !Number.isSafeInteger(counter) || counter < 1 || b.length - HEAD_PREFIX > VAULT_HEAD_MAX) {
    throw new DamageError(`damaged store object: ${key} is not a vault head`);
  }
  return { counter, body: b.subarray(HEAD_PREFIX) };
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
  private known = new Set<string>();
  private verified = new SegmentBytes(VERIFIED_PACK_BYTES);

  constructor(
    private backend: Backend,
    private log: (e: Record<string, unknown>) => void = () => {},
  ) {}

  /** Creates a vault with its wrapped-key file; Inconsistent (409) when the id exists. */
  async create(user: string, id: string, keyfile: Uint8Array): Promise<void> {
    checkVaultId(id);
    if (keyfile.length < 1 || keyfile.length > VAULT_KEYFILE_MAX) throw malformed(`a keyfile is 1 to ${VAULT_KEYFILE_MAX} bytes`);
    const key = vaultKeyfileKey(user, id);
    if (!(await this.backend.putIfAbsent(key, keyfile))) throw new ProtocolError(ErrorCode.Inconsistent, `vault ${id} exists`);
    this.known.add(key);
  }

  /** The user's vaults, by id, with the time each was created (ms). */
  async list(user: string): Promise<{ id: string; created: number }[]> {
    const prefix = vaultKeysPrefix(user);
    const out = [];
    for await (const e of this.backend.list(prefix)) {
      const id = e.key.slice(prefix.length);
      if (VAULT_ID.test(id)) out.push({ id, created: Math.floor(e.modified) });
    }
    return out;
  }

  /** The vault's wrapped-key file; NotFound (404) when there is no such vault. */
  async keyfile(user: string, id: string): Promise<Uint8Array> {
    const key = vaultKeyfileKey(user, checkVaultId(id));
    try {
      const body = await this.backend.get(key);
      this.known.add(key);
      return body;
    } catch (e) {
      if (e instanceof NotFoundError) throw noVault(id);
      throw e;
    }
  }

  /** Throws NotFound (404) unless the vault exists: nothing is stored for a vault no client
   *  created. */
  private async mustExist(user: string, id: string): Promise<void> {
    const key = vaultKeyfileKey(user, checkVaultId(id));
    if (this.known.has(key)) return;
    if ((await this.backend.size(key)) === null) throw noVault(id);
    this.known.add(key);
  }

  /**
   * Stores a pack whose bytes' SHA-256 the caller computed as it received them (`sha256`).
   * True when stored now, false when it was there already. A stored copy that no longer hashes
   * to its id (read twice) is replaced by these good bytes.
   */
  async putPack(user: string, id: string, pack: string, bytes: Uint8Array, sha256: string): Promise<boolean> {
    checkPackId(pack);
    if (sha256 !== pack) throw malformed(`the pack's bytes hash to ${sha256}, not to its id ${pack}: not stored`);
    await this.mustExist(user, id);
    const key = vaultPackKey(user, id, pack);
    for (let attempt = 0; ; attempt++) {
      if (await this.backend.putIfAbsent(key, bytes)) {
        this.verified.add(key, bytes);
        return true;
      }
      const intact = async () => sha256hex(await this.backend.get(key)) === pack;
      try {
        if ((await intact()) || (await intact())) return false;
      } catch (e) {
        if (!(e instanceof NotFoundError)) throw e;
        continue; // replaced by another request's repair meanwhile: store it again
      }
      if (attempt >= 2) throw new DamageError(`damaged store: vault ${id} pack ${pack} does not match its hash, and replacing it failed`);
      this.log({ error: 'damage', vault: id, pack, message: 'a stored pack does not match its hash: replaced by the bytes uploaded again' });
      this.verified.drop(key);
      await this.backend.delete(key);
    }
  }

  /** A pack's bytes, verified against its id; NotFound (404) when absent, DamageError (500)
   *  when the stored bytes do not hash to it. */
  async readPack(user: string, id: string, pack: string): Promise<Uint8Array> {
    checkPackId(pack);
    await this.mustExist(user, id);
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
    if (sha256hex(body) !== pack) {
      this.log({ error: 'damage', vault: id, pack, message: 'a stored pack does not match its hash: not served' });
      throw new DamageError(`damaged store: vault ${id} pack ${pack} does not match its hash (not served; uploading it again replaces it)`);
    }
    this.verified.add(key, body);
    return body;
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

  /** The vault's head and its counter, or null before the first. */
  async head(user: string, id: string): Promise<{ counter: number; body: Uint8Array } | null> {
    await this.mustExist(user, id);
    const key = vaultHeadKey(user, id);
    const got = await this.backend.getHead(key);
    return got && decodeVaultHead(got.body, key);
  }

  /**
   * Writes the vault's head if it is still at `counter` (0: none yet): then its counter is
   * counter + 1. Otherwise nothing is written and the current counter is told. Of two writers
   * at one counter exactly one lands (the backend's compare-and-swap).
   */
  async putHead(user: string, id: string, body: Uint8Array, counter: number): Promise<HeadSwap> {
    if (!Number.isSafeInteger(counter) || counter < 0 || counter >= Number.MAX_SAFE_INTEGER) throw malformed('a head counter is a whole number from 0');
    if (body.length < 1 || body.length > VAULT_HEAD_MAX) throw malformed(`a head is 1 to ${VAULT_HEAD_MAX} bytes`);
    await this.mustExist(user, id);
    const key = vaultHeadKey(user, id);
    const got = await this.backend.getHead(key);
    const current = got ? decodeVaultHead(got.body, key).counter : 0;
    if (current !== counter) return { ok: false, counter: current };
    const stored = encodeVaultHead(counter + 1, body);
    try {
      if (await this.backend.putHead(key, stored, got?.tag ?? null)) return { ok: true, counter: counter + 1 };
    } catch (e) {
      // a retried write refused (S3): it landed if the head holds these very bytes now
      if (!(e instanceof UnknownOutcome)) throw e;
      const now = await this.backend.getHead(key);
      if (now && Buffer.from(now.body).equals(stored)) return { ok: true, counter: counter + 1 };
    }
    const now = await this.backend.getHead(key);
    return { ok: false, counter: now ? decodeVaultHead(now.body, key).counter : 0 };
  }
}

const noVault = (id: string) => new ProtocolError(ErrorCode.NotFound, `no vault ${id}`);
