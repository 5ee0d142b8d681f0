/**
 * `webr2sync+`: WebR2sync+ (the paper's main comparison): the client sends Adler-32 + SipHash of
 * every fixed 8 KB block of the target; the server runs an rsync-style rolling search over its
 * basis (wasm, bench/baselines), answers the blocks it found, and the client sends the rest.
 */
import { StrongHasher } from '../../shared/src/chunking/wasm.ts';
import { webr2sync_block_hashes, webr2sync_match } from '../lib/baselines.ts';
import { T, frame, parseLiteral, u32, u32At } from '../eval/wire.ts';
import type { Approach } from './approach.ts';
import { FILE_ALGO, baselineSession, hashWhole, readList, sendMissing } from './baseline.ts';

/** WebR2sync+'s fixed block size (paper: 8 KB). */
export const BLOCK = 8192;

export const webr2sync: Approach = {
  name: 'webr2sync+',
  server: 'baselines',
  async prepare(p) {
    const parts: Uint32Array[] = [];
    p.root = await hashWhole(p.source, (b) => parts.push(webr2sync_block_hashes(b, BLOCK)));
    p.triples = new Uint32Array(parts.reduce((s, x) => s + x.length, 0));
    let o = 0;
    for (const x of parts) (p.triples.set(x, o), (o += x.length));
  },
  session: (p, ws, name) =>
    baselineSession(p, ws, name, async (c) => {
      const tr = p.triples!;
      const n = tr.length / 3;
      for (let i = 0; i < n; i += 8192) await c.send(frame(T.Blocks, new Uint8Array(3), u32(tr.subarray(3 * i, 3 * Math.min(n, i + 8192)))));
      const off = new Float64Array(n + 1);
      for (let i = 0; i <= n; i++) off[i] = Math.min(i * BLOCK, p.size);
      return sendMissing(c, p.source, off);
    }),
  async serve({ c, hello, basis, out }) {
    const frames = await readList(c, T.Blocks);
    const triples = new Uint32Array(frames.reduce((s, f) => s + (f.length - 4) / 4, 0));
    let o = 0;
    for (const f of frames) {
      triples.set(u32At(f, 4, (f.length - 4) / 4), o);
      o += (f.length - 4) / 4;
    }
    const nBlocks = triples.length / 3;
    // Rolling search over the whole basis (in wasm, like the chunker).
    const from = new Float64Array(nBlocks).fill(-1);
    let lookups = 0;
    if (basis) {
      const pairs = webr2sync_match(basis, BLOCK, triples);
      lookups = pairs[pairs.length - 1];
      for (let k = 0; k + 1 < pairs.length; k += 2) if (from[pairs[k]] < 0) from[pairs[k]] = pairs[k + 1];
    }
    const have = new Uint8Array(Math.ceil(nBlocks / 8));
    for (let i = 0; i < nBlocks; i++) if (from[i] >= 0) have[i >> 3] |= 1 << (i & 7);
    await c.send(frame(T.Have, have));
    const h = new StrongHasher(FILE_ALGO);
    let lit: { indices: Uint32Array; chunks: Uint8Array[] } | null = null;
    let li = 0;
    for (let i = 0; i < nBlocks; i++) {
      const len = Math.min(BLOCK, hello.size - i * BLOCK);
      let b: Uint8Array;
      if (from[i] >= 0) b = basis!.subarray(from[i], from[i] + len);
      else {
        if (!lit || li === lit.indices.length) ((lit = parseLiteral(await c.recv(T.Literal))), (li = 0));
        if (lit.indices[li] !== i) throw new Error(`literal block ${lit.indices[li]} where ${i} was due`);
        b = lit.chunks[li++];
      }
      if (b.length !== len) throw new Error(`block ${i} has ${b.length} bytes, expected ${len}`);
      h.update(b);
      await out.write(b);
    }
    const root = h.digest();
    h.free();
    return { root, ended: false, lookups };
  },
};
