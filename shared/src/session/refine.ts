/**
 * The finer level (docs/protocol.md §3, "Refinement"): 8 KB chunks lose everything around a
 * scattered edit — a 1 MB change made of 256-byte fragments dirties every chunk of a 10 MB
 * file. So where no Match Token covers the target, the receiver cuts the stretch of its basis
 * that lies there into finer chunks (FastCDC, default 64 / 256 / 1024 bytes) and sends their
 * lengths and the first 8 bytes of their strong hashes (Basis Checksums) before the Match
 * Tokens that make that part final. The sender cuts the chunks it is about to send with the
 * same sizes and sends each one whose hash the receiver listed as a copy of those basis bytes
 * instead of the bytes. No round trip is added: the Basis Checksums travel with the Match
 * Tokens. The root check at the end covers the copied bytes like any others.
 */
import { DsyncChunker } from '../../../wasm/pkg/dsync_wasm.js';
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import type { ChecksumList } from './checksum-list.ts';
import type { ChunkIndex, Source } from '../chunking/chunk-index.ts';
import { type BasisChecksums, type Copy, PREFIX } from '../wire/messages.ts';
import { COPY_STRETCH, COPY_WINDOW, KEEP_LISTED, LIST_BATCH, MAX_REFINE_BYTES } from '../base/limits.ts';
import type { Run } from './matcher.ts';
import { ErrorCode, type FineParams, Msg, ProtocolError, hashLength, inconsistent as bad } from '../wire/protocol.ts';

/** Cuts `bytes` into finer chunks and returns their lengths and hash prefixes. */
export function fineCut(bytes: Uint8Array, fine: FineParams, algo: number): { lengths: Uint32Array; prefixes: Uint8Array } {
  const chunker = new DsyncChunker(fine.min, fine.avg, fine.max, 0, 16, algo);
  try {
    chunker.push(bytes);
    chunker.finish();
    const pairs = chunker.take_chunks();
    const n = pairs.length / 2;
    const lengths = new Uint32Array(n);
    for (let i = 0; i < n; i++) lengths[i] = pairs[2 * i];
    const hashes = chunker.take_strong(n);
    const H = hashLength(algo);
    const prefixes = new Uint8Array(n * PREFIX);
    for (let i = 0; i < n; i++) for (let b = 0; b < PREFIX; b++) prefixes[i * PREFIX + b] = hashes[i * H + b];
    return { lengths, prefixes };
  } finally {
    chunker.free();
  }
}

/**
 * The receiver's side: the basis bytes that refined chunks copy. The stretches it listed in
 * Basis Checksums are kept (the latest KEEP_LISTED bytes of them), so most copies cost no
 * read; others are read through a window of COPY_WINDOW bytes (copies come in basis order).
 */
export class BasisCopies {
  /** kept stretches, by ascending offset */
  private kept: { offset: number; bytes: Uint8Array }[] = [];
  private keptBytes = 0;
  private start = 0;
  private bytes: Uint8Array = new Uint8Array(0);

  constructor(
    private read: (offset: number, length: number, into: Uint8Array) => Promise<Uint8Array>,
    private size: number,
    /** at least COPY_WINDOW bytes */
    private buffer: Uint8Array,
  ) {}

  /** Keeps a copy of listed basis bytes at `offset`, dropping the lowest kept beyond the budget. */
  keep(offset: number, bytes: Uint8Array): void {
    if (bytes.length > KEEP_LISTED) return;
    let k = this.kept.length;
    while (k > 0 && this.kept[k - 1].offset > offset) k--;
    this.kept.splice(k, 0, { offset, bytes: bytes.slice() });
    this.keptBytes += bytes.length;
    while (this.keptBytes > KEEP_LISTED) this.keptBytes -= this.kept.shift()!.bytes.length;
  }

  /** The bytes of a copy: a view, valid until the next call. */
  async copy(c: Copy): Promise<Uint8Array> {
    if (c.offset + c.length > this.size) throw bad(`a copy of basis bytes [${c.offset}, +${c.length}) beyond its ${this.size} bytes`);
    let lo = 0;
    let hi = this.kept.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const k = this.kept[mid];
      if (k.offset > c.offset) hi = mid - 1;
      else if (k.offset + k.bytes.length < c.offset + c.length) lo = mid + 1;
      else return k.bytes.subarray(c.offset - k.offset, c.offset - k.offset + c.length);
    }
    if (c.offset < this.start || c.offset + c.length > this.start + this.bytes.length) {
      if (c.length > COPY_WINDOW) return this.read(c.offset, c.length, new Uint8Array(c.length));
      this.start = c.offset;
      this.bytes = await this.read(c.offset, Math.min(COPY_WINDOW, this.size - c.offset), this.buffer);
    }
    return this.bytes.subarray(c.offset - this.start, c.offset - this.start + c.length);
  }
}

/** Reads of basis stretches a listing runs at once (`BasisListing.listStretches`). */
const READS_AT_ONCE = 8;

/** Listed middle bytes (see `MiddleYield`) of which copies must come back... */
const MIDDLE_PAYS = 16;
/** ...over about this many of them lately (the tally is halved when it passes twice this); */
const MIDDLE_WINDOW = 4 << 20;
/** with too little paid back, the middle of one gap in PROBE_GAPS is listed still (a probe),
 *  and that interval doubles with each probe up to PROBE_MAX gaps while the tally stays low */
const PROBE_GAPS = 8;
const PROBE_MAX = 128;

/**
 * The receiver's side: whether to list the middle of a gap. A gap's first and last target
 * chunks hold the old bytes on either side of an edit, and the basis bytes facing them are
 * always listed (its *ends*). Its middle pays for scattered edits (every chunk dirty, most of
 * its bytes old); for bytes written anew (a rewritten or inserted region, an encrypted file)
 * it costs the receiver a finer cut of every byte and the sender a table of ~1 entry per 256
 * bytes, and returns nothing. So the middles listed are tallied against the copies the
 * sender's Delta Bytes made of them, as the Delta Bytes arrive; while the tally holds at
 * least MIDDLE_WINDOW bytes and fewer than 1 in MIDDLE_PAYS of them came back as copies, only
 * probes are listed: the middle of the PROBE_GAPS-th gap, then of the 16th after it, the 32nd,
 * up to every PROBE_MAX-th, whose copies count as before; once the tally says middles pay,
 * every middle is listed again and the probes start over at PROBE_GAPS. The answers come a
 * round trip (and the sender's hashing, and the Delta Bytes queued ahead of them) after the
 * listing, so the middles of that much of the file are listed before the first decision:
 * listing a middle that returns nothing costs ~5% of its bytes in Basis Checksums and the
 * cutting of them on both sides, leaving one out where edits are scattered costs most of its
 * bytes in Delta Bytes.
 */
export class MiddleYield {
  /** gaps with a middle listed and not passed by the rebuild yet, in target order */
  private gaps: { a: number; b: number; from: number; to: number; bytes: number; copied: number }[] = [];
  private head = 0;
  /** middle bytes answered, and copied of them (lately: see MIDDLE_WINDOW) */
  private listed = 0;
  private copied = 0;
  /** gaps since the last probe, and the gaps from one probe to the next */
  private skipped = 0;
  private every = PROBE_GAPS;

  /** Whether to list the middle of the next gap that has one. */
  listMiddle(): boolean {
    if (this.listed < MIDDLE_WINDOW || this.copied * MIDDLE_PAYS >= this.listed) {
      this.skipped = 0;
      this.every = PROBE_GAPS;
      return true;
    }
    if (++this.skipped < this.every) return false;
    this.skipped = 0;
    this.every = Math.min(2 * this.every, PROBE_MAX);
    return true;
  }

  /** The middle of the gap of target chunks [a, b), basis bytes [from, to), was listed:
   *  `bytes` of it (a long stretch is listed at both ends only). */
  listedMiddle(a: number, b: number, from: number, to: number, bytes: number): void {
    this.gaps.push({ a, b, from, to, bytes, copied: 0 });
  }

  /** A Delta chunk `j` copies basis bytes [offset, offset + length); the rebuild is at j. */
  copy(j: number, offset: number, length: number): void {
    this.reached(j);
    const g = this.gaps[this.head];
    if (g && g.a <= j) g.copied += Math.max(0, Math.min(offset + length, g.to) - Math.max(offset, g.from));
  }

  /** The rebuild is at target chunk `j`: the gaps below it are answered. */
  reached(j: number): void {
    while (this.head < this.gaps.length && this.gaps[this.head].b <= j) {
      const g = this.gaps[this.head++];
      this.listed += g.bytes;
      this.copied += g.copied;
      if (this.listed > 2 * MIDDLE_WINDOW) {
        this.listed /= 2;
        this.copied /= 2;
      }
    }
    if (this.head > 1024 && 2 * this.head > this.gaps.length) {
      this.gaps = this.gaps.slice(this.head);
      this.head = 0;
    }
  }
}

/** The basis the receiver refines against: its chunk index and its bytes. */
interface BasisBytes {
  index: ChunkIndex;
  source: Source;
}

/**
 * The receiver's listing policy: before the Match Tokens that make a part of the target final,
 * the Basis Checksums of the basis stretch between each two runs of that part (a *gap*), cut
 * finer. A gap's ends are always listed; its middle while middles pay (`MiddleYield`); a gap
 * much longer than the target chunks it faces (a cut) only at both ends. At most
 * `maxBytes` basis bytes are listed per session. It also holds the basis bytes listed, for the
 * copies the sender's refined chunks make of them (`BasisCopies`).
 */
export class BasisListing {
  /** basis bytes listed so far */
  listed = 0;
  private left: number;
  /** the first run whose gap before it is not listed yet */
  private nextRun = 0;
  /** target chunks below it are listed or covered by runs */
  private listedTo = 0;
  /** basis offset where the run before `listedTo` ends (-1: unknown) */
  private prevEnd = 0;
  /** basis stretches [from, to) to list, read together when they lie close */
  private stretches: [number, number][] = [];
  readonly middles = new MiddleYield();
  private copies: BasisCopies | null = null;
  /** what basis stretches are read into (as large as the largest read so far) */
  private readBuffer: Uint8Array | null = null;
  /** the window `BasisCopies` reads into */
  private copyWindow: Uint8Array | null = null;
  /** of the listed bytes `BasisCopies` keeps (at most KEEP_LISTED), those reserved */
  private keptReserved = 0;

  constructor(
    private basis: BasisBytes,
    /** byte offset of each basis chunk (offsetsOf), asked for when first needed */
    private basisOffsets: () => Float64Array,
    private send: (m: BasisChecksums) => Promise<void>,
    private algo: number,
    /** finer chunk sizes; absent, nothing is listed (the copies are still served) */
    private fine: FineParams | undefined,
    maxBytes = MAX_REFINE_BYTES,
    /** told the bytes the listing is about to keep (the copy window, the listed bytes up to
     *  KEEP_LISTED); throws to refuse (a memory budget) */
    private reserve?: (bytes: number) => void,
  ) {
    this.left = maxBytes;
  }

  /** A resumed session starts its rebuild at chunk `from`: what lies before is not listed. */
  resumeAt(from: number): void {
    this.listedTo = from;
    if (from) this.prevEnd = -1;
  }

  /** The bytes of a copy a refined chunk makes (a view, valid until the next call). */
  copy(c: Copy): Promise<Uint8Array> {
    return this.copiesOf().copy(c);
  }

  /** Buffers to hand back to the pool once no read into them runs. */
  buffers(): Uint8Array[] {
    return [this.readBuffer, this.copyWindow].filter((b): b is Uint8Array => !!b);
  }

  private copiesOf(): BasisCopies {
    if (!this.copies) {
      this.reserve?.(COPY_WINDOW);
      this.copies = new BasisCopies((o, n, into) => this.basis.source.read(o, n, into), this.basis.source.size, (this.copyWindow ??= takeBuffer(COPY_WINDOW)));
    }
    return this.copies;
  }

  /** A buffer of at least n bytes for a basis stretch (a small edit reads a few KiB: a 4 MiB
   *  buffer per session would cost an allocation per sync under load). */
  private bufferFor(n: number): Uint8Array {
    if (!this.readBuffer || this.readBuffer.length < n) {
      if (this.readBuffer) giveBuffers([this.readBuffer]);
      this.readBuffer = takeBuffer(n);
    }
    return this.readBuffer;
  }

  /**
   * Lists the gaps before the runs found so far and, once the list has ended (`atEnd`), the
   * last one; returns how far the Match Tokens may declare final: not into a gap whose end is
   * unknown.
   */
  async listGaps(list: ChecksumList, runs: Run[], final: number, atEnd: boolean): Promise<number> {
    if (!this.fine) return final;
    const offsets = this.basisOffsets();
    for (; this.nextRun < runs.length; this.nextRun++) {
      const r = runs[this.nextRun];
      if (r.first > this.listedTo) this.listGap(list, this.listedTo, r.first, this.prevEnd, offsets[r.basisFirst]);
      this.listedTo = r.first + r.count;
      this.prevEnd = offsets[r.basisFirst + r.count];
    }
    if (atEnd && list.count > this.listedTo) this.listGap(list, this.listedTo, list.count, this.prevEnd, offsets[this.basis.index.lengths.length]);
    await this.listStretches();
    if (!atEnd) return Math.min(final, this.listedTo);
    this.listedTo = list.count;
    return final;
  }

  /** The gap of target chunks [a, b) faces basis bytes [x, y). Its ends, as many basis bytes
   *  as its first and last target chunks hold, are always listed; its middle while middles pay. */
  private listGap(list: ChecksumList, a: number, b: number, x: number, y: number): void {
    if (x < 0 || y <= x) return; // unknown, or runs out of order
    const e1 = list.lengths[a];
    const e2 = list.lengths[b - 1];
    if (y - x <= e1 + e2) {
      this.stretches.push([x, y]);
      return;
    }
    if (!this.middles.listMiddle()) {
      this.stretches.push([x, x + e1], [y - e2, y]);
      return;
    }
    const cap = 2 * (list.offsets[b] - list.offsets[a]) + (64 << 10);
    if (y - x <= cap) this.stretches.push([x, y]);
    else this.stretches.push([x, x + cap / 2], [y - cap / 2, y]);
    this.middles.listedMiddle(a, b, x + e1, y - e2, Math.min(y - x, cap) - e1 - e2);
  }

  /** Reads, cuts finer and sends the stretches gathered, reading close ones together (each
   *  read of a stored version costs one file read per extent it crosses). Up to
   *  READS_AT_ONCE reads run at once, answered in order, holding at most COPY_STRETCH bytes in
   *  all with the one answered (a single longer stretch is read in pieces, as before). */
  private async listStretches(): Promise<void> {
    const stretches = this.stretches;
    const source = this.basis.source;
    // the groups of close stretches, each read at once: a hole between two stretches is read
    // along when it is no longer than what the span lists so far (16 KiB at least): fewer
    // reads, at most twice the bytes
    const groups: { s: number; e: number; from: number; length: number; read?: Promise<Uint8Array> }[] = [];
    for (let s = 0, budget = this.left; s < stretches.length && budget > 0; ) {
      let e = s + 1;
      let listed = stretches[s][1] - stretches[s][0];
      for (; e < stretches.length; e++) {
        const [p, q] = stretches[e];
        const hole = p - stretches[e - 1][1];
        if (hole < 0 || hole > Math.max(16 << 10, listed) || q - stretches[s][0] > COPY_STRETCH) break;
        listed += q - p;
      }
      const from = stretches[s][0];
      groups.push({ s, e, from, length: stretches[e - 1][1] - from });
      budget -= listed;
      s = e;
    }
    // the reads ahead of the one answered: each waits on the store and, on a busy server, for
    // its turn on the event loop (a basis' verification hashes between them); one at a time, a
    // scattered edit's thousands of reads hold the Match Tokens seconds behind the list
    // (bench/results/page-vs-cli.md)
    let next = 0;
    let ahead = 0;
    const readAhead = (g: number) => {
      while (next < groups.length && next - g < READS_AT_ONCE && groups[next].length <= COPY_STRETCH && (next === g || ahead + groups[next].length <= COPY_STRETCH)) {
        const r = groups[next++];
        ahead += r.length;
        r.read = source.read(r.from, r.length);
        r.read.catch(() => {}); // (awaited in order below)
      }
    };
    try {
      for (let g = 0; g < groups.length && this.left > 0; g++) {
        readAhead(g);
        const { s: s0, e, from, length, read } = groups[g];
        const span = read ? await read : null;
        if (span && span.length !== length) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
        if (!read) next = Math.max(next, g + 1); // (a group too long to read at once, in pieces)
        for (let s = s0; s < e && this.left > 0; s++) {
          const [p, q] = stretches[s];
          for (let o = p; o < q && this.left > 0; ) {
            const len = Math.min(COPY_STRETCH, q - o, this.left);
            const bytes = span ? span.subarray(o - from, o - from + len) : await source.read(o, len, this.bufferFor(len));
            if (bytes.length !== len) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
            await this.sendCut(o, bytes);
            this.listed += len;
            this.left -= len;
            o += len;
          }
        }
        if (read) ahead -= length; // (its bytes are let go: the reads ahead may take their room)
      }
    } finally {
      stretches.length = 0;
    }
  }

  /** Cuts basis bytes at `offset` finer and sends them as Basis Checksums; keeps them for the
   *  copies to come. */
  private async sendCut(offset: number, bytes: Uint8Array): Promise<void> {
    const fine = this.fine!;
    const { lengths, prefixes } = fineCut(bytes, fine, this.algo);
    const keeps = Math.min(bytes.length, KEEP_LISTED - this.keptReserved);
    if (keeps > 0) {
      this.reserve?.(keeps);
      this.keptReserved += keeps;
    }
    this.copiesOf().keep(offset, bytes);
    for (let k = 0, off = offset; k < lengths.length; k += LIST_BATCH) {
      const end = Math.min(lengths.length, k + LIST_BATCH);
      await this.send({ type: Msg.BasisChecksums, offset: off, fine, lengths: lengths.subarray(k, end), prefixes: prefixes.subarray(k * PREFIX, end * PREFIX) });
      for (let t = k; t < end; t++) off += lengths[t];
    }
  }
}
