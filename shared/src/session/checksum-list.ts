/**
 * The Checksum List (paper §IV-D, Phase 1) as it grows during a session: each target chunk's
 * length and FastFp, its offset, and room for its strong hash. The sender appends the parts
 * it chunks; the receiver appends the Checksums messages that arrive.
 */
import { type ChunkIndex, type ListPart } from '../chunking/chunk-index.ts';
import { grown } from '../base/buffers.ts';
import { LIST_BATCH, type ReceiverLimits } from '../base/limits.ts';
import type { Checksums } from '../wire/messages.ts';
import { type ChunkParams, ErrorCode, ProtocolError, hashLength, inconsistent as bad } from '../wire/protocol.ts';
import type { WeakList } from './matcher.ts';
import { StrongHasher } from '../../../wasm/pkg/dsync_wasm.js';

/** Capacity of a list, at least. */
const LIST_MIN_CAPACITY = 1024;

/** Bytes a session holds per listed chunk with strong hashes of H bytes: length 4, FastFp 4, the
 *  strong hash H, offset 8, and the 4-byte per-chunk array a side keeps beside the list (52
 *  with BLAKE3; measured in bench/results/hostile.md). */
export const listBytesPerChunk = (H: number) => 20 + H;

/**
 * `reserve` is told the bytes each growth adds, before they are allocated, and may refuse by
 * throwing (a memory budget). The arrays are made `expected` chunks large at once when that is
 * known (the receiver's estimate from Hello's size), else doubled when full: each growth leaves
 * the old arrays to the garbage collector, which holds them resident for a while.
 */
export class ChecksumList {
  count = 0;
  /** chunks whose strong hashes are in `hashes` (a sender's hashes trail its chunks: ListPart) */
  hashed = 0;
  lengths = new Uint32Array(0);
  fastfps = new Uint32Array(0);
  hashes = new Uint8Array(0);
  /** offsets[i]: where chunk i starts; offsets[count]: the size so far */
  offsets = new Float64Array(1);

  constructor(
    private H: number,
    private reserve?: (bytes: number) => void,
    private expected = 0,
  ) {}

  /** Chunks the arrays have room for; per-chunk arrays kept beside the list follow it. */
  get capacity(): number {
    return this.lengths.length;
  }

  get size(): number {
    return this.offsets[this.count];
  }

  /** Appends chunks and, when given, strong hashes of the chunks after the last hashed. */
  append(lengths: Uint32Array, fastfps: Uint32Array, hashes?: Uint8Array) {
    const n = this.count;
    const m = n + lengths.length;
    if (m > this.lengths.length) {
      const cap = Math.max(m, 2 * this.lengths.length, this.expected, LIST_MIN_CAPACITY);
      this.reserve?.((cap - this.lengths.length) * listBytesPerChunk(this.H));
      this.lengths = grown(this.lengths, cap);
      this.fastfps = grown(this.fastfps, cap);
      this.hashes = grown(this.hashes, cap * this.H);
      this.offsets = grown(this.offsets, cap + 1);
    }
    this.lengths.set(lengths, n);
    this.fastfps.set(fastfps, n);
    if (hashes?.length) {
      if (this.hashed * this.H + hashes.length > m * this.H) throw new Error('strong hashes for chunks not in the list');
      this.hashes.set(hashes, this.hashed * this.H);
      this.hashed += hashes.length / this.H;
    }
    for (let i = n; i < m; i++) this.offsets[i + 1] = this.offsets[i] + this.lengths[i];
    this.count = m;
  }

  /** The list so far (views, valid until the next append). */
  weak(): WeakList {
    return { lengths: this.lengths.subarray(0, this.count), fastfps: this.fastfps.subarray(0, this.count) };
  }
}

/** The parts of a stored index, as many entries as one Checksums message carries. */
export async function* indexParts(index: ChunkIndex): AsyncGenerator<ListPart> {
  const H = hashLength(index.algo);
  for (let i = 0; i < index.lengths.length; i += LIST_BATCH) {
    const j = Math.min(index.lengths.length, i + LIST_BATCH);
    yield { lengths: index.lengths.subarray(i, j), fastfps: index.fastfps.subarray(i, j), hashes: index.hashes.subarray(i * H, j * H) };
  }
}

/** The strong hash of a Checksum List (lengths, then FastFps): what a resumed session must match. */
export function listDigest(algo: number, list: WeakList): Uint8Array {
  const hasher = new StrongHasher(algo);
  try {
    for (const a of [list.lengths, list.fastfps]) hasher.update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    return hasher.digest();
  } finally {
    hasher.free();
  }
}

/** Checks a Checksums message against the list so far before it is appended: lengths within
 *  1..max, every chunk but the list's last at least `min` (FastCDC; this message's last chunk
 *  is checked when the next one comes), the chunk and size limits, and the size Hello announced. */
export function checkChecksums(list: ChecksumList, m: Pick<Checksums, 'lengths' | 'fastfps'>, params: ChunkParams, limits: ReceiverLimits, expectedSize?: number): void {
  const n = m.lengths.length;
  if (n === 0) throw bad('empty Checksums message');
  if (list.count + n > limits.maxChunks) throw new ProtocolError(ErrorCode.LimitExceeded, `more than ${limits.maxChunks} chunks`);
  for (const l of m.lengths) if (l === 0 || l > params.max) throw bad(`chunk length ${l} outside 1..${params.max}`);
  if (list.count > 0 && list.lengths[list.count - 1] < params.min) throw bad(`chunk ${list.count - 1} is ${list.lengths[list.count - 1]} bytes, below min ${params.min}`);
  for (let k = 0; k + 1 < n; k++) if (m.lengths[k] < params.min) throw bad(`chunk ${list.count + k} is ${m.lengths[k]} bytes, below min ${params.min}`);
  let size = list.size;
  for (const l of m.lengths) size += l;
  if (size > limits.maxFileSize) throw new ProtocolError(ErrorCode.LimitExceeded, `file larger than the limit of ${limits.maxFileSize} bytes`);
  if (expectedSize !== undefined && size > expectedSize) throw bad(`Hello announced ${expectedSize} bytes, the Checksum List has more`);
}
