/**
 * A Source (shared/src/chunking/chunk-index.ts) over a Blob: a picked File, or a basis to pull against.
 *
 * Chunking reads the file from start to end; those reads go through one stream of the Blob
 * (`Blob.stream()`, read into buffers of this module's own with a BYOB reader), which the
 * browser fills ahead through one pipe. Slice reads (`slice(a, b).arrayBuffer()`) cost the
 * browser process a round trip each and about twice the CPU per byte at 4 MiB (256 MiB: 0.5 s
 * against 0.2–0.3 s in Chromium, bench/results/page-vs-cli.md); they serve a read on its own
 * (a sample, a read the stream has passed). Reads that follow one another closely (the chunks
 * a sender refines, thousands of short stretches on a scattered edit) go through a second
 * stream, opened where they start, that skips the bytes between them: one pipe instead of a
 * round trip per stretch.
 */
import { giveBuffers, takeBuffer } from '../../shared/src/base/buffers.ts';
import { READ_SLICE, type Source } from '../../shared/src/chunking/chunk-index.ts';
import { pieceBuffers } from '../../shared/src/chunking/hash-pool.ts';
import { PASS_LEAD } from '../../shared/src/base/limits.ts';

/** A read at offset 0 at least this long starts a stream (a pass over the whole file). */
const STREAM_MIN = 1 << 20;
/** A read that starts at most this far after the end of the read before it (not the pass's)
 *  goes through the second stream, which reads the bytes between and drops them, while such
 *  reads are dense: the gaps before them average at most DENSE_GAP (an average over the last
 *  eight or so, `DENSE_WEIGHT`). Where they are sparser, a slice read per stretch costs the
 *  browser less than streaming the gaps and opening the stream again after each far read
 *  (bench/results/page-vs-cli.md: random edits of 30% of 1 GiB, ~3 500 reads, gain; of 10%,
 *  ~1 000 reads, lose). */
export const NEAR_GAP = 1 << 20;
export const DENSE_GAP = 512 << 10;
const DENSE_WEIGHT = 1 / 8;
/** A stream's reads check that the file is unchanged (a one-byte slice read, a round trip) at
 *  its first read, then once per this many bytes it passes, and at a read that reaches the
 *  file's end: a file changed while the pass reads it fails that check at the latest (a changed
 *  file's reads fail with NotReadableError), so no push is built from a torn read, and a change
 *  is found within this many bytes. A file changed after its chunks were read fails the push
 *  anyway: the receiver verifies every chunk's strong hash (VerifyFailed, which the page
 *  reports as the file unreadable), and the socket's reads of Delta Runs fail. */
const CHECK_EVERY = 16 << 20;
/** The second stream's bytes are read into a scratch buffer of this size (the skipped ones
 *  dropped, a read's copied into the buffer it is asked to fill). */
const SKIP_BUFFER = 256 << 10;
/** A stream that hands over nothing for this long is given up for slice reads: Chromium's Blob
 *  stream, opened again on a Blob whose earlier stream was cancelled or whose slices the socket
 *  is reading, now and then never delivers (a push stalled after its commit in about 1 of 10
 *  runs of bench/browser/page-kept.bench.ts). A local file delivers within milliseconds. */
export const STREAM_STALL_MS = 3000;

/** Reads of `blob` in order from one BYOB stream: `read` fills a new buffer of its own. A read
 *  that starts beyond where the stream is skips the bytes between; one before it, or more than
 *  `gap` beyond, opens the stream anew where it starts. */
class StreamReads {
  private reader: ReadableStreamBYOBReader | null = null;
  private pos = 0;
  /** where the file was last checked unchanged (-1: not since the stream opened) */
  private checked = -1;
  private busy = false;
  private broken = false;
  private scratch: ArrayBuffer | null = null;

  constructor(
    private readonly blob: Blob,
    private readonly gap = 0,
  ) {}

  /** whether a read of `length` at `offset` is the stream's (it continues it, or starts one) */
  takes(offset: number, length: number): boolean {
    return !this.busy && !this.broken && ((this.reader !== null && offset === this.pos) || (offset === 0 && length >= STREAM_MIN));
  }

  /** where the stream has read to */
  get at(): number {
    return this.pos;
  }

  /** whether the stream can serve reads (none stalled or failed to open) */
  get usable(): boolean {
    return !this.broken;
  }

  /** Reads `length` bytes at `offset` into a buffer of its own (buffers.ts), or into `into` (at least `length`
   *  bytes; the bytes pass through the scratch buffer, as a BYOB read takes its buffer away). */
  async read(offset: number, length: number, into?: Uint8Array): Promise<Uint8Array> {
    this.busy = true;
    try {
      if (!this.reader || offset < this.pos || offset - this.pos > this.gap) this.open(offset);
      // A stream reads on from the file it opened, changed or not; a slice read checks that the
      // file is the one picked (its size and modification time), as every read of the Blob did
      // before: one byte of it runs alongside a read at least every CHECK_EVERY bytes, so a
      // file changed while it is read fails a read (NotReadableError) and is not read on.
      const check = length > 0 && (this.checked < 0 || offset - this.checked >= CHECK_EVERY || offset + length >= this.blob.size);
      const unchanged = check ? this.blob.slice(offset, offset + 1).arrayBuffer() : null;
      unchanged?.catch(() => {}); // (awaited below)
      if (check) this.checked = offset;
      let done = false;
      while (this.pos < offset && !done) {
        const r = await this.next(this.scratchView(offset - this.pos));
        if (r.value) {
          this.scratch = r.value.buffer as ArrayBuffer;
          this.pos += r.value.byteLength;
        }
        done = r.done;
      }
      if (into) {
        let got = 0;
        while (got < length && !done) {
          const r = await this.next(this.scratchView(length - got));
          if (r.value) {
            this.scratch = r.value.buffer as ArrayBuffer;
            into.set(r.value, got);
            got += r.value.byteLength;
          }
          done = r.done;
        }
        await unchanged;
        this.pos += got;
        return into.subarray(0, got);
      }
      // (a buffer the hash worker handed back, buffers.ts: fresh memory costs page faults)
      let buf = takeBuffer(length).buffer as ArrayBuffer;
      let got = 0;
      while (got < length && !done) {
        const r = await this.next(new Uint8Array(buf, got, length - got));
        if (r.value) {
          buf = r.value.buffer as ArrayBuffer; // (the buffer read into is handed back in `value`)
          got += r.value.byteLength;
        }
        done = r.done;
      }
      await unchanged;
      this.pos += got;
      return new Uint8Array(buf, 0, got);
    } catch (e) {
      this.close();
      this.scratch = null; // (a read that failed may have taken it away)
      throw e;
    } finally {
      this.busy = false;
    }
  }

  /** The scratch buffer, up to `n` bytes of it. */
  private scratchView(n: number): Uint8Array {
    this.scratch ??= new ArrayBuffer(SKIP_BUFFER);
    return new Uint8Array(this.scratch, 0, Math.min(n, SKIP_BUFFER));
  }

  /** The reader's next read, or an error once it has stalled: the stream is then given up and
   *  this source reads by slices (the caller's fallback). */
  private async next(view: Uint8Array): Promise<ReadableStreamReadResult<Uint8Array>> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stalled = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.broken = true;
        reject(new Error(`the file's stream delivered nothing in ${STREAM_STALL_MS} ms`));
      }, STREAM_STALL_MS);
    });
    try {
      return await Promise.race([this.reader!.read(view), stalled]);
    } finally {
      clearTimeout(timer);
    }
  }

  private open(offset: number) {
    this.close();
    this.pos = offset;
    this.checked = -1;
    try {
      this.reader = (offset ? this.blob.slice(offset) : this.blob).stream().getReader({ mode: 'byob' });
    } catch {
      this.broken = true; // a browser whose Blob streams have no BYOB reader: slices only
      throw new Error('no BYOB reader');
    }
  }

  close() {
    this.reader?.cancel().catch(() => {});
    this.reader = null;
  }
}

/** The pass's last bytes kept for reads behind it (`Recent`): as far as the sender lets the
 *  list run ahead of them (PASS_LEAD), plus the slices the pass reads ahead of the list. */
export const RECENT_BYTES = PASS_LEAD + 2 * READ_SLICE;

/**
 * The pass's last `max` bytes, kept once a read they could serve is asked for while the pass
 * runs (a sender refining Delta chunks against the receiver's Basis Checksums reads them:
 * otherwise a round trip to the browser process each, thousands on a scattered edit). The
 * sender keeps the list within PASS_LEAD of its Delta Bytes and its Match Tokens (sender.ts
 * `ahead`), so such reads fall within them (bench/results/page-vs-cli.md).
 * They are the pass's own buffers, not a copy: a buffer handed to a hash worker comes back with
 * its run's hashes (`handBack`), before any Delta read of its chunks can be due (a Verdict waits
 * for their hashes); one dropped goes back to the pool (buffers.ts). The bytes are the ones the
 * pass read and hashed; a file changed since fails where the socket reads its Delta Runs, or at
 * the receiver's check of every chunk's hash.
 */
export class Recent {
  /** the pass's slices, oldest first; `bytes` is detached (shorter than `length`) while a
   *  hash worker has its buffer */
  private slots: { offset: number; length: number; bytes: Uint8Array }[] = [];
  private end = 0;
  /** bytes in `slots` */
  private held = 0;
  /** whether slices are kept (from the first read they could serve) */
  private on = false;

  constructor(private readonly max: number) {}

  /** Keeps the pass's slice at `offset` (its buffer, not a copy), once on. */
  keep(offset: number, bytes: Uint8Array): void {
    if (!this.on || !this.max) return;
    if (offset !== this.end) this.drop(this.slots.length); // a new pass
    this.slots.push({ offset, length: bytes.length, bytes });
    this.end = offset + bytes.length;
    this.held += bytes.length;
    while (this.slots.length > 1 && this.held - this.slots[0].length >= this.max) this.drop(1);
  }

  /** A buffer a hash worker handed back, whose first byte is at `offset` in the file: kept if
   *  it is a slice's, else false. */
  handBack(offset: number, buffer: ArrayBuffer): boolean {
    const s = this.slots.find((x) => x.offset === offset);
    if (!s || s.bytes.length === s.length || buffer.byteLength < s.length) return false;
    s.bytes = new Uint8Array(buffer, 0, s.length);
    return true;
  }

  private drop(n: number) {
    for (const s of this.slots.splice(0, n)) {
      this.held -= s.length;
      if (s.bytes.length === s.length) giveBuffers([new Uint8Array(s.bytes.buffer)]);
    }
  }

  /** Whether bytes [offset, offset + length) are kept (or with a hash worker); turns keeping on. */
  holds(offset: number, length: number): boolean {
    this.on = true;
    return offset >= this.end - Math.min(this.held, this.max) && offset + length <= this.end;
  }

  /** Bytes [offset, offset + length) if kept (into `into` when it is long enough), else null;
   *  turns keeping on. */
  read(offset: number, length: number, into?: Uint8Array): Uint8Array | null {
    if (!this.holds(offset, length)) return null;
    const slots = this.slots.filter((s) => s.offset < offset + length && s.offset + s.length > offset);
    if (slots.some((s) => s.bytes.length !== s.length)) return null;
    const out = into && into.length >= length ? into.subarray(0, length) : new Uint8Array(length);
    for (const s of slots) {
      const a = Math.max(offset, s.offset);
      const b = Math.min(offset + length, s.offset + s.length);
      out.set(s.bytes.subarray(a - s.offset, b - s.offset), a - offset);
    }
    return out;
  }
}

export interface BlobSourceOptions {
  /** hashes a run of chunks off this thread, handed the run's bytes (hash-pool.ts); `onSpent`
   *  gets the pieces' buffers back (one per buffer, in the order the pieces first use them) */
  hashRun?: (offset: number, lengths: Uint32Array, algo: number, pieces: Uint8Array[], onSpent: (buffers: ArrayBuffer[]) => void) => Promise<Uint8Array>;
  /** throws once the transfer is cancelled */
  check?: () => void;
  /** sees how far each read (or slice handed to the socket) reaches */
  onRead?: (end: number) => void;
}

/** `file` as a Source; every read returns a buffer of its own, so its chunks go to `hashRun` with
 *  their bytes (handed over, not copied). */
export function blobSource(file: Blob, o: BlobSourceOptions = {}): Source {
  // The file is sliced once, and every later slice is one of that Blob: a File may ask the
  // browser process for its size and modification time at each `size` and `slice` (Chromium
  // does where it holds no snapshot of them); the Blob's reads fail if the file changes
  // meanwhile, as the File's do.
  const size = file.size;
  const blob = file.slice(0, size);
  const streams = typeof blob.stream === 'function';
  const pass = streams ? new StreamReads(blob) : null;
  // reads near one another (not the pass's), one at a time in the order they are asked for
  const near = streams ? new StreamReads(blob, NEAR_GAP) : null;
  let nearQueue: Promise<unknown> = Promise.resolve();
  const recent = pass ? new Recent(Math.min(RECENT_BYTES, size)) : null;
  /** where the last read that was not the pass's ends (-1: none yet), and the average gap
   *  before such reads (a read that does not follow counts as NEAR_GAP) */
  let lastEnd = -1;
  let gap = NEAR_GAP;
  const { hashRun, check, onRead } = o;
  return {
    size,
    ...(hashRun && {
      hashRun: (offset: number, lengths: Uint32Array, algo: number, pieces?: Uint8Array[]) => {
        check?.();
        if (!pieces) return Promise.reject(new Error('a run without its bytes'));
        // where each buffer's first byte is in the file (taken before they are handed over):
        // the pass's slices come back to those kept (`Recent`), others go to the pool
        const starts = new Map<ArrayBufferLike, number>();
        let at = offset;
        for (const p of pieces) {
          if (!starts.has(p.buffer)) starts.set(p.buffer, at - p.byteOffset);
          at += p.length;
        }
        const where = pieceBuffers(pieces).map((b) => starts.get(b)!);
        return hashRun(offset, lengths, algo, pieces, (spent) => spent.forEach((b, i) => recent?.handBack(where[i], b) || giveBuffers([new Uint8Array(b)])));
      },
    }),
    // the Delta Bytes go as slices of the file the socket reads itself (Delta Runs); how far
    // they reach is how far the sending is
    blobSlice: (offset, length) => {
      onRead?.(offset + length);
      return blob.slice(offset, offset + length);
    },
    // (the pass's last bytes are kept once such reads come while it runs: a sample read
    // before it keeps nothing)
    holds: (offset, length) => !!pass?.at && recent!.holds(offset, length),
    read: async (offset, length, into) => {
      check?.();
      let bytes: Uint8Array | null = null;
      if (pass?.takes(offset, length)) {
        bytes = await pass.read(offset, length).catch(() => null);
        if (bytes) recent!.keep(offset, bytes);
      } else if (pass?.at && (bytes = recent!.read(offset, length, into))) {
        // (served from the pass's last slices)
      } else {
        const follows = lastEnd >= 0 && offset >= lastEnd && offset - lastEnd <= NEAR_GAP;
        gap += ((follows ? offset - lastEnd : NEAR_GAP) - gap) * DENSE_WEIGHT;
        lastEnd = offset + length;
        if (follows && gap <= DENSE_GAP && near?.usable) {
          const read = nearQueue.then(() => (near.usable ? near.read(offset, length, into && into.length >= length ? into : undefined) : null));
          nearQueue = read.catch(() => {});
          bytes = await read.catch(() => null);
        }
      }
      bytes ??= new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
      onRead?.(offset + bytes.length);
      return bytes;
    },
  };
}
