// The golden vectors (shared/test-vectors/golden.json, written by the native build) hold for the
// wasm build in Node, and its strong hashes agree with independent implementations.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { blake3 } from '@noble/hashes/blake3';
import '../src/chunking/wasm.ts';
import { bufferSource, chunkParts, chunkSource, offsetsOf } from '../src/chunking/chunk-index.ts';
import { Algo, DEFAULT_PARAMS, FpOp } from '../src/wire/protocol.ts';
import { randomBytes, textBytes } from '../../harness/testdata.ts';
import { DsyncChunker, hash_chunks, keyed_blake3_chunks, wasm_memory } from '../src/chunking/wasm.ts';

interface Vector {
  input: { kind: string; seed: number; size: number };
  params: { min: number; avg: number; max: number; op: string; every: number };
  chunks: { offset: number; length: number; fastfp: string; sha1: string; sha256: string; blake3: string }[];
  root: { sha1: string; sha256: string; blake3: string };
}
const golden: { vectors: Vector[] } = JSON.parse(readFileSync(new URL('../test-vectors/golden.json', import.meta.url), 'utf8'));
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

function input(v: Vector): Uint8Array {
  const { kind, seed, size } = v.input;
  if (kind === 'random') return randomBytes(seed, size);
  if (kind === 'text') return textBytes(seed, size);
  return new Uint8Array(size);
}

test('golden vectors: chunks, FastFp, strong hashes and roots through wasm in Node', async () => {
  assert.ok(golden.vectors.length >= 10);
  for (const v of golden.vectors) {
    const data = input(v);
    const params = { ...v.params, op: v.params.op === 'xor' ? FpOp.Xor : FpOp.Add };
    for (const [algo, key] of [[Algo.Sha1, 'sha1'], [Algo.Sha256, 'sha256'], [Algo.Blake3, 'blake3']] as const) {
      const ix = await chunkSource(bufferSource(data), params, algo);
      const off = offsetsOf(ix.lengths);
      const H = ix.hashes.length / Math.max(1, ix.lengths.length);
      const got = Array.from(ix.lengths, (length, i) => ({
        offset: off[i],
        length,
        fastfp: ix.fastfps[i].toString(16).padStart(8, '0'),
        hash: hex(ix.hashes.subarray(i * H, (i + 1) * H)),
      }));
      const want = v.chunks.map((c) => ({ offset: c.offset, length: c.length, fastfp: c.fastfp, hash: c[key] }));
      assert.deepEqual(got, want, `${JSON.stringify(v.input)} ${key}`);
      assert.equal(hex(ix.root), v.root[key]);
    }
  }
});

test('wasm strong hashes equal node:crypto (SHA-1, SHA-256) and @noble/hashes (BLAKE3)', () => {
  for (const v of golden.vectors) {
    const data = input(v);
    for (const c of v.chunks) {
      const bytes = data.subarray(c.offset, c.offset + c.length);
      assert.equal(c.sha1, createHash('sha1').update(bytes).digest('hex'));
      assert.equal(c.sha256, createHash('sha256').update(bytes).digest('hex'));
      assert.equal(c.blake3, hex(blake3(bytes)));
    }
  }
});

test('streaming with odd slice sizes equals the golden chunks', () => {
  const v = golden.vectors[0];
  const data = input(v);
  for (const slice of [1, 7, 4095, 65536, 65537, 100_000]) {
    const c = new DsyncChunker(v.params.min, v.params.avg, v.params.max, 0, v.params.every, 0);
    for (let o = 0; o < data.length; o += slice) c.push(data.subarray(o, o + slice));
    c.finish();
    const pairs = c.take_chunks();
    c.free();
    assert.deepEqual(
      Array.from({ length: pairs.length / 2 }, (_, i) => [pairs[2 * i], pairs[2 * i + 1].toString(16).padStart(8, '0')]),
      v.chunks.map((ch) => [ch.length, ch.fastfp]),
      `slice ${slice}`,
    );
  }
});

test('hash_chunks and keyed_blake3_chunks (BLAKE3 four chunks at a time, wasm SIMD; keyed: a vault\'s chunk ids) equal @noble/hashes on every chunk', () => {
  // Lengths around the 64-byte block and 1 KiB leaf boundaries and where the tree gains a
  // level, then random batches: lanes hold chunks of different shapes side by side.
  const shapes = [0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 7 * 1024 + 1, 8192, 8193, 16 * 1024, 33 * 1024 - 1, 65536];
  const batches = [shapes, shapes.slice(0, 5), [65536, 3, 70_000, 0, 12_345, 1 << 20]];
  const rnd = randomBytes(11, 64);
  for (let b = 0; b < 20; b++) batches.push(Array.from({ length: 1 + (rnd[b] % 40) }, (_, k) => (rnd[(b + k) % 64] * 97 + k * 131) % 20_000));
  for (const lengths of batches) {
    const total = lengths.reduce((a, l) => a + l, 0);
    const data = randomBytes(lengths.length, total);
    const key = randomBytes(total, 32);
    const got = hash_chunks(Algo.Blake3, data, Uint32Array.from(lengths));
    const keyed = keyed_blake3_chunks(key, data, Uint32Array.from(lengths));
    let off = 0;
    lengths.forEach((l, i) => {
      const chunk = data.subarray(off, off + l);
      assert.equal(hex(got.subarray(32 * i, 32 * i + 32)), hex(blake3(chunk)), `chunk ${i} of ${lengths.length}, ${l} bytes`);
      assert.equal(hex(keyed.subarray(32 * i, 32 * i + 32)), hex(blake3(chunk, { key })), `keyed: chunk ${i} of ${lengths.length}, ${l} bytes`);
      off += l;
    });
  }
});

test('slices read into wasm memory: the same index whatever the source does with the room it is given, and when the memory grows during a read', async () => {
  const data = randomBytes(17n, 9 << 20);
  const want = await chunkSource(bufferSource(data), DEFAULT_PARAMS, Algo.Blake3);
  const memory = wasm_memory() as WebAssembly.Memory;
  // reads into the room (a file does), growing the memory first on every other slice: the
  // view it was given comes loose, and the slice is read again
  const grown = new Set<number>();
  const filling = {
    size: data.length,
    read: async (o: number, n: number, into?: Uint8Array) => {
      if (!into) throw new Error('no room given');
      if (!grown.has(o) && (o / (1 << 20)) % 2 === 0) {
        grown.add(o);
        memory.grow(1);
      }
      into.set(data.subarray(o, o + n));
      return into.subarray(0, n);
    },
  };
  const before = memory.buffer.byteLength;
  for (const source of [filling, bufferSource(data)]) {
    for (const sliceBytes of [1 << 20, 3 << 20]) {
      const parts = { lengths: [] as number[], fastfps: [] as number[], hashes: [] as number[] };
      for await (const p of chunkParts(source, DEFAULT_PARAMS, Algo.Blake3, { sliceBytes })) {
        parts.lengths.push(...p.lengths);
        parts.fastfps.push(...p.fastfps);
        parts.hashes.push(...p.hashes);
      }
      assert.deepEqual(parts.lengths, [...want.lengths]);
      assert.deepEqual(parts.fastfps, [...want.fastfps]);
      assert.deepEqual(Buffer.from(parts.hashes), Buffer.from(want.hashes));
    }
  }
  assert.ok(grown.size >= 4 && memory.buffer.byteLength > before, 'the memory grew during reads');
});

test('slices read into wasm memory: the same index when other work on the thread grows the memory while a finished read waits for the consumer', async () => {
  const data = randomBytes(19n, 9 << 20);
  const want = await chunkSource(bufferSource(data), DEFAULT_PARAMS, Algo.Blake3);
  const memory = wasm_memory() as WebAssembly.Memory;
  // a file-like source (reads into the room it is given)
  const source = {
    size: data.length,
    read: async (o: number, n: number, into?: Uint8Array) => {
      into!.set(data.subarray(o, o + n));
      return into!.subarray(0, n);
    },
  };
  const lengths: number[] = [];
  const hashes: number[] = [];
  let grown = 0;
  for await (const p of chunkParts(source, DEFAULT_PARAMS, Algo.Blake3, { sliceBytes: 1 << 20 })) {
    lengths.push(...p.lengths);
    hashes.push(...p.hashes);
    // the next slice's read finishes meanwhile; then something else on this thread (a second
    // session, an in-process server) grows the memory before the generator resumes
    await new Promise((r) => setTimeout(r, 2));
    memory.grow(1);
    grown++;
  }
  assert.ok(grown >= 9);
  assert.deepEqual(lengths, [...want.lengths]);
  assert.deepEqual(Buffer.from(hashes), Buffer.from(want.hashes));
});
