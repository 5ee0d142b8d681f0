/**
 * Chunk indexes: the chunks of one file (lengths, FastFp, strong hashes) and its root hash.
 * The client builds one for its file while chunking; the server stores one per version so
 * that Phase 2 is index lookups only (docs/protocol.md, "Store").
 */
import { DsyncChunker, StrongHasher, hash_chunks, wasm_memory } from '../../../wasm/pkg/dsync_wasm.js';
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { HASH_AHEAD, OFF_THREAD_MIN } from './hash-pool.ts';
import { type ChunkParams, hashLength } from '../wire/protocol.ts';

/** Random access to the bytes of a file (Node: a file handle; browser: a Blob). */
export interface Source {
  readonly size: number;
  /** Reads `length` bytes at `offset`; may read into `into` (at least `length` bytes) to spare
   *  an allocation, in which case the result is a view of it, valid until `into` is reused. */
  read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array>;
  /** The strong hashes of the chunks with `lengths` starting at `offset`, computed off this
   *  thread (hash-pool.ts); absent, `chunkParts` hashes on this thread. `pieces`, when given,
   *  are the run's bytes, one after another, read through `read` and not used by the caller
   *  again (a source whose reads return new buffers may hand theirs over); else the worker
   *  reads the run itself. */
  hashRun?(offset: number, lengths: Uint32Array, algo: number, pieces?: Uint8Array[]): Promise<Uint8Array>;
  /** `length` bytes at `offset` as a Blob the socket reads itself (a browser's File): the
   *  sender then sends Delta Runs of such slices instead of reading the bytes. */
  blobSlice?(offset: number, length: number): Blob;
  /** Whether a read of `length` bytes at `offset` is answered without a round trip to another
   *  process (a source that can slice: what it keeps of the bytes it read last); absent: every
   *  read is. */
  holds?(offset: number, length: number): boolean;
}

export interface ChunkIndex {
  params: ChunkParams;
  algo: number;
  size: number;
  lengths: Uint32Array;
  fastfps: Uint32Array;
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

/** Whether two hashes are equal, byte for byte. */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** A part of a Checksum List, in chunk order: chunks (their lengths and FastFp), strong hashes
 *  of the chunks after the last ones hashed, or both. The hashes may trail the chunks:
 *  `chunkParts` yields a slice's chunks before it hashes them. */
export interface ListPart {
  lengths: Uint32Array;
  fastfps: Uint32Array;
  /** H bytes per chunk hashed */
  hashes: Uint8Array;
}

/**
 * Chunks a whole source with FastCDC + FastFp and strong-hashes every chunk, in one streaming
 * pass (memory: two slices plus the index). `onProgress(bytesDone)` is called per slice.
 */
export async function chunkSource(source: Source, params: ChunkParams, algo: number, onProgress?: (done: number) => void): Promise<ChunkIndex> {
  const lengths: Uint32Array[] = [];
  const fastfps: Uint32Array[] = [];
  const hashes: Uint8Array[] = [];
  for await (const p of chunkParts(source, params, algo, { onProgress })) {
    lengths.push(p.lengths);
    fastfps.push(p.fastfps);
    hashes.push(p.hashes);
  }
  const index = { params, algo, size: source.size, lengths: concat(lengths, Uint32Array), fastfps: concat(fastfps, Uint32Array), hashes: concat(hashes, Uint8Array) };
  return { ...index, root: runHash(algo, index.hashes, 0, index.lengths.length) };
}

/** The root `chunkSource` computes, of bytes given in order, a slice at a time, on this thread:
 *  for a reader of a file that also wants its root over exactly the bytes it read (a vault's
 *  push and pull, shared/src/vault/folder.ts). `finish` once; `free` always. */
export class RootHasher {
  private readonly chunker: DsyncChunker;
  private readonly hashes: Uint8Array[] = [];
  private chunks = 0;

  constructor(
    params: ChunkParams,
    private readonly algo: number,
  ) {
    this.chunker = new DsyncChunker(params.min, params.avg, params.max, params.op, params.every, algo);
  }

  push(bytes: Uint8Array): void {
    if (bytes.length) this.chunker.push(bytes);
    this.take();
  }

  private take(): void {
    const n = this.chunker.take_chunks().length / 2;
    if (n) this.hashes.push(this.chunker.take_strong(n));
    this.chunks += n;
  }

  /** the root of all the bytes pushed */
  finish(): Uint8Array {
    this.chunker.finish();
    this.take();
    return runHash(this.algo, concat(this.hashes, Uint8Array), 0, this.chunks);
  }

  free(): void {
    this.chunker.free();
  }
}

/** Bytes a sender chunks ahead of hashing them (see `chunkParts`), held in wasm memory. */
export const HASH_LAG = 8 << 20;

/**
 * Chunks `source` slice by slice (`sliceBytes`, default READ_SLICE) and yields each slice's
 * completed chunks, and, as parts of their own, the strong hashes of chunks cut earlier. The
 * hashing trails the chunking by up to HASH_LAG bytes: a sender streams the chunks as its
 * Checksum List, which holds no strong hash, so the list of a file of up to that size is out
 * before any of it is hashed, and the hashing fills the round trip the Match Tokens take. (A
 * slice's Delta Bytes wait for its hashes, so on a larger file they start HASH_LAG later.)
 * The next slice is read while this one is chunked (a file or Blob read runs off this thread)
 * straight into wasm memory, into room the chunker keeps for it (`DsyncChunker.stage`), where
 * the source reads into the buffer it is given (a file); a source that returns bytes of its own
 * (a Blob, a buffer) has them copied in.
 * A source with `hashRun` of at least OFF_THREAD_MIN bytes has each slice's chunks hashed off
 * this thread as one run, while this one cuts the next slices; their hashes are yielded as they
 * come back, in order, with at most HASH_AHEAD bytes out. A run the worker fails is hashed here.
 * A source that returns bytes of its own gets each run with its bytes (`pieces`); one read into
 * wasm memory gets offsets only, and its worker reads the run itself.
 */
export async function* chunkParts(source: Source, params: ChunkParams, algo: number, opts: { sliceBytes?: number; onProgress?: (done: number) => void } = {}): AsyncGenerator<ListPart> {
  const slice = opts.sliceBytes ?? READ_SLICE;
  const hashRun = source.hashRun && source.size >= OFF_THREAD_MIN ? source.hashRun.bind(source) : null;
  // with hash workers, this thread only cuts: each slice's chunks go to a worker as one run
  const chunker = new DsyncChunker(params.min, params.avg, params.max, params.op, params.every, hashRun ? 0 : algo);
  const none = new Uint32Array(0);
  const unhashed: { chunks: number; bytes: number }[] = [];
  let unhashedBytes = 0;
  const runs: { hashes: Promise<Uint8Array>; done: boolean; bytes: number }[] = [];
  let runBytes = 0;
  let cutTo = 0;
  // With a source that returns bytes of its own (a Blob's slices), the bytes from `cutTo` on
  // that were read already (where the last chunk of the slices before starts), so that a run
  // goes to the worker with its bytes. Null once a slice was read into wasm memory (a file):
  // the worker reads the run itself.
  let carry: Uint8Array | null = new Uint8Array(0);
  const memory = wasm_memory() as WebAssembly.Memory;
  // Reads a slice into room staged in wasm memory (`at`), or returns the source's own bytes
  // (at -1), with their length. Chunking the slice before may grow the memory while the read
  // runs: the view comes loose (the memory stays where it is), and a slice read into it is read
  // again into a fresh one. The length is taken here, with the check: other work on this thread (another
  // session, an in-process server) may grow the memory again before the caller resumes.
  const readAt = async (off: number): Promise<{ bytes: Uint8Array; at: number; length: number }> => {
    const length = Math.min(slice, source.size - off);
    const at = chunker.stage(length);
    for (;;) {
      const before = memory.buffer;
      const read = source.read(off, length, new Uint8Array(before, at, length)).then(
        (bytes) => ({ bytes, error: null }),
        (error: unknown) => ({ bytes: null, error }),
      );
      const { bytes, error } = await read;
      // (bytes of the source's own are not in wasm memory: its growth leaves them as they are)
      if (memory.buffer !== before && !(bytes && bytes.buffer !== before)) continue;
      if (!bytes) throw error;
      if (bytes.buffer === before && bytes.byteOffset === at) return { bytes, at, length: bytes.length };
      chunker.unstage(at);
      return { bytes, at: -1, length: bytes.length };
    }
  };
  let next: Promise<{ bytes: Uint8Array; at: number; length: number }> | null = source.size > 0 ? readAt(0) : null;
  try {
    for (let off = 0; off < source.size; off += slice) {
      // (a view of wasm memory may have come loose since: a staged slice is used by `at`)
      const { bytes, at, length } = await next!;
      next = null;
      if (length !== Math.min(slice, source.size - off)) throw new Error('the file changed size while syncing');
      next = off + slice < source.size ? readAt(off + slice) : null;
      if (at >= 0) chunker.push_staged(at, length);
      else chunker.push(bytes); // copies the slice into wasm memory
      if (!next) chunker.finish(); // the last slice's part carries the last chunk
      opts.onProgress?.(off + length);
      const pairs = chunker.take_chunks();
      const n = pairs.length / 2;
      if (hashRun && carry && at >= 0) carry = null;
      if (n) {
        const lengths = new Uint32Array(n);
        const fastfps = new Uint32Array(n);
        let runLength = 0;
        for (let i = 0; i < n; i++) {
          lengths[i] = pairs[2 * i];
          fastfps[i] = pairs[2 * i + 1];
          runLength += lengths[i];
        }
        if (hashRun) {
          const from = cutTo;
          let pieces: Uint8Array[] | undefined;
          if (carry && runLength <= carry.length) {
            // (the chunker may cut behind the slice it was given: it keeps bytes back)
            pieces = [carry.slice(0, runLength)];
            carry = concat([carry.subarray(runLength), bytes], Uint8Array);
          } else if (carry) {
            // the run: what was carried, then this slice up to its last cut; the rest is
            // copied out first, as the source may hand this slice's buffer to the worker
            const k = runLength - carry.length;
            pieces = [carry, bytes.subarray(0, k)];
            carry = bytes.slice(k);
          }
          // a worker that fails (or never starts) leaves its runs to this thread
          const hashes = hashRun(from, lengths, algo, pieces).catch(() => hashHere(source, from, lengths, algo));
          const run = { hashes, done: false, bytes: runLength };
          run.hashes.then(() => (run.done = true), () => {}); // (awaited below; no unhandled rejection)
          runs.push(run);
          runBytes += runLength;
          cutTo += runLength;
        }
        yield { lengths, fastfps, hashes: new Uint8Array(0) };
      } else if (hashRun && carry) {
        carry = concat([carry, bytes], Uint8Array); // no chunk ended in this slice
      }
      if (hashRun) {
        // the runs hashed so far, in order; wait for the oldest while too many bytes are out
        while (runs.length && (runs[0].done || runBytes > HASH_AHEAD || !next)) {
          const run = runs.shift()!;
          runBytes -= run.bytes;
          yield { lengths: none, fastfps: none, hashes: await run.hashes };
        }
        continue;
      }
      unhashed.push({ chunks: n, bytes: length });
      unhashedBytes += length;
      while (unhashed.length && (unhashedBytes > HASH_LAG || !next)) {
        const u = unhashed.shift()!;
        unhashedBytes -= u.bytes;
        if (u.chunks) yield { lengths: none, fastfps: none, hashes: chunker.take_strong(u.chunks) };
      }
    }
  } finally {
    // a read still running after a failure writes into the chunker's memory (or, in a hash
    // worker, reads from a file the caller may close next): it ends first
    if (next) await next.catch(() => {});
    for (const r of runs) await r.hashes.catch(() => {});
    chunker.free();
  }
}

/** The strong hashes of the chunks with `lengths` starting at `offset`, read and hashed on this
 *  thread. */
async function hashHere(source: Source, offset: number, lengths: Uint32Array, algo: number): Promise<Uint8Array> {
  let length = 0;
  for (let i = 0; i < lengths.length; i++) length += lengths[i];
  const buf = takeBuffer(length);
  try {
    const bytes = await source.read(offset, length, buf);
    if (bytes.length !== length) throw new Error('the file changed size while syncing');
    return hash_chunks(algo, bytes, lengths);
  } finally {
    giveBuffers([buf]);
  }
}

/** The parts, one after another, in one array. */
export function concat<T extends Uint8Array | Uint32Array>(parts: T[], C: { new (n: number): T }): T {
  const out = new C(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p as never, o);
    o += p.length;
  }
  return out;
}

/** An in-memory Source (tests, benchmarks). */
export function bufferSource(buf: Uint8Array): Source {
  return { size: buf.length, read: async (o, n) => buf.subarray(o, o + n) };
}
