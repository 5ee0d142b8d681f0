/**
 * A vault's keys (docs/vaults.md, "Keys"): the random 32-byte vault key, its keyfile (the key
 * wrapped by Argon2id(passphrase) with AES-256-GCM), its recovery key (the key itself in
 * base32, shown once), the sub-keys derived from it by HKDF-SHA256, and sealing with them:
 * lists and heads with AES-256-GCM, contents with AES-256-CTR authenticated by their keyed ids
 * (WebCrypto, the same in Node and browsers; node:crypto in the CLI's chunk workers).
 */
import { argon2idAsync } from '@noble/hashes/argon2';
import { hkdf } from '@noble/hashes/hkdf';
import { sha256 } from '@noble/hashes/sha2';
import { VAULT_ARGON2, VAULT_ARGON2_MAX } from '../base/limits.ts';
import { CTR_OVERHEAD, type KindCode, NONCE_BYTES, Reader, SEAL_OVERHEAD, Seal, type SealCode, VaultError, Writer, hex, unhex, utf8 } from './format.ts';

export const KEY_BYTES = 32;
/** A vault id: 16 random bytes as 32 lowercase hex characters (the REST API's). */
export const VAULT_ID = /^[0-9a-f]{32}$/;

const subtle = globalThis.crypto.subtle;
const random = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));

export const newVaultId = () => Array.from(random(16), (x) => x.toString(16).padStart(2, '0')).join('');
export const newVaultKey = () => random(KEY_BYTES);

function idBytes(id: string): Uint8Array {
  if (!VAULT_ID.test(id)) throw new VaultError(`not a vault id: ${JSON.stringify(id)}`);
  return unhex(id);
}

// ---------------------------------------------------------------------------------------------
// Sub-keys

/** What a device holds of an open vault: sub-keys only (the vault key itself is not kept). */
export interface VaultKeys {
  id: string;
  /** the id's 16 bytes, bound into every sealed object */
  idBytes: Uint8Array;
  /** the secret Gear table of keyed chunking: 256 little-endian u64 */
  gear: Uint8Array;
  /** the key of keyed BLAKE3 chunk ids */
  chunkId: Uint8Array;
  /** AES-256-CTR for contents (`sealContent`); AES-256-GCM for the content chunks an earlier
   *  dsync sealed, and for lists and heads (each non-extractable) */
  stream: CryptoKey;
  content: CryptoKey;
  metadata: CryptoKey;
}

const sub = (key: Uint8Array, salt: Uint8Array, name: string, length = 32) => hkdf(sha256, key, salt, utf8(`dsync vault v1 ${name}`), length);

const aesKey = (raw: Uint8Array, extractable = false, name = 'AES-GCM') => subtle.importKey('raw', raw as Uint8Array<ArrayBuffer>, { name }, extractable, ['encrypt', 'decrypt']);

/** The sub-keys of `key` for vault `id`: HKDF-SHA256(ikm = key, salt = id bytes, info =
 *  "dsync vault v1 <name>"); the Gear table is HKDF-Expand of the chunking key. */
export async function deriveKeys(id: string, key: Uint8Array): Promise<VaultKeys> {
  if (key.length !== KEY_BYTES) throw new VaultError('a vault key is 32 bytes');
  const salt = idBytes(id);
  const chunking = sub(key, salt, 'chunking');
  return {
    id,
    idBytes: salt,
    gear: hkdf(sha256, chunking, undefined, utf8('dsync vault v1 gear table'), 2048),
    chunkId: sub(key, salt, 'chunk ids'),
    stream: await aesKey(sub(key, salt, 'content stream'), false, 'AES-CTR'),
    content: await aesKey(sub(key, salt, 'content')),
    metadata: await aesKey(sub(key, salt, 'metadata')),
  };
}

/** A check value of the key (HKDF, so it says nothing of the sub-keys): the keyfile carries it,
 *  so a recovery key is checked before it is used. */
const keyCheck = (id: string, key: Uint8Array) => sub(key, idBytes(id), 'key check');

// ---------------------------------------------------------------------------------------------
// Sealing: lists and heads (and the content chunks an earlier dsync sealed) with AES-256-GCM,
// random 96-bit nonce: nonce || ciphertext || tag; contents with AES-256-CTR (`sealContent`)

async function seal(key: CryptoKey, plain: Uint8Array, aad: Uint8Array): Promise<Uint8Array> {
  const out = new Uint8Array(plain.length + SEAL_OVERHEAD);
  const nonce = globalThis.crypto.getRandomValues(out.subarray(0, NONCE_BYTES));
  out.set(new Uint8Array(await subtle.encrypt({ name: 'AES-GCM', iv: nonce as Uint8Array<ArrayBuffer>, additionalData: aad as Uint8Array<ArrayBuffer> }, key, plain as Uint8Array<ArrayBuffer>)), NONCE_BYTES);
  return out;
}

/** The plaintext, or null when the tag does not verify (a wrong key, a flipped bit, another
 *  place's object). */
async function open(key: CryptoKey, sealed: Uint8Array, aad: Uint8Array): Promise<Uint8Array | null> {
  if (sealed.length < SEAL_OVERHEAD) return null;
  try {
    const iv = sealed.subarray(0, NONCE_BYTES);
    return new Uint8Array(await subtle.decrypt({ name: 'AES-GCM', iv: iv as Uint8Array<ArrayBuffer>, additionalData: aad as Uint8Array<ArrayBuffer> }, key, sealed.subarray(NONCE_BYTES) as Uint8Array<ArrayBuffer>));
  } catch {
    return null;
  }
}

/** A chunk's associated data: what it is, whose it is and which it is. */
const CHUNK_AAD = utf8('dsync vault chunk v1');
const chunkAad = (k: Pick<VaultKeys, 'idBytes'>, kind: KindCode, id: Uint8Array) => {
  const out = new Uint8Array(CHUNK_AAD.length + 1 + k.idBytes.length + id.length);
  out.set(CHUNK_AAD);
  out[CHUNK_AAD.length] = kind;
  out.set(k.idBytes, CHUNK_AAD.length + 1);
  out.set(id, CHUNK_AAD.length + 1 + k.idBytes.length);
  return out;
};

/** One chunk sealed: a content chunk as `sealContent` seals it, a list piece with AES-GCM. */
export async function sealChunk(k: VaultKeys, kind: KindCode, id: Uint8Array, plain: Uint8Array): Promise<Uint8Array> {
  if (kind !== 0) return seal(k.metadata, plain, chunkAad(k, kind, id));
  const { heads, runs } = await sealContent(webCipher, k, [id], [plain]);
  const out = new Uint8Array(CTR_OVERHEAD + plain.length);
  out.set(heads);
  out.set(runs[0], CTR_OVERHEAD);
  return out;
}

/** The keys a content chunk is sealed and opened with (a chunk worker holds no others). */
export type ContentKeys = Pick<VaultKeys, 'idBytes' | 'stream' | 'content'>;

/** The ciphers of content chunks: WebCrypto's (`webCipher`: the page's, and where no other is
 *  given) or node:crypto's (spans-node.ts, the CLI's chunk workers). */
export interface ContentCipher {
  /** `data` XOR the AES-256-CTR key stream of the stream key from byte `skip` (0 to 15) of
   *  counter block `counter` (one 128-bit big-endian number, incremented a block at a time):
   *  written into `into` when given (at least `data`'s length, `skip` 0: a seal's; the part
   *  written is answered), else as a new array */
  ctr(k: ContentKeys, counter: Uint8Array, skip: number, data: Uint8Array, into?: Uint8Array): Promise<Uint8Array> | Uint8Array;
  /** the plaintext of a content chunk sealed with AES-256-GCM (nonce || ciphertext || tag,
   *  bound to its `contentAad`), or null when its tag does not verify */
  openGcm(k: ContentKeys, id: Uint8Array, sealed: Uint8Array): Promise<Uint8Array | null> | Uint8Array | null;
}

/** Bytes a cipher takes at a time when it writes into a room (a multiple of the block): a new
 *  array of a piece's length is memory used before, one of a span's fresh pages (node:crypto:
 *  256 KiB pieces took no system time where 16 MiB ones took a third of the cipher's;
 *  bench/results/vault-cli.md). */
export const CTR_PIECE = 256 << 10;

/** The ContentCipher through WebCrypto (a key stream from within a block: `skip` bytes put
 *  before the data, their output dropped). */
export const webCipher: ContentCipher = {
  ctr: async (k, counter, skip, data, into) => {
    const encrypt = async (counter: Uint8Array, input: Uint8Array) => new Uint8Array(await subtle.encrypt({ name: 'AES-CTR', counter: counter as Uint8Array<ArrayBuffer>, length: 128 }, k.stream, input as Uint8Array<ArrayBuffer>));
    if (into) {
      if (skip) throw new RangeError('a cipher writes into a room from a block start only');
      // in pieces, each written into `into`: WebCrypto copies its input and answers a new
      // array, fresh pages for a whole span's length where a piece's are used again
      const next = new Uint8Array(16);
      for (let at = 0; at < data.length; at += CTR_PIECE) {
        add128(counter, at / 16, next);
        into.set(await encrypt(next, data.subarray(at, at + CTR_PIECE)), at);
      }
      return into.subarray(0, data.length);
    }
    let input = data;
    if (skip) {
      input = new Uint8Array(skip + data.length);
      input.set(data, skip);
    }
    return (await encrypt(counter, input)).subarray(skip);
  },
  openGcm: (k, id, sealed) => open(k.content, sealed, chunkAad(k, 0, id)),
};

/** A content chunk's associated data, as an AES-GCM sealed one was bound to it. */
export const contentAad = (k: Pick<VaultKeys, 'idBytes'>, id: Uint8Array) => chunkAad(k, 0, id);

/** `base` + `n` (128-bit big-endian, modulo 2^128), into `out`. */
function add128(base: Uint8Array, n: number, out: Uint8Array): void {
  let carry = n;
  for (let i = 15; i >= 0; i--) {
    const v = base[i] + (carry % 256);
    out[i] = v & 0xff;
    carry = Math.floor(carry / 256) + (v >> 8);
  }
}

/** Where a key stream position P (128-bit big-endian, in bytes) lies: counter block ⌊P/16⌋ and
 *  byte P mod 16 of it. */
function streamAt(p: Uint8Array): { counter: Uint8Array; skip: number } {
  const counter = new Uint8Array(16);
  for (let i = 15; i > 0; i--) counter[i] = (p[i] >> 4) | ((p[i - 1] & 15) << 4);
  counter[0] = p[0] >> 4;
  return { counter, skip: p[15] & 15 };
}

/** How many of `parts` from `i` on follow one another in one buffer (at least 1). */
function runOf(parts: Uint8Array[], i: number): number {
  let j = i + 1;
  while (j < parts.length && parts[j].buffer === parts[i].buffer && parts[j].byteOffset === parts[j - 1].byteOffset + parts[j - 1].length) j++;
  return j - i;
}

/** Content chunks as `sealContent` seals them: each chunk's header (its masked key stream
 *  position, CTR_OVERHEAD bytes) one after another in `heads`, and the ciphertext of each run
 *  sealed by one call in `runs`, in order (a chunk's follows the one before it in its run). A
 *  sealed chunk is its header, then its ciphertext (`sealedParts`). Sealed into a room, the
 *  runs lie in it (their buffer is the room's). */
export interface SealedChunks {
  heads: Uint8Array;
  runs: Uint8Array[];
}

/**
 * Seals content chunks (docs/vaults.md, "Formats") with AES-256-CTR: chunks that follow one
 * another in one buffer (a chunk worker's span) with ONE cipher call on them where they lie, no
 * copy, from a random block-aligned key stream position B (below 2^127, so a run never wraps),
 * so that a chunk's position P is B plus its offset in the run. A sealed chunk is P, masked with
 * the first 16 bytes of its id (so that the server, which never sees an id, cannot tell two
 * chunks of one call, nor their lengths, from their positions), then its ciphertext. It
 * carries no tag: its keyed id, in the sealed manifest that names it, authenticates it
 * (`openContent`). The ciphertexts stay where the cipher wrote them (one after another in
 * `room` when given: a room written before, whose pages are the process's already, where a
 * new array a span cost a CLI push a tenth of its CPU in page faults; bench/results/
 * vault-cli.md): a pack copies each chunk's two parts into its body.
 */
export async function sealContent(cipher: ContentCipher, k: ContentKeys, ids: Uint8Array[], plains: Uint8Array[], room?: Uint8Array): Promise<SealedChunks> {
  const heads = new Uint8Array(plains.length * CTR_OVERHEAD);
  const runs: Uint8Array[] = [];
  let used = 0;
  if (room && room.length < plains.reduce((n, p) => n + p.length, 0)) throw new RangeError('a room smaller than the chunks to seal');
  for (let i = 0; i < plains.length; ) {
    const run = plains.slice(i, i + runOf(plains, i));
    const length = run.reduce((n, p) => n + p.length, 0);
    const base = random(16);
    base[0] &= 0x7f;
    base[15] &= 0xf0;
    runs.push(await cipher.ctr(k, streamAt(base).counter, 0, new Uint8Array(run[0].buffer, run[0].byteOffset, length), room?.subarray(used)));
    used += length;
    let off = 0;
    for (const p of run) {
      const head = heads.subarray(i * CTR_OVERHEAD, (i + 1) * CTR_OVERHEAD);
      add128(base, off, head);
      for (let j = 0; j < CTR_OVERHEAD; j++) head[j] ^= ids[i][j];
      off += p.length;
      i++;
    }
  }
  return { heads, runs };
}

/** The sealed chunks of `s`, each as its two parts (header, ciphertext), given their
 *  plaintexts' lengths in order. */
export function sealedParts(s: SealedChunks, lengths: number[]): Uint8Array[][] {
  let run = 0;
  let at = 0;
  return lengths.map((l, i) => {
    if (at === s.runs[run].length) [run, at] = [run + 1, 0];
    const body = s.runs[run].subarray(at, (at += l));
    return [s.heads.subarray(i * CTR_OVERHEAD, (i + 1) * CTR_OVERHEAD), body];
  });
}

/**
 * A sealed content chunk's plaintext as its cipher gives it, or null when an AES-GCM one does
 * not verify. An AES-CTR one is NOT authenticated here: it is until its plaintext gives its
 * keyed id (chunks.ts `openVerified`, the only caller).
 */
export async function openContent(cipher: ContentCipher, k: ContentKeys, seal: SealCode, id: Uint8Array, sealed: Uint8Array): Promise<Uint8Array | null> {
  if (seal === Seal.Gcm) return cipher.openGcm(k, id, sealed);
  if (sealed.length <= CTR_OVERHEAD) return null;
  const p = new Uint8Array(sealed.subarray(0, CTR_OVERHEAD)); // a copy: `sealed` stays as it was given (a Buffer's slice is a view)
  for (let j = 0; j < CTR_OVERHEAD; j++) p[j] ^= id[j];
  // (a counter block below 2^124: no chunk's key stream reaches 2^128, which WebCrypto refuses)
  const { counter, skip } = streamAt(p);
  return cipher.ctr(k, counter, skip, sealed.subarray(CTR_OVERHEAD));
}

/** A sealed chunk's plaintext, as `openContent` gives a content chunk's (list pieces are always
 *  AES-GCM); one that does not open is a VaultError. Only `openVerified` calls it (and the
 *  tests): a content chunk is authenticated there. A chunk worker, which holds no metadata key,
 *  opens content chunks only. */
export async function openChunk(k: Pick<VaultKeys, 'id' | 'idBytes' | 'stream' | 'content'> & { metadata?: CryptoKey }, kind: KindCode, id: Uint8Array, seal: SealCode, sealed: Uint8Array, cipher: ContentCipher = webCipher): Promise<Uint8Array> {
  if (kind !== 0 && !k.metadata) throw new Error('a chunk worker opens content chunks only');
  if (kind !== 0 && seal !== Seal.Gcm) throw new VaultError(`a list piece of vault ${k.id} is not sealed with AES-GCM`);
  const plain = kind === 0 ? await openContent(cipher, k, seal, id, sealed) : await open(k.metadata!, sealed, chunkAad(k, kind, id));
  if (!plain) throw new VaultError(`a chunk of vault ${k.id} does not verify (damaged, or moved from another place)`);
  return plain;
}

const HEAD_V1 = 1;
const headAad = (k: VaultKeys) => new Writer().bytes(utf8('dsync vault head v1')).bytes(k.idBytes).done();

/** The head's body: a version byte, then the sealed head record (metadata key, bound to the
 *  vault id). */
export async function sealHead(k: VaultKeys, record: Uint8Array): Promise<Uint8Array> {
  return new Writer().u8(HEAD_V1).bytes(await seal(k.metadata, record, headAad(k))).done();
}

export async function openHead(k: VaultKeys, body: Uint8Array): Promise<Uint8Array> {
  if (body[0] !== HEAD_V1) throw new VaultError(`the head of vault ${k.id} is of an unknown version`);
  const plain = await open(k.metadata, body.subarray(1), headAad(k));
  if (!plain) throw new VaultError(`the head of vault ${k.id} does not verify (damaged, or not this vault's)`);
  return plain;
}

// ---------------------------------------------------------------------------------------------
// The keyfile

export interface Argon2Params {
  /** memory in KiB */
  m: number;
  t: number;
  p: number;
}

const KEYFILE_V1 = 1;
const SALT_BYTES = 16;
/** version, m (u32), t (u32), p (u8), salt, key check (32), then the sealed key */
const KEYFILE_HEAD = 1 + 4 + 4 + 1 + SALT_BYTES + 32;
export const KEYFILE_BYTES = KEYFILE_HEAD + SEAL_OVERHEAD + KEY_BYTES;

const keyfileAad = (id: string, head: Uint8Array) => new Writer().bytes(utf8('dsync vault keyfile v1')).bytes(idBytes(id)).bytes(head).done();

async function passphraseKey(passphrase: string, salt: Uint8Array, a: Argon2Params): Promise<CryptoKey> {
  if (passphrase.length === 0) throw new VaultError('an empty passphrase');
  const raw = await argon2idAsync(utf8(passphrase.normalize('NFC')), salt, { m: a.m, t: a.t, p: a.p, dkLen: 32 });
  return aesKey(raw);
}

/** The keyfile of vault `id`: `key` sealed with Argon2id(passphrase), and its check value; a
 *  fresh salt and nonce each time, so a passphrase change makes a keyfile that shares nothing
 *  with the one it replaces but the key check. */
export async function wrapKey(id: string, key: Uint8Array, passphrase: string, argon: Argon2Params = VAULT_ARGON2): Promise<Uint8Array> {
  const salt = random(SALT_BYTES);
  const head = new Writer().u8(KEYFILE_V1).u32(argon.m).u32(argon.t).u8(argon.p).bytes(salt).bytes(keyCheck(id, key)).done();
  const sealed = await seal(await passphraseKey(passphrase, salt, argon), key, keyfileAad(id, head));
  return new Writer().bytes(head).bytes(sealed).done();
}

/** A keyfile's entity tag, as GET /key sends it and PUT /key's If-Match names the keyfile a
 *  passphrase change replaces: its SHA-256 in lowercase hex, quoted. */
export const keyfileTag = (keyfile: Uint8Array) => `"${hex(sha256(keyfile))}"`;

/** A keyfile's parts: exactly KEYFILE_BYTES of version 1, refusing parameters a device should
 *  not spend (VAULT_ARGON2_MAX); any other keyfile is a VaultError. The server checks a new
 *  keyfile with it (a passphrase change), and that its key check is the stored one's. */
export function keyfileParts(keyfile: Uint8Array): { head: Uint8Array; argon: Argon2Params; salt: Uint8Array; check: Uint8Array; sealed: Uint8Array } {
  const r = new Reader(keyfile, 'the keyfile');
  if (r.u8() !== KEYFILE_V1) throw new VaultError('a keyfile of an unknown version');
  const argon = { m: r.u32(), t: r.u32(), p: r.u8() };
  if (!(argon.p >= 1 && argon.p <= VAULT_ARGON2_MAX.p && argon.t >= 1 && argon.t <= VAULT_ARGON2_MAX.t && argon.m >= 8 * argon.p && argon.m <= VAULT_ARGON2_MAX.m)) {
    throw new VaultError(`the keyfile asks for Argon2id m=${argon.m} KiB t=${argon.t} p=${argon.p}, beyond what this device spends`);
  }
  const salt = r.bytes(SALT_BYTES);
  const check = r.bytes(32);
  const sealed = r.bytes(SEAL_OVERHEAD + KEY_BYTES);
  r.end();
  return { head: keyfile.subarray(0, KEYFILE_HEAD), argon, salt, check, sealed };
}

/** The vault key from its keyfile and passphrase; a wrong passphrase (or a keyfile of another
 *  vault, or a damaged one) is a VaultError, never a wrong key. */
export async function unwrapKey(id: string, keyfile: Uint8Array, passphrase: string): Promise<Uint8Array> {
  const { head, argon, salt, check, sealed } = keyfileParts(keyfile);
  const key = await open(await passphraseKey(passphrase, salt, argon), sealed, keyfileAad(id, head));
  if (!key) throw new VaultError(`the passphrase does not open vault ${id} (a wrong passphrase, or a damaged keyfile)`);
  if (!equal(check, keyCheck(id, key))) throw new VaultError(`the keyfile of vault ${id} is inconsistent`);
  return key;
}

/** Checks a key (from a recovery key) against the vault's keyfile: a key of another vault is a
 *  VaultError. */
export function checkKey(id: string, keyfile: Uint8Array, key: Uint8Array): void {
  if (!equal(keyfileParts(keyfile).check, keyCheck(id, key))) throw new VaultError(`that recovery key is not vault ${id}'s`);
}

const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

// ---------------------------------------------------------------------------------------------
// The recovery key: the vault key and a 2-byte checksum in base32 (RFC 4648, no padding), in
// groups of five: 55 characters.

const B32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
const recoverySum = (key: Uint8Array) => sha256(new Writer().bytes(utf8('dsync vault recovery v1')).bytes(key).done()).subarray(0, 2);

export function recoveryKey(key: Uint8Array): string {
  const bytes = new Writer().bytes(key).bytes(recoverySum(key)).done();
  let bits = 0;
  let acc = 0;
  let out = '';
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += B32[(acc >>> (bits - 5)) & 31];
      bits -= 5;
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out += B32[(acc << (5 - bits)) & 31];
  return out.match(/.{1,5}/g)!.join('-');
}

/** The vault key of a recovery key (case, spaces and dashes ignored); a mistyped one is a
 *  VaultError. */
export function fromRecoveryKey(text: string): Uint8Array {
  const s = text.toUpperCase().replace(/[\s-]/g, '');
  const bytes: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const c of s) {
    const v = B32.indexOf(c);
    if (v < 0) throw new VaultError(`a recovery key has no character ${JSON.stringify(c)}`);
    acc = ((acc << 5) | v) & 0xffff;
    bits += 5;
    if (bits >= 8) {
      bytes.push((acc >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  const b = Uint8Array.from(bytes);
  if (b.length !== KEY_BYTES + 2 || !equal(b.subarray(KEY_BYTES), recoverySum(b.subarray(0, KEY_BYTES)))) throw new VaultError('a mistyped recovery key');
  return b.slice(0, KEY_BYTES);
}

