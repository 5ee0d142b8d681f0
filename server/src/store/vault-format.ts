/**
 * The forms of a vault's objects on the server (docs/vaults.md, "The server"), in bytes and in
 * names: a pack's sums (DSVS), the stored head (DSVH), a changed keyfile (DSVK), and the checks
 * that a vault id, a pack id or a keyfile has the form the server takes. Each decoder refuses
 * what its encoder does not make: damage is found here, never passed on as a value.
 */
import { createHash } from 'node:crypto';
import { VAULT_HEAD_MAX, VAULT_KEYFILE_MAX } from '../../../shared/src/base/limits.ts';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { DamageError } from './errors.ts';
import { PACK_ID, VAULT_ID } from './keys.ts';
import { KEYFILE_BYTES, keyfileParts } from '../../../shared/src/vault/keys.ts';
import { PACK_BLOCK, PACK_SUMS_MAGIC, PACK_SUMS_PREFIX, VaultError, packIdInput } from '../../../shared/src/vault/format.ts';

/** Whether a pack of `size` bytes has sums stored beside it (the SHA-256 of each PACK_BLOCK:
 *  a ranged read reads and hashes at most a block more on either side of the range): one of a
 *  single block is read whole by any range and checked against its id, so sums would only cost
 *  an object to write and one to read (a small push's packs: the new chunks and list pieces of
 *  a few KB). */
export const hasSums = (size: number) => size > PACK_BLOCK;

export interface Sums {
  size: number;
  /** 32 bytes a block */
  blocks: Buffer;
}

const bound = (pack: string, body: Uint8Array) => createHash('sha256').update(Buffer.from(pack, 'hex')).update(body).digest();

/** Stored sums: the bytes a pack's id is the SHA-256 of (shared/src/vault/format.ts
 *  `packIdInput`: "DSVS\x01", the pack's size (8 bytes, big-endian), the SHA-256 of each
 *  block), then the SHA-256 of the pack's id (32 bytes) and everything before it, so that
 *  damaged sums, or another pack's, do not check (a pack an earlier dsync uploaded is named by
 *  the SHA-256 of its bytes, which its sums do not give). */
export function encodeSums(pack: string, size: number, blocks: readonly Uint8Array[]): Uint8Array {
  const body = packIdInput(size, blocks);
  return Buffer.concat([body, bound(pack, body)]);
}

/** Stored sums of `pack`, or null when they are not sums of it (damaged, or another's). */
export function decodeSums(pack: string, stored: Uint8Array): Sums | null {
  const b = Buffer.from(stored.buffer, stored.byteOffset, stored.length);
  if (b.length < PACK_SUMS_PREFIX + 32 || !b.subarray(0, PACK_SUMS_MAGIC.length).equals(PACK_SUMS_MAGIC)) return null;
  const size = Number(b.readBigUInt64BE(PACK_SUMS_MAGIC.length));
  const body = b.subarray(0, b.length - 32);
  if (!Number.isSafeInteger(size) || size < 1 || body.length !== PACK_SUMS_PREFIX + 32 * Math.ceil(size / PACK_BLOCK) || !bound(pack, body).equals(b.subarray(b.length - 32))) return null;
  return { size, blocks: body.subarray(PACK_SUMS_PREFIX) };
}

/** A stored head: HEAD_MAGIC, the counter (8 bytes, big-endian), the length of the client's
 *  body (u32) and the body, the count of packs it names in use (u32) and their ids (32 bytes
 *  each, ascending), the count of packs a collection condemned (u32) and their ids (ascending).
 *  HEAD_MAGIC_V1 heads (the counter, then the body) name no packs: nothing of their vault is
 *  collected. */
const HEAD_MAGIC = Buffer.from('DSVH\x02', 'latin1');
const HEAD_MAGIC_V1 = Buffer.from('DSVH\x01', 'latin1');
const HEAD_PREFIX = HEAD_MAGIC.length + 8;

export const malformed = (why: string) => new ProtocolError(ErrorCode.Malformed, why);

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

export function encodeKeyfileHead(created: number, keyfile: Uint8Array): Buffer {
  const b = Buffer.alloc(KEYFILE_PREFIX + keyfile.length);
  KEYFILE_MAGIC.copy(b);
  b.writeBigUInt64BE(BigInt(created), KEYFILE_MAGIC.length);
  b.set(keyfile, KEYFILE_PREFIX);
  return b;
}

export function decodeKeyfileHead(stored: Uint8Array, key: string): { created: number; keyfile: Uint8Array } {
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
  if (typeof pack !== 'string' || !PACK_ID.test(pack)) throw malformed('a pack id is 64 lowercase hex digits (a SHA-256: docs/vaults.md, "Formats")');
  return pack;
}
