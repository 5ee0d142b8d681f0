/**
 * `dsync check` of the vaults (docs/vaults.md, "The server"): what the server can check
 * without a key, that each vault's keyfile decodes as a client would take it, that its head
 * parses, and that every pack the head names is stored. What is in a pack only its clients
 * can check.
 */
import { VAULT_KEYFILE_MAX } from '../../../shared/src/base/limits.ts';
import { keyfileParts } from '../../../shared/src/vault/keys.ts';
import { VaultError } from '../../../shared/src/vault/format.ts';
import { type Backend, NotFoundError } from './backend.ts';
import { DamageError } from './errors.ts';
import { VAULTS_PREFIX } from './keys.ts';
import { decodeKeyfileHead, decodeVaultHead } from './vault-format.ts';
import { listVaults } from './vault-gc.ts';

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
