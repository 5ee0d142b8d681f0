/**
 * Vaults (docs/vaults.md, "The server"): per user and vault, objects only the vault's clients
 * can read. The server keeps them and checks what it can without a key. This file holds the
 * vault's two changing objects, each swapped only by compare-and-swap, and its existence:
 *
 *   - one wrapped-key file, written when the vault is created (a content object: a second
 *     create of the id finds it and is refused); a passphrase change replaces it by a head of
 *     its own (compare-and-swap on the keyfile the client read; the one as created is then
 *     deleted), which only a version-1 keyfile with the same key check may replace;
 *   - one head, a head object changed only by compare-and-swap on the count of heads written
 *     (its **counter**), so two devices cannot overwrite each other's head; with it, the packs
 *     the head names as in use (the client's list) and the packs a collection condemned.
 *
 * The rest, one job a file: the forms of these objects and of the routes' inputs
 * (vault-format.ts), the packs and their sums (vault-packs.ts, `Vaults.packs`), the collection
 * of the packs no head names (vault-gc.ts `collectVaultPacks`, run by gc) and `dsync check` of
 * the vaults (vault-check.ts). Keys (keys.ts): vaults/<user>/keys/<id>,
 * vaults/<user>/keyfiles/<id>, vaults/<user>/heads/<id>, vaults/<user>/packs/<id>/<pack>,
 * vaults/<user>/sums/<id>/<pack>; check and repack list only ns/, data/ and index/.
 */
import { VAULT_HEAD_MAX, VAULT_HEAD_PACKS_MAX } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { type Backend, NotFoundError, UnknownOutcome } from './backend.ts';
import { PACK_ID, VAULT_ID, vaultHeadKey, vaultKeyfileHeadKey, vaultKeyfileKey, vaultKeyfilesPrefix, vaultKeysPrefix, vaultPackKey } from './keys.ts';
import { keyfileParts, keyfileTag } from '../../../shared/src/vault/keys.ts';
import { type VaultHead, checkKeyfile, checkVaultId, decodeKeyfileHead, decodeVaultHead, encodeKeyfileHead, encodeVaultHead, malformed } from './vault-format.ts';
import { VaultPacks } from './vault-packs.ts';

/** Vaults remembered to exist (the oldest forgotten first, then asked of the store again). */
const VAULTS_KNOWN = 100_000;

export type HeadSwap = { ok: true; counter: number } | { ok: false; counter: number };

/** The vaults of a store, every user's: each one's existence, its keyfile and its head, and
 *  their packs (`packs`). */
export class Vaults {
  /** vaults (by keyfile key) known to exist: a vault is never deleted, so this never goes stale */
  private knownVaults = new Set<string>();
  /** the vaults' packs: stored, read (checked) and listed */
  readonly packs: VaultPacks;

  constructor(
    private backend: Backend,
    log: (e: Record<string, unknown>) => void = () => {},
  ) {
    this.packs = new VaultPacks(backend, (user, id) => this.mustExist(user, id), log);
  }

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
export const HEAD_SWAP_TRIES = 16;
