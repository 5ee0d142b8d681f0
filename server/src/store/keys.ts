/**
 * The store's keys (docs/store.md, "Keys"). Every key is built here.
 *
 *   data/<2 hex>/<32 hex>                   a segment: Delta Bytes (random id)
 *   index/<2 hex>/<64 hex>                  a version index (SHA-256 of its body)
 *   ns/<user>/files/<encoded name>          a file head
 *   ns/<user>/uploads/<encoded name>        the interrupted uploads of a name (resume state)
 *   ns/<user>/folders/<encoded folder>      a folder catalog (catalog.ts)
 *   changed/<user>                          the namespace's change marker (catalog.ts markChanged)
 *   gc/state                                the garbage collector's head
 *   health/<32 hex>                         a server's health probe head (http/health.ts)
 *   journal/<32 hex>                        a head change's mark, until its catalog is noted (commit.ts)
 *   auth/sessions/<64 hex>                  a page login (SHA-256 of its session id; logins.ts)
 *   vaults/<user>/keys/<32 hex>             a vault's wrapped-key file as created (vaults.ts)
 *   vaults/<user>/keyfiles/<32 hex>         its keyfile once changed, a head (vaults.ts)
 *   vaults/<user>/heads/<32 hex>            a vault's head (vaults.ts)
 *   vaults/<user>/packs/<32 hex>/<64 hex>   a vault's pack (SHA-256 of its body; vault-packs.ts)
 *   vaults/<user>/sums/<32 hex>/<64 hex>    the block hashes of that pack (vault-packs.ts)
 *
 * A name is encoded injectively: every byte outside [A-Za-z0-9_-] becomes %XX (upper-case
 * hex), the result is cut into components of exactly NAME_COMPONENT characters (the last one
 * shorter), and the last gets the suffix ".f". No encoded character is '.', so a leaf (".f")
 * is never a folder of another name's key, and decoding (drop ".f", join the components,
 * undo %XX) is unique.
 */
import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

export const NAME_COMPONENT = 200;
const LEAF = '.f';

/** `text`'s UTF-8 bytes as key characters: [A-Za-z0-9_-] as they are, every other byte %XX
 *  (upper-case hex). Injective, and never a '.' or a '/'. */
function escapeBytes(text: string): string {
  if (/^[A-Za-z0-9_-]*$/.test(text)) return text;
  let out = '';
  for (const b of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9_-]/.test(c) ? c : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

export function encodeName(name: string): string {
  const out = escapeBytes(name);
  const parts: string[] = [];
  for (let o = 0; o < out.length || o === 0; o += NAME_COMPONENT) parts.push(out.slice(o, o + NAME_COMPONENT));
  return parts.join('/') + LEAF;
}

/** The name an encoded key suffix stands for, or null when it is not one `encodeName` makes. */
export function decodeName(encoded: string): string | null {
  if (!encoded.endsWith(LEAF)) return null;
  const parts = encoded.slice(0, -LEAF.length).split('/');
  if (parts.slice(0, -1).some((p) => p.length !== NAME_COMPONENT) || parts[parts.length - 1].length > NAME_COMPONENT) return null;
  const flat = parts.join('');
  if (!/^(?:[A-Za-z0-9_-]|%[0-9A-F]{2})*$/.test(flat)) return null;
  const bytes = Buffer.from(flat.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))), 'latin1');
  const name = bytes.toString('utf8');
  return encodeName(name) === encoded ? name : null;
}

/** A user (namespace) as a key component: the same byte encoding, no cut. */
export function encodeUser(user: string): string {
  const out = escapeBytes(user);
  if (!out || out.length > NAME_COMPONENT) throw new Error(`user name ${JSON.stringify(user)} is empty or too long`);
  return out;
}

export const SEGMENT_ID = /^[0-9a-f]{32}$/;
export const INDEX_ID = /^[0-9a-f]{64}$/;

/** Hex digits at the start of a segment id that the segments written for one file share: its
 *  **family**, so that a commit asks the stamps of a file's segments with one listing of their
 *  common prefix (docs/store.md §2, §9). The rest of the id is random (96 bits). */
export const FAMILY_HEX = 8;
export const segmentFamily = (user: string, name: string) => createHash('sha256').update(`${user}\0${name}`).digest('hex').slice(0, FAMILY_HEX);
/** A new segment id: random, in `family` when one is given. */
export const newSegmentId = (family = '') => family + randomBytes(16).toString('hex').slice(family.length);
export const segmentKey = (id: string) => `data/${id.slice(0, 2)}/${id}`;
/** The key prefix the segments of `id`'s family share. */
export const familyPrefix = (id: string) => segmentKey(id).slice(0, 'data/00/'.length + FAMILY_HEX);
export const indexKey = (id: string) => `index/${id.slice(0, 2)}/${id}`;
/** Logins live outside what gc and check list (`ns/`, `data/`, `index/`). */
export const SESSIONS_PREFIX = 'auth/sessions/';
export const sessionKey = (digestHex: string) => SESSIONS_PREFIX + digestHex;
export const nsPrefix = (user: string) => `ns/${encodeUser(user)}/`;
export const fileHeadKey = (user: string, name: string) => `${nsPrefix(user)}files/${encodeName(name)}`;
export const uploadsKey = (user: string, name: string) => `${nsPrefix(user)}uploads/${encodeName(name)}`;
export const GC_STATE = 'gc/state';
/** The namespace's change marker (catalog.ts `markChanged`): a head written after every change
 *  of one of its folder catalogs, outside what gc and check list. */
export const changeMarkerKey = (user: string) => `changed/${encodeUser(user)}`;
/** The head /api/health writes to know the store takes writes: one per host, address and port
 *  (a restarted server writes its own again; --workers siblings share it), outside what gc and
 *  check list. */
export const healthKey = (port: number) => `health/${createHash('sha256').update(`${hostname()}\0${port}`).digest('hex').slice(0, 32)}`;

/** A user's name from its key component (`encodeUser`'s inverse; throws on a malformed one). */
export const decodeUser = (encoded: string) => decodeURIComponent(encoded);

/** A key under `ns/`: its user, its kind (files, uploads, folders) and, for a key whose rest is
 *  an encoded name, the name (else null). */
export function parseNsKey(key: string): { user: string; kind: string; name: string | null } {
  const [, user, kind, ...rest] = key.split('/');
  return { user: decodeUser(user), kind, name: decodeName(rest.join('/')) };
}

/** The id of the content object at `key` (`data/…` a segment, `index/…` a version index), or
 *  null when `key` is not one `segmentKey` or `indexKey` makes. */
export function parseContentKey(key: string): { kind: 'segment' | 'index'; id: string } | null {
  const id = key.slice(key.lastIndexOf('/') + 1);
  if (SEGMENT_ID.test(id) && key === segmentKey(id)) return { kind: 'segment', id };
  if (INDEX_ID.test(id) && key === indexKey(id)) return { kind: 'index', id };
  return null;
}

/** Whether `key` is under `data/` or `index/` in the shape gc/state's candidates have. */
export const isContentKey = (key: string) => /^(data|index)\/[0-9a-f]{2}\/[0-9a-f]+$/.test(key);

/** A vault's id (docs/vaults.md): 32 lowercase hex digits, chosen by its client. */
export const VAULT_ID = /^[0-9a-f]{32}$/;
/** A vault's pack id: the SHA-256 of its bytes, 64 lowercase hex digits. */
export const PACK_ID = /^[0-9a-f]{64}$/;
/** Vaults live outside what gc, check and repack list (`ns/`, `data/`, `index/`): their
 *  objects are opaque, referenced by heads only their clients can read. */
export const VAULTS_PREFIX = 'vaults/';
const vaultId = (id: string) => {
  if (!VAULT_ID.test(id)) throw new RangeError(`bad vault id ${JSON.stringify(id.slice(0, 80))}`);
  return id;
};
export const vaultKeysPrefix = (user: string) => `${VAULTS_PREFIX}${encodeUser(user)}/keys/`;
export const vaultKeyfileKey = (user: string, id: string) => vaultKeysPrefix(user) + vaultId(id);
export const vaultKeyfilesPrefix = (user: string) => `${VAULTS_PREFIX}${encodeUser(user)}/keyfiles/`;
export const vaultKeyfileHeadKey = (user: string, id: string) => vaultKeyfilesPrefix(user) + vaultId(id);
export const vaultHeadKey = (user: string, id: string) => `${VAULTS_PREFIX}${encodeUser(user)}/heads/${vaultId(id)}`;
export const vaultPacksPrefix = (user: string, id: string) => `${VAULTS_PREFIX}${encodeUser(user)}/packs/${vaultId(id)}/`;
const packId = (pack: string) => {
  if (!PACK_ID.test(pack)) throw new RangeError(`bad pack id ${JSON.stringify(pack.slice(0, 80))}`);
  return pack;
};
export const vaultPackKey = (user: string, id: string, pack: string) => vaultPacksPrefix(user, id) + packId(pack);
export const vaultSumsKey = (user: string, id: string, pack: string) => `${VAULTS_PREFIX}${encodeUser(user)}/sums/${vaultId(id)}/${packId(pack)}`;
