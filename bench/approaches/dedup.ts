/**
 * `dedup`: content-defined chunking with whole-chunk deduplication by strong hash (the paper's
 * "Dedup" baseline): the client sends each chunk's length and BLAKE3; the server chunks and
 * hashes its basis on every sync (no cached index), answers the chunks it has, and the client
 * sends the rest.
 */
import { type ChunkIndex, bufferSource, chunkSource, offsetsOf, runHash } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_PARAMS, hashLength } from '../../shared/src/wire/protocol.ts';
import { StrongHasher } from '../../shared/src/chunking/wasm.ts';
import { T, frame, parseLiteral, u32, u32At } from '../eval/wire.ts';
import type { Approach } from './approach.ts';
import { baselineSession, hex, readList, sendMissing } from './baseline.ts';

/** dedup's strong hash: BLAKE3, the same as Dsync's default, so the comparison isolates the protocol. */
export const DEDUP_ALGO = 3;

export const dedup: Approach = {
  name: 'dedup',
  server: 'baselines',
  async prepare(p) {
    p.index = await chunkSource(p.source, DEFAULT_PARAMS, DEDUP_ALGO);
  },
  session: (p, ws, name) =>
    baselineSession(p, ws, name, async (c) => {
      const ix = p.index!;
      const H = hashLength(DEDUP_ALGO);
      const n = ix.lengths.length;
      for (let i = 0; i < n; i += 8192) {
        const e = Math.min(n, i + 8192);
        await c.send(frame(T.Hashes, new Uint8Array(3), u32(Uint32Array.of(e - i)), u32(ix.lengths.subarray(i, e)), ix.hashes.subarray(i * H, e * H)));
      }
      return sendMissing(c, p.source, offsetsOf(ix.lengths));
    }),
  async serve({ c, basis, out }) {
    const H = hashLength(DEDUP_ALGO);
    const frames = await readList(c, T.Hashes);
    const lengths: number[] = [];
    const hashes: Uint8Array[] = [];
    for (const f of frames) {
      const n = u32At(f, 4, 1)[0];
      const ls = u32At(f, 8, n);
      for (let k = 0; k < n; k++) {
        lengths.push(ls[k]);
        hashes.push(f.subarray(8 + 4 * n + k * H, 8 + 4 * n + (k + 1) * H));
      }
    }
    // The server chunks and strong-hashes its copy on every sync (no cached index).
    const where = new Map<string, number>();
    let bix: ChunkIndex | null = null;
    if (basis) {
      bix = await chunkSource(bufferSource(basis), DEFAULT_PARAMS, DEDUP_ALGO);
      const off = offsetsOf(bix.lengths);
      for (let j = 0; j < bix.lengths.length; j++) where.set(hex(bix.hashes.subarray(j * H, (j + 1) * H)), off[j]);
    }
    const from = lengths.map((_, i) => where.get(hex(hashes[i])) ?? -1);
    const have = new Uint8Array(1 + Math.ceil(lengths.length / 8));
    have[0] = T.Have;
    from.forEach((f, i) => f >= 0 && (have[1 + (i >> 3)] |= 1 << (i & 7)));
    await c.send(have);
    // Rebuild, hashing every chunk written; the root is the run hash over the chunk hashes.
    const written = new Uint8Array(lengths.length * H);
    let lit: { indices: Uint32Array; chunks: Uint8Array[] } | null = null;
    let li = 0;
    for (let i = 0; i < lengths.length; i++) {
      let b: Uint8Array;
      if (from[i] >= 0) b = basis!.subarray(from[i], from[i] + lengths[i]);
      else {
        if (!lit || li === lit.indices.length) ((lit = parseLiteral(await c.recv(T.Literal))), (li = 0));
        if (lit.indices[li] !== i) throw new Error(`literal chunk ${lit.indices[li]} where ${i} was due`);
        b = lit.chunks[li++];
      }
      if (b.length !== lengths[i]) throw new Error(`chunk ${i} has ${b.length} bytes, expected ${lengths[i]}`);
      const hh = new StrongHasher(DEDUP_ALGO);
      hh.update(b);
      written.set(hh.digest(), i * H);
      hh.free();
      await out.write(b);
    }
    return { root: runHash(DEDUP_ALGO, written, 0, lengths.length), ended: false };
  },
};
