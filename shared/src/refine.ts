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
import { DsyncChunker } from '../../wasm/pkg/dsync_wasm.js';
import { type BasisChecksums, type Copy, PREFIX, type Piece } from './codec.ts';
import { ErrorCode, type FineParams, ProtocolError, checkParams, hashLength } from './protocol.ts';

/** Basis bytes a receiver lists in Basis Checksums per session, by default. */
export const MAX_REFINE_BYTES = 256 << 20;
/** Basis Checksums entries a sender keeps; more is an error (LimitExceeded). */
export const MAX_HINTS = 1 << 22;
/** The sender refines its Delta Bytes in windows of this size... */
const WINDOW = 64 << 10;
/** ...and after two windows without a single match (new bytes, not an edit of old ones), only
 *  every PROBE-th window and a run's last one, where the old bytes resume. */
const PROBE = 8;

const bad = (why: string) => new ProtocolError(ErrorCode.Inconsistent, why);

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
 * The sender's side: the Basis Checksums received, looked up by hash prefix and length, and
 * the refinement of a run of chunks about to be sent.
 *
 * The listed chunks are kept one entry per distinct (prefix, length) — a *kind* — found
 * through an open-addressing table. A kind listed at several offsets (the same bytes repeated
 * in the basis: zeros, padding) keeps all of them in a list of its own, sorted when it
 * is searched. The table's hash is seeded per session, so a hostile receiver cannot choose
 * prefixes that all land in one probe sequence. Plain arrays, not typed ones: a 1 GiB push
 * lists ~400 k chunks, and typed arrays grown by doubling are memory outside the JavaScript
 * heap, whose growth made V8 run 2.4× as many full collections (the client's CPU time per 30%
 * sync rose by a second; bench/results/README.md).
 */
export class BasisHints {
  fine: FineParams | null = null;
  count = 0;
  private kinds = 0;
  /** per kind: the prefix's two words, the length, the first offset listed */
  private key0: number[] = [];
  private key1: number[] = [];
  private lengths: number[] = [];
  private offsets: number[] = [];
  /** per kind listed more than once: all its offsets (sorted while `sorted` says so) */
  private more = new Map<number, { offsets: number[]; sorted: boolean }>();
  /** kind + 1 per slot, 0 for an empty slot; a power of two, at most half full */
  private slots: number[] = new Array(2048).fill(0);
  private seedA = 1 | (Math.random() * 2 ** 32);
  private seedB = 1 | (Math.random() * 2 ** 32);
  private seedC = (Math.random() * 2 ** 32) | 0;

  constructor(private algo: number) {}

  private slot(k0: number, k1: number, length: number): number {
    const h = Math.imul(k0 ^ this.seedC, this.seedA) ^ Math.imul(k1 + length, this.seedB);
    return (h ^ (h >>> 15)) & (this.slots.length - 1);
  }

  /** The kind with this prefix and length, or -1. */
  private kind(k0: number, k1: number, length: number): number {
    const mask = this.slots.length - 1;
    for (let i = this.slot(k0, k1, length); ; i = (i + 1) & mask) {
      const e = this.slots[i] - 1;
      if (e < 0) return -1;
      if (this.key0[e] === k0 && this.key1[e] === k1 && this.lengths[e] === length) return e;
    }
  }

  private insert(e: number): void {
    const mask = this.slots.length - 1;
    let i = this.slot(this.key0[e], this.key1[e], this.lengths[e]);
    while (this.slots[i]) i = (i + 1) & mask;
    this.slots[i] = e + 1;
  }

  add(m: BasisChecksums): void {
    if (this.fine) {
      if (m.fine.min !== this.fine.min || m.fine.avg !== this.fine.avg || m.fine.max !== this.fine.max) throw bad('Basis Checksums change their chunk sizes within a session');
    } else {
      // the rules of Hello's sizes (§2), up to 16 MiB
      checkParams({ ...m.fine, op: 0, every: 16 });
      this.fine = { ...m.fine };
    }
    if (this.count + m.lengths.length > MAX_HINTS) throw new ProtocolError(ErrorCode.LimitExceeded, `more than ${MAX_HINTS} Basis Checksums`);
    const view = new DataView(m.prefixes.buffer, m.prefixes.byteOffset, m.prefixes.byteLength);
    let offset = m.offset;
    for (let k = 0; k < m.lengths.length; k++) {
      const length = m.lengths[k];
      if (length === 0 || length > m.fine.max) throw bad(`a Basis Checksums chunk of ${length} bytes, outside 1..${m.fine.max}`);
      if (!Number.isSafeInteger(offset + length)) throw bad('Basis Checksums beyond 2^53 bytes');
      this.count++;
      const k0 = view.getUint32(k * PREFIX, true);
      const k1 = view.getUint32(k * PREFIX + 4, true);
      const e = this.kind(k0, k1, length);
      if (e >= 0) {
        const more = this.more.get(e);
        if (!more) this.more.set(e, { offsets: [this.offsets[e], offset], sorted: this.offsets[e] < offset });
        else {
          more.sorted &&= more.offsets[more.offsets.length - 1] < offset;
          more.offsets.push(offset);
        }
      } else this.newKind(k0, k1, length, offset);
      offset += length;
    }
  }

  private newKind(k0: number, k1: number, length: number, offset: number): void {
    const e = this.kinds++;
    this.key0.push(k0);
    this.key1.push(k1);
    this.lengths.push(length);
    this.offsets.push(offset);
    if (2 * this.kinds > this.slots.length) {
      this.slots = new Array(2 * this.slots.length).fill(0);
      for (let i = 0; i < this.kinds; i++) this.insert(i);
    } else this.insert(e);
  }

  /** The basis offset of a listed chunk with this prefix and length, or -1; of several (the
   *  same bytes repeated in the basis), the one at `near` or else the first after it (else the
   *  last before it): the copy then continues the one before, and the receiver reads the basis
   *  in order. */
  private find(prefixes: DataView, k: number, length: number, near: number): number {
    const e = this.kind(prefixes.getUint32(k * PREFIX, true), prefixes.getUint32(k * PREFIX + 4, true), length);
    if (e < 0) return -1;
    const more = this.more.get(e);
    if (!more) return this.offsets[e]; // the usual case
    if (!more.sorted) {
      more.offsets.sort((x, y) => x - y);
      more.sorted = true;
    }
    const o = more.offsets;
    let lo = 0;
    let hi = o.length; // the first offset >= near
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (o[mid] < near) lo = mid + 1;
      else hi = mid;
    }
    return lo < o.length ? o[lo] : o[o.length - 1];
  }

  /**
   * Refines consecutive chunks whose bytes are `run`, chunk k ending at `ends[k]` (relative to
   * the run): each becomes its bytes (nothing matched in it) or pieces — literal bytes (views
   * of `run`) and copies of basis bytes, consecutive copies merged. Returns them with the
   * bytes copied.
   */
  refine(run: Uint8Array, ends: number[]): { chunks: (Uint8Array | Piece[])[]; copied: number } {
    const fine = this.fine!;
    // Stretches of the run: [start, end) copied from basis offset `from`, or literal (-1).
    const starts: number[] = [];
    const froms: number[] = [];
    let copied = 0;
    const add = (start: number, from: number) => {
      const n = starts.length;
      if (n && (from < 0 ? froms[n - 1] < 0 : froms[n - 1] >= 0 && froms[n - 1] + start - starts[n - 1] === from)) return; // extends the last one
      starts.push(start);
      froms.push(from);
    };
    let dry = 0; // windows in a row without a match
    let next = 0; // the basis offset after the last copy
    for (let w = 0, nth = 0; w < run.length; w += WINDOW, nth++) {
      const end = Math.min(run.length, w + WINDOW);
      if (dry >= 2 && nth % PROBE && end < run.length) {
        add(w, -1);
        continue;
      }
      const { lengths, prefixes } = fineCut(run.subarray(w, end), fine, this.algo);
      const view = new DataView(prefixes.buffer, prefixes.byteOffset, prefixes.byteLength);
      let hit = false;
      for (let k = 0, o = w; k < lengths.length; o += lengths[k++]) {
        const n = starts.length - 1;
        const from = this.find(view, k, lengths[k], n >= 0 && froms[n] >= 0 ? froms[n] + o - starts[n] : next);
        if (from >= 0) {
          next = from + lengths[k];
          hit = true;
          copied += lengths[k];
        }
        add(o, from);
      }
      dry = hit ? 0 : dry + 1;
    }
    starts.push(run.length);
    // Cut the stretches at the chunks' ends.
    const chunks: (Uint8Array | Piece[])[] = [];
    let s = 0;
    for (let k = 0, begin = 0; k < ends.length; begin = ends[k++]) {
      const end = ends[k];
      const pieces: Piece[] = [];
      while (starts[s + 1] <= begin) s++;
      for (let t = s; t < froms.length && starts[t] < end; t++) {
        const a = Math.max(begin, starts[t]);
        const b = Math.min(end, starts[t + 1]);
        pieces.push(froms[t] < 0 ? run.subarray(a, b) : ({ offset: froms[t] + a - starts[t], length: b - a } satisfies Copy));
      }
      chunks.push(pieces.length === 1 && pieces[0] instanceof Uint8Array ? pieces[0] : pieces);
    }
    return { chunks, copied };
  }
}

/** Bytes the receiver reads at once for the copies of refined chunks it does not hold. */
export const COPY_WINDOW = 128 << 10;
/** Listed basis bytes the receiver keeps for the copies to come, per session. */
export const KEEP_LISTED = 16 << 20;

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
