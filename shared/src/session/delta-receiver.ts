/**
 * Phase 3's taking (paper §IV-D; docs/protocol.md §3): the receiver's side of the Delta Bytes.
 * The receiver (receiver.ts) rebuilds the target in order and, at a chunk the Verdicts left to
 * Delta Bytes, asks this module for the run of them the current Delta message holds from there.
 * It checks each chunk against the Checksum List (its index, its length), joins a run of them
 * into one buffer so that one wasm call hashes it, and puts a refined chunk together from its
 * pieces: literal bytes, and copies of the basis bytes the receiver listed (refine.ts).
 */
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { type Delta, chunkLength } from '../wire/messages.ts';
import { DELTA_MESSAGE_BYTES } from '../base/limits.ts';
import { inconsistent as bad } from '../wire/protocol.ts';
import type { BasisListing } from './refine.ts';

/** Where a run's pieces copied from the basis lie in it (sink.ts BasisSpans). */
type Spans = { at: number; offset: number; length: number }[];

export class DeltaReceiver {
  /** the literal bytes taken, and the bytes copied from the basis for refined chunks */
  literalBytes = 0;
  refinedBytes = 0;
  /** the Delta message being taken, and its next chunk */
  private delta: Delta | null = null;
  private at = 0;
  /** what consecutive Delta chunks are joined into, to hash them in one call */
  private joinBuffer: Uint8Array | null = null;

  /** Whether every chunk of the current Delta message is taken (the next message is due). */
  get taken(): boolean {
    return !this.delta || this.at === this.delta.indices.length;
  }

  /** Takes in the next Delta message. */
  open(d: Delta): void {
    if (d.indices.length === 0) throw bad('empty Delta message');
    this.delta = d;
    this.at = 0;
  }

  /** At the end of what is judged: the current message may hold no chunk beyond `judgedTo`. */
  checkTaken(judgedTo: number): void {
    const d = this.delta;
    if (d && this.at !== d.indices.length) throw bad(`Delta Bytes carry chunk ${d.indices[this.at]}, not below the verdict's ${judgedTo}`);
  }

  /**
   * Takes the consecutive Delta chunks from chunk i on that the current message holds, while
   * `lacking` (judged, and not copied from the basis), up to DELTA_MESSAGE_BYTES, each as long
   * as `lengths` says; returns where they end and their bytes in one run.
   */
  async take(i: number, lengths: Uint32Array, lacking: (j: number) => boolean, listing: BasisListing | null): Promise<{ end: number; run: Uint8Array; spans: Spans }> {
    const d = this.delta!;
    const from = this.at;
    let j = i;
    let bytes = 0;
    let whole = true; // every chunk is plain bytes
    while (this.at < d.indices.length && d.indices[this.at] === j && lacking(j)) {
      const c = d.chunks[this.at];
      const length = chunkLength(c);
      if (j > i && bytes + length > DELTA_MESSAGE_BYTES) break;
      if (length !== lengths[j]) throw bad(`Delta chunk ${j} is ${length} bytes, the Checksum List says ${lengths[j]}`);
      if (!(c instanceof Uint8Array)) whole = false;
      bytes += length;
      this.at++;
      j++;
    }
    if (j === i) throw bad(`Delta Bytes sent chunk ${d.indices[this.at]}, expected chunk ${i}`);
    let run = d.chunks[from] as Uint8Array;
    const spans: Spans = [];
    if (j - i > 1 || !whole) {
      run = bytes <= DELTA_MESSAGE_BYTES ? (this.joinBuffer ??= takeBuffer(DELTA_MESSAGE_BYTES)).subarray(0, bytes) : new Uint8Array(bytes);
      await this.join(d, from, this.at, run, listing, spans);
    } else this.literalBytes += bytes;
    return { end: j, run, spans };
  }

  /** Gives the join buffer back to the pool (no read into it is running). */
  close(): void {
    if (this.joinBuffer) giveBuffers([this.joinBuffer]);
    this.joinBuffer = null;
  }

  /** Puts the Delta chunks [from, to) of `d` one after another into `run`: literal pieces as
   *  they are, copies from the basis. */
  private async join(d: Delta, from: number, to: number, run: Uint8Array, listing: BasisListing | null, spans: Spans): Promise<void> {
    let o = 0;
    for (let k = from; k < to; k++) {
      const c = d.chunks[k];
      for (const p of c instanceof Uint8Array ? [c] : c) {
        if (p instanceof Uint8Array) {
          run.set(p, o);
          this.literalBytes += p.length;
        } else {
          if (!listing) throw bad('a Delta chunk copies basis bytes, and there is no basis');
          run.set(await listing.copy(p), o);
          spans.push({ at: o, offset: p.offset, length: p.length });
          listing.middles.copy(d.indices[k], p.offset, p.length);
          this.refinedBytes += p.length;
        }
        o += p.length;
      }
    }
  }
}
