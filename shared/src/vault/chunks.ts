/**
 * Keyed chunking (docs/vaults.md, "Keyed chunking"): the same wasm FastCDC with the vault's
 * secret Gear table, so every device of a vault cuts alike and the server cannot predict a
 * cut; a chunk's id is the keyed BLAKE3 of its plaintext (key: the chunk-id sub-key).
 */
import { DsyncChunker, keyed_blake3_chunks } from '../../../wasm/pkg/dsync_wasm.js';
import { VAULT_LIST_CHUNKS } from '../base/limits.ts';
import { type Source, READ_SLICE, bufferSource, runHash } from '../chunking/chunk-index.ts';
import { type ChunkParams, DEFAULT_ALGO, DEFAULT_PARAMS, FpOp } from '../wire/protocol.ts';
import { ID_BYTES, type KindCode, type SealCode, VaultError } from './format.ts';
import { type ContentCipher, type VaultKeys, openChunk } from './keys.ts';

/** A chunk of a file: where it starts, its bytes and its id. */
export interface Chunk {
  offset: number;
  bytes: Uint8Array;
  id: Uint8Array;
}

/** The chunk sizes of contents (plain Dsync's) and of lists (finer: VAULT_LIST_CHUNKS). */
export const CONTENT_PARAMS: ChunkParams = DEFAULT_PARAMS;
export const LIST_PARAMS: ChunkParams = { ...VAULT_LIST_CHUNKS, op: FpOp.Xor, every: 16 };

/** The keyed BLAKE3 ids of consecutive chunks of `data` with the given lengths. */
export function chunkIds(k: Pick<VaultKeys, 'chunkId'>, data: Uint8Array, lengths: Uint32Array): Uint8Array[] {
  const all = keyed_blake3_chunks(k.chunkId, data, lengths);
  return Array.from(lengths, (_, i) => all.subarray(i * ID_BYTES, (i + 1) * ID_BYTES));
}

/** A version's root (docs/vaults.md, "The tree"): BLAKE3 over its chunks' keyed ids, in file
 *  order. It is what the two-way engine compares a local file with (`rootOfSource`), a keyed
 *  function of the contents (the ids are keyed), and a push, a pull and a restore each have
 *  the ids already: no second chunking of the bytes. */
export function versionRoot(ids: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(ids.length * ID_BYTES);
  ids.forEach((id, i) => all.set(id, i * ID_BYTES));
  return runHash(DEFAULT_ALGO, all, 0, ids.length);
}

/** The root `versionRoot` gives the contents of `source` (read once, cut with the vault's keys). */
export async function rootOfSource(k: VaultKeys, source: Source): Promise<Uint8Array> {
  const ids: Uint8Array[] = [];
  for await (const batch of keyedChunks(k, source)) for (const c of batch) ids.push(c.id);
  return versionRoot(ids);
}

/** A sealed chunk's plaintext, checked against its keyed id: a chunk that does not open, or
 *  whose bytes are not its id's, is a VaultError. The check is what authenticates a content
 *  chunk sealed with AES-CTR (keys.ts `sealContent`). `cipher` opens content chunks (default:
 *  WebCrypto's). */
export async function openVerified(k: Parameters<typeof openChunk>[0] & Pick<VaultKeys, 'chunkId'>, kind: KindCode, id: Uint8Array, seal: SealCode, sealed: Uint8Array, cipher?: ContentCipher): Promise<Uint8Array> {
  const plain = await openChunk(k, kind, id, seal, sealed, cipher);
  const got = chunkIds(k, plain, Uint32Array.of(plain.length))[0];
  if (got.length !== id.length || got.some((x, i) => x !== id[i])) throw new VaultError(`a chunk of vault ${k.id} does not verify: its contents do not match its id (damaged, or moved from another place)`);
  return plain;
}

/** The chunks of `source`, cut with the vault's Gear table, a slice's worth at a time. */
export async function* keyedChunks(k: VaultKeys, source: Source, params: ChunkParams = CONTENT_PARAMS): AsyncGenerator<Chunk[]> {
  const chunker = DsyncChunker.keyed(params.min, params.avg, params.max, params.op, params.every, k.gear);
  try {
    let carry = new Uint8Array(0);
    let carryAt = 0; // file offset of carry[0]
    const take = (): Chunk[] => {
      const pairs = chunker.take_chunks();
      const lengths = new Uint32Array(pairs.length / 2);
      for (let i = 0; i < lengths.length; i++) lengths[i] = pairs[2 * i];
      let total = 0;
      for (const l of lengths) total += l;
      const ids = chunkIds(k, carry.subarray(0, total), lengths);
      const out: Chunk[] = [];
      let at = 0;
      for (let i = 0; i < lengths.length; i++) {
        // views of bytes never written again: a batch's chunks lie one after another in one
        // buffer, so that `sealContent` seals them in one call, not one a chunk
        out.push({ offset: carryAt + at, bytes: carry.subarray(at, at + lengths[i]), id: ids[i].slice() });
        at += lengths[i];
      }
      carry = carry.subarray(total);
      carryAt += total;
      return out;
    };
    for (let off = 0; off < source.size; ) {
      const slice = await source.read(off, Math.min(READ_SLICE, source.size - off));
      if (slice.length === 0) throw new Error(`the file ended at ${off} bytes of ${source.size}`);
      off += slice.length;
      const next = new Uint8Array(carry.length + slice.length);
      next.set(carry);
      next.set(slice, carry.length);
      carry = next;
      chunker.push(slice);
      const chunks = take();
      if (chunks.length) yield chunks;
    }
    chunker.finish();
    const chunks = take();
    if (chunks.length) yield chunks;
  } finally {
    chunker.free();
  }
}

/** The pieces of a list (a manifest or the tree) in memory, cut with LIST_PARAMS. */
export async function listPieces(k: VaultKeys, bytes: Uint8Array): Promise<Chunk[]> {
  const out: Chunk[] = [];
  for await (const part of keyedChunks(k, bufferSource(bytes), LIST_PARAMS)) out.push(...part);
  return out;
}
