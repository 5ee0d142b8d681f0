/**
 * Chunk indexes: the chunks of one file (lengths, FastFp, strong hashes) and its root hash.
 * The client builds one for its file while chunking; the server stores one per version so
 * that Phase 2 is index lookups only (docs/protocol.md, "Store").
 */
import { DsyncChunker, StrongHasher } from '../../wasm/pkg/dsync_wasm.js';
import { type ChunkParams, hashLength } from './protocol.ts';

/** Random access to the bytes of a file (Node: a file handle; browser: a Blob). */
export interface Source {
  readonly size: number;
  /** Reads `length` bytes at `offset`; may read into `into` (at least `length` bytes) to spare
   *  an allocation, in which case the result is a view of it, valid until `into` is reused. */
  read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array>;
}

/** What Phase 1 sends of a file: each chunk's length and FastFp (no strong hashes yet). */
export interface ChecksumList {
  params: ChunkParams;
  size: number;
  lengths: Uint32Array;
  fastfps: Uint32Array;
}

export interface ChunkIndex extends ChecksumList {
  algo: number;
  /** lengths.length * H bytes: the strong hash of each chunk */
  hashes: Uint8Array;
  /** run hash over all chunks: H(h_0 || ... || h_{n-1}) */
  root: Uint8Array;
}

/** Size of the slices a Source is read in while chunking. */
export const READ_SLICE = 4 << 20;

/** Byte offset of every chunk, plus the total at the end (length n + 1). */
export function offsetsOf(lengths: Uint32Array): Float64Array {
  const off = new Float64Array(lengths.length + 1);
  for (let i = 0; i < lengths.length; i++) off[i + 1] = off[i] + lengths[i];
  return off;
}

/** The run hash of chunks [first, first + count): H over their concatenated strong hashes. */
export function runHash(algo: number, hashes: Uint8Array, first: number, count: number): Uint8Array {
  const h = hashLength(algo);
  const hasher = new StrongHasher(algo);
  try {
    hasher.update(hashes.subarray(first * h, (first + count) * h));
    return hasher.digest();
  } finally {
    hasher.free();
  }
}

/**
 * Chunks a whole source with FastCDC + FastFp and strong-hashes every chunk, in one streaming
 * pass (memory: two slices plus the index). `onProgress(bytesDone)` is called per slice.
 */
export async function chunkSource(source: Source, params: ChunkParams, algo: number, onProgress?: (done: number) => void): Promise<ChunkIndex> {
  return { ...(await chunkPass(source, params, algo, onProgress)), algo };
}

/** The Checksum List of a source: chunking and FastFp only, the sender's Phase 1 input. Its
 *  strong hashes come later, while Phase 3 sends the Delta Bytes (session.ts). */
export async function checksumList(source: Source, params: ChunkParams, onProgress?: (done: number) => void): Promise<ChecksumList> {
  const { hashes: _h, root: _r, ...list } = await chunkPass(source, params, 0, onProgress);
  return list;
}

/** One streaming pass of the chunker over `source`, strong-hashing with `algo` (0: none). */
async function chunkPass(source: Source, params: ChunkParams, algo: number, onProgress?: (done: number) => void) {
  const chunker = new DsyncChunker(params.min, params.avg, params.max, params.op, params.every, algo);
  const lengths = new GrowableU32();
  const fastfps = new GrowableU32();
  const hashes = new GrowableBytes();
  const collect = () => {
    const pairs = chunker.take_chunks();
    for (let i = 0; i < pairs.length; i += 2) {
      lengths.push(pairs[i]);
      fastfps.push(pairs[i + 1]);
    }
    hashes.push(chunker.take_strong());
  };
  // Two buffers: the next slice is read while this one is chunked (a file or Blob read runs
  // off this thread), and neither is allocated again per slice.
  const bufs = [0, 1].map(() => takeBuffer(Math.min(READ_SLICE, source.size)));
  const readAt = (off: number) => source.read(off, Math.min(READ_SLICE, source.size - off), bufs[(off / READ_SLICE) & 1]);
  let next: Promise<Uint8Array> | null = source.size > 0 ? readAt(0) : null;
  try {
    for (let off = 0; off < source.size; off += READ_SLICE) {
      const slice = await next!;
      next = off + READ_SLICE < source.size ? readAt(off + READ_SLICE) : null;
      chunker.push(slice); // copies the slice into wasm memory: its buffer is free again
      collect();
      onProgress?.(off + slice.length);
    }
    chunker.finish();
    collect();
    return {
      params,
      size: source.size,
      lengths: lengths.done(),
      fastfps: fastfps.done(),
      hashes: hashes.done(),
      root: chunker.root(),
    };
  } finally {
    if (next) next.catch(() => {}); // a read still running after a failure keeps its buffers
    else giveBuffers(bufs);
    chunker.free();
  }
}

/** Read buffers kept for the next pass, largest first: allocating tens of MiB per sync costs
 *  page faults and garbage-collector work (it showed as client time in the 10 MB benchmark). */
const spare: Uint8Array[] = [];
const SPARE_BUFFERS = 4;

/** A buffer of at least `size` bytes for `Source.read`'s `into`; hand it back with `giveBuffers`
 *  once no read into it is running. */
export function takeBuffer(size: number): Uint8Array {
  for (let i = spare.length - 1; i >= 0; i--) if (spare[i].length >= size) return spare.splice(i, 1)[0];
  return new Uint8Array(size);
}

export function giveBuffers(bufs: Uint8Array[]) {
  spare.push(...bufs);
  spare.sort((a, b) => b.length - a.length);
  spare.length = Math.min(spare.length, SPARE_BUFFERS);
}

/** An in-memory Source (tests, benchmarks). */
export function bufferSource(buf: Uint8Array): Source {
  return { size: buf.length, read: async (o, n) => buf.subarray(o, o + n) };
}

class GrowableU32 {
  a = new Uint32Array(1024);
  n = 0;
  push(v: number) {
    if (this.n === this.a.length) {
      const b = new Uint32Array(this.a.length * 2);
      b.set(this.a);
      this.a = b;
    }
    this.a[this.n++] = v;
  }
  done() {
    return this.a.slice(0, this.n);
  }
}

class GrowableBytes {
  a = new Uint8Array(1 << 16);
  n = 0;
  push(b: Uint8Array) {
    if (this.n + b.length > this.a.length) {
      const c = new Uint8Array(Math.max(this.a.length * 2, this.n + b.length));
      c.set(this.a.subarray(0, this.n));
      this.a = c;
    }
    this.a.set(b, this.n);
    this.n += b.length;
  }
  done() {
    return this.a.slice(0, this.n);
  }
}
