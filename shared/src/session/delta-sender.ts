/**
 * Phase 3's sending (paper §IV-D; docs/protocol.md §3): the Delta Bytes, the target chunks the
 * receiver lacks, in target order below the last Verdict sent. The sender (sender.ts) decides
 * what is judged; this module decides how each Delta message is made and sends it:
 *
 * - as a Delta message: the chunks read into one buffer, reused from message to message (from
 *   a source that can slice, the message's runs read at once), and refined against the basis
 *   bytes the receiver listed (Basis Checksums, refine.ts), a piece the receiver has going as a
 *   copy;
 * - as a Delta Run: slices of the source that the socket reads itself (conn.sendDeltaRun),
 *   never read into JavaScript. A source that can slice (`blobSlice`: the page's File) sends
 *   so whatever refining does not pay for (`send`, `InnerYield`).
 *
 * A Delta message holds up to `maxMessage` bytes, a Delta Run up to `maxRun` (at least one
 * chunk).
 */
import type { Refiner } from './basis-checksums.ts';
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import type { ChecksumList } from './checksum-list.ts';
import type { Source } from '../chunking/chunk-index.ts';
import type { Conn } from '../transport/conn.ts';
import type { Piece } from '../wire/messages.ts';
import { Msg } from '../wire/protocol.ts';

/** A run of lacking chunks shorter than this is short (`DeltaSender.short`). */
const REFINE_RUN_MAX = 128 << 10;
/** A wire slower than this (bytes per ms: 8 MiB/s, `Conn.wireRate`) takes longer to send
 *  what refining a short run saves than the browser takes to read the run: a read costs the sync
 *  worker ~0.9 ms and the browser's IO threads about as much (CPU the chunking shares), and
 *  saves ~13 KB (random edits of 10% of 1 GiB: 19 MB refined into copies over ~1 500 short
 *  runs; bench/results/page-vs-cli.md). */
const SLOW_WIRE = 8 << 10;
/** The socket found full this recently (ms) makes the Delta Bytes' pace the wire's
 *  (`missCosts`). */
const FULL_LATELY_MS = 1000;
/** `readsBehind` looks back this many bytes sent. */
const READS_SEEN = 64 << 20;
/** Inner chunks are refined while the receiver has listed basis bytes for at least 1 in
 *  INNER_PAYS of the lacking bytes judged so far, and at least 1 in INNER_PAYS of the inner
 *  bytes refined lately came back as copies, or fewer than INNER_WINDOW bytes are tallied (the
 *  tally is halved when it passes twice this); */
const INNER_PAYS = 8;
const INNER_WINDOW = 512 << 10;
/** while they do not pay, one Delta message of them is refined as a probe after each
 *  INNER_PROBE bytes of them sent as Delta Runs. */
const INNER_PROBE = 32 << 20;

/**
 * Whether refining a source's *inner* chunks pays: the chunks of long runs of lacking ones (not
 * `DeltaSender.short`), which a source that can slice otherwise sends unread as Delta Runs.
 * Where edits are scattered, most of their bytes are old and the receiver lists the basis bytes
 * they face (refine.ts, `MiddleYield`): refined, a 1 MB change of 256-byte fragments costs a
 * third of its Delta Bytes sent whole (bench/results/page-kept.md). Where a region is written
 * anew, they hold only new bytes, and reading them into JavaScript costs about three times the
 * CPU of the browser reading the slices itself (bench/results/page-vs-cli.md). Where the
 * receiver lists little against the lacking bytes (new bytes appended, middles no longer
 * listed), refining cannot pay (`DeltaSender.listed`). Where it lists much, it still may not: a
 * file rewritten whole is one gap, listed whole while the receiver's tally is still empty. So
 * the sender also tallies the copies its refined inner chunks make, as the receiver tallies the
 * middles it lists.
 */
class InnerYield {
  private refined = 0;
  private copied = 0;
  /** inner bytes sent as Delta Runs since the last refined ones */
  private unrefined = 0;

  pays(): boolean {
    return this.refined < INNER_WINDOW || this.copied * INNER_PAYS >= this.refined || this.unrefined >= INNER_PROBE;
  }

  tally(refined: number, copied: number): void {
    this.refined += refined;
    this.copied += copied;
    this.unrefined = 0;
    if (this.refined > 2 * INNER_WINDOW) {
      this.refined /= 2;
      this.copied /= 2;
    }
  }

  sentWhole(bytes: number): void {
    this.unrefined += bytes;
  }
}

/** What the sender has judged: per chunk 1 once the receiver has it, and the chunk below which
 *  a Verdict is sent. `held` may be replaced as the list grows; it is read through this view. */
export interface Judged {
  readonly held: Uint8Array;
  readonly judgedTo: number;
}

export class DeltaSender {
  /** chunks below this are judged and sent: the Delta Bytes of [sentTo, judgedTo) are due */
  private sentTo = 0;
  /** where the last run that would be read to be refined starts (`cheap`; -1: none yet) */
  private readAt = -1;
  /** bytes sent, and the part of them refined into copies */
  literalBytes = 0;
  refinedBytes = 0;
  /** what a Delta message's chunks are read into, reused from message to message */
  private buffer: Uint8Array | null = null;
  private readonly inner = new InnerYield();
  /** lacking bytes of the chunks below `lackingTo` (all judged) */
  private lacking = 0;
  private lackingTo = 0;

  constructor(
    private readonly conn: Conn,
    private readonly list: ChecksumList,
    private readonly source: Source,
    private readonly table: Refiner,
    private readonly maxMessage: number,
    private readonly maxRun: number,
    private readonly judged: Judged,
  ) {}

  /** The target offset the Delta Bytes are sent up to. */
  sentOffset(): number {
    return this.list.offsets[this.sentTo];
  }

  /** Whether runs that would be read to be refined came within the last READS_SEEN bytes sent:
   *  the reads behind the list are in use (a scattered edit), so holding the list near them
   *  pays (sender.ts `ahead`). */
  readsBehind(): boolean {
    return this.readAt >= 0 && this.sentOffset() - this.readAt < READS_SEEN;
  }

  /**
   * Whether a run of lacking chunks that the source no longer holds costs time, so that
   * holding the list back for the Match Tokens pays (sender.ts `ahead`): on a slow wire such a
   * run is read to be refined, a round trip (`cheap`); on a fast one it goes whole, unread, and
   * its bytes cost time only while the Delta Bytes fill the socket. Where they do not (edits
   * scattered sparsely over a large file, on a fast wire) the few runs sent whole cost less than
   * the list held waiting for the receiver (bench/results/page-vs-cli.md).
   */
  missCosts(): boolean {
    return this.slowWire() || this.conn.fullWithin(FULL_LATELY_MS);
  }

  /** Whether the socket drains slower than SLOW_WIRE (`Conn.wireRate`). */
  private slowWire(): boolean {
    return (this.conn.wireRate() ?? Infinity) < SLOW_WIRE;
  }

  /** Skips the held chunks from `sentTo` on; whether Delta Bytes are due below `judgedTo`. */
  due(): boolean {
    const { held, judgedTo } = this.judged;
    while (this.sentTo < judgedTo && held[this.sentTo]) this.sentTo++;
    return this.sentTo < judgedTo;
  }

  /** Gives the message buffer back to the pool (every read into it was awaited). */
  close(): void {
    if (this.buffer) giveBuffers([this.buffer]);
    this.buffer = null;
  }

  /**
   * Sends the next Delta message: the chunks the receiver lacks from `sentTo` on, below
   * `judgedTo`, up to maxMessage bytes (at least one chunk), read in one go per run into one
   * buffer, reused from message to message (the message is encoded, a copy, before `send`
   * resolves). Chunks the receiver listed basis bytes for are refined (refine.ts).
   */
  async send(): Promise<void> {
    // Refining reads the bytes into JavaScript. Where the source can send slices unread (Delta
    // Runs), it is worth it once the receiver has listed basis bytes, for the chunks of a short
    // run of lacking ones (`short`), where an edit's old bytes may go on inside a chunk and are
    // a large part of the run, and for the chunks of long runs while refining them pays
    // (`InnerYield`); else those go as Delta Runs. Against a kept basis every lacking chunk is
    // refined: its bytes are all there to copy from.
    let short: boolean | undefined;
    let inner = false;
    if (this.source.blobSlice && !this.table.whole) {
      if (!this.table.count) return this.sendRun();
      if (this.due() && !this.short(this.sentTo)) {
        if (!this.listed() || !this.inner.pays() || !this.cheap(this.sentTo)) return this.sendRun(false);
        inner = true;
      } else if (!this.cheap(this.sentTo)) return this.sendRun(true, (k) => this.cheap(k));
      else short = true;
    }
    const { list, maxMessage } = this;
    const off = list.offsets;
    const indices: number[] = [];
    const chunks: (Uint8Array | Piece[])[] = [];
    let bytes = 0;
    let copied = 0;
    /** Takes run [from, to) of lacking chunks, read (`whole`: unrefined). */
    const take = (from: number, to: number, run: Uint8Array, whole = false) => {
      if (run.length !== off[to] - off[from]) throw new Error('the file changed size while syncing');
      const ends: number[] = [];
      for (let k = from; k < to; k++) {
        indices.push(k);
        ends.push(off[k + 1] - off[from]);
      }
      if (this.table.count && !whole) {
        // copy what the receiver listed of its basis instead of sending it
        const refined = this.table.refine(run, ends, off[from]);
        chunks.push(...refined.chunks);
        copied += refined.copied;
      } else for (let k = 0; k < ends.length; k++) chunks.push(run.subarray(k ? ends[k - 1] : 0, ends[k]));
    };
    // Each run is read into its place in the buffer. From a source that can slice (the page's
    // File) the message's runs are read at once: each read is a round trip to the browser
    // process. Others read each run in turn (a file read answers at once), refined against the
    // Basis Checksums in by then. Every read is awaited, failed or not, before the buffer can
    // be reused or given back.
    const together = this.source.blobSlice !== undefined;
    const reads: { from: number; to: number; whole: boolean; read: Promise<Uint8Array> }[] = [];
    let wholeBytes = 0;
    while (this.sentTo < this.judged.judgedTo) {
      let j = this.runEnd(bytes, short);
      const from = this.sentTo;
      // A message of short runs from a source that can slice also takes a long run between
      // them that fits in it whole, unrefined (as a Delta Run would send it): where edits are
      // many and scattered, short and long runs alternate, and each message, Delta Run or
      // Delta message, costs the browser a Blob and the socket a send.
      let whole = false;
      if (j === from && short && together && !(this.listed() && this.inner.pays())) {
        const e = this.runEnd(bytes);
        if (e > from && (this.judged.held[e] || e === this.judged.judgedTo)) {
          j = e;
          whole = true;
        }
      }
      if (j === from) break; // this message is full
      const length = off[j] - off[from];
      if (!this.buffer || this.buffer.length < bytes + length) {
        if (bytes) break; // (a single chunk above maxMessage goes alone)
        if (this.buffer) giveBuffers([this.buffer]);
        this.buffer = takeBuffer(Math.max(maxMessage, length));
      }
      const read = this.source.read(off[from], length, this.buffer.subarray(bytes));
      if (together) reads.push({ from, to: j, whole, read });
      else take(from, j, await read);
      if (whole) wholeBytes += length;
      bytes += length;
      this.sentTo = j;
    }
    const settled = await Promise.allSettled(reads.map((r) => r.read));
    for (const [i, { from, to, whole }] of reads.entries()) {
      const s = settled[i];
      if (s.status === 'rejected') throw s.reason;
      take(from, to, s.value, whole);
    }
    if (inner) this.inner.tally(bytes, copied);
    if (wholeBytes) this.inner.sentWhole(wholeBytes);
    if (indices.length) await this.conn.send({ type: Msg.Delta, indices: Uint32Array.from(indices), chunks });
    this.literalBytes += bytes - copied;
    this.refinedBytes += copied;
  }

  /** Whether the receiver has listed basis bytes for at least 1 in INNER_PAYS of the lacking
   *  bytes judged so far. */
  private listed(): boolean {
    const { held, judgedTo } = this.judged;
    const off = this.list.offsets;
    for (; this.lackingTo < judgedTo; this.lackingTo++) if (!held[this.lackingTo]) this.lacking += off[this.lackingTo + 1] - off[this.lackingTo];
    return this.table.copyable * INNER_PAYS >= this.lacking;
  }

  /** Skips the held chunks from `sentTo` on; returns where the run of lacking chunks from
   *  there (only a short run, or only a long one, if `short` is given) ends in a message of at
   *  most `maxMessage` bytes that holds `bytes` so far (`sentTo`: the message is full). */
  private runEnd(bytes: number, short?: boolean, maxMessage = this.maxMessage): number {
    const { list } = this;
    const { held, judgedTo } = this.judged;
    this.due();
    const from = this.sentTo;
    if (from < judgedTo && short !== undefined && this.short(from) !== short) return from;
    let j = from;
    while (j < judgedTo && !held[j] && (bytes + list.offsets[j + 1] - list.offsets[from] <= maxMessage || (j === from && bytes === 0))) j++;
    return j;
  }

  /** Whether lacking chunk k is in a short run of lacking chunks: one (as far as it is judged)
   *  shorter than REFINE_RUN_MAX. A short run is refined whole, one read for all its chunks: an
   *  edit's old bytes may go on inside its chunks and are a large part of it. In a longer run,
   *  the old bytes its edge chunks may hold are a small part of it (about an average chunk at
   *  each end) unless edits are scattered all over it: its chunks are inner chunks, refined
   *  while that pays (`InnerYield`). */
  private short(k: number): boolean {
    const { held, judgedTo } = this.judged;
    const off = this.list.offsets;
    let a = k;
    let b = k + 1;
    while (a > 0 && !held[a - 1] && off[b] - off[a] < REFINE_RUN_MAX) a--;
    while (b < judgedTo && !held[b] && off[b] - off[a] < REFINE_RUN_MAX) b++;
    return off[b] - off[a] < REFINE_RUN_MAX;
  }

  /**
   * Whether refining the run at lacking chunk k is cheap where its bytes must be read: a
   * source that can slice sends a run it cannot read without a round trip to another
   * process (the browser's: ~1 ms each, thousands on a scattered edit, which hold up the
   * chunking of the file) unrefined in a Delta Run, unless the wire is slow (`SLOW_WIRE`):
   * then the bytes refining saves cost more than the read.
   */
  private cheap(k: number): boolean {
    const off = this.list.offsets;
    this.readAt = off[k];
    return !this.source.holds || this.source.holds(off[k], off[k + 1] - off[k]) || this.slowWire();
  }

  /** Sends the next Delta message as a Delta Run: its runs of chunks (only long runs, with
   *  `short` false; only short ones, with `short` true) go as slices of the source, which the
   *  socket reads itself (conn.sendDeltaRun), up to a run that `stop` says goes otherwise. */
  private async sendRun(short?: boolean, stop?: (k: number) => boolean): Promise<void> {
    const { list, source } = this;
    const indices: number[] = [];
    const parts: Blob[] = [];
    let bytes = 0;
    while (this.sentTo < this.judged.judgedTo) {
      const j = this.runEnd(bytes, short, this.maxRun);
      const from = this.sentTo;
      if (j === from || (bytes && stop?.(from))) break; // this message is full, or it ends here
      for (let k = from; k < j; k++) indices.push(k);
      parts.push(source.blobSlice!(list.offsets[from], list.offsets[j] - list.offsets[from]));
      bytes += list.offsets[j] - list.offsets[from];
      this.sentTo = j;
    }
    if (short === false) this.inner.sentWhole(bytes);
    if (indices.length) await this.conn.sendDeltaRun(Uint32Array.from(indices), Uint32Array.from(indices, (k) => list.lengths[k]), parts);
    this.literalBytes += bytes;
  }
}
