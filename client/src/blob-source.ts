/**
 * A Source (shared/src/chunk-index.ts) over a Blob: a picked File, or a basis to pull against.
 *
 * Chunking reads the file from start to end; those reads go through one stream of the Blob
 * (`Blob.stream()`, read into buffers of this module's own with a BYOB reader), which the
 * browser fills ahead through one pipe. Slice reads (`slice(a, b).arrayBuffer()`) cost the
 * browser process a round trip each and about twice the CPU per byte at 4 MiB (256 MiB: 0.5 s
 * against 0.2–0.3 s in Chromium, bench/results/page-vs-cli.md); they serve the other reads
 * (the chunks a sender refines, a sample, a read the stream has passed).
 */
import type { Source } from '../../shared/src/chunk-index.ts';

/** A read at offset 0 at least this long starts a stream (a pass over the whole file). */
const STREAM_MIN = 1 << 20;
/** A stream that hands over nothing for this long is given up for slice reads: Chromium's Blob
 *  stream, opened again on a Blob whose earlier stream was cancelled or whose slices the socket
 *  is reading, now and then never delivers (a push stalled after its commit in about 1 of 10
 *  runs of bench/browser/page-kept.bench.ts). A local file delivers within milliseconds. */
export const STREAM_STALL_MS = 3000;

/** Reads of `blob` in order from one BYOB stream: `read` fills a new buffer of its own. */
class StreamReads {
  private reader: ReadableStreamBYOBReader | null = null;
  private pos = 0;
  private busy = false;
  private broken = false;

  constructor(private readonly blob: Blob) {}

  /** whether a read of `length` at `offset` is the stream's (it continues it, or starts one) */
  takes(offset: number, length: number): boolean {
    return !this.busy && !this.broken && ((this.reader !== null && offset === this.pos) || (offset === 0 && length >= STREAM_MIN));
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    this.busy = true;
    try {
      if (!this.reader || offset !== this.pos) this.open();
      // A stream reads on from the file it opened, changed or not; a slice read checks that the
      // file is the one picked (its size and modification time), as every read of the Blob did
      // before: one byte of it runs alongside each read, so a file changed while it is chunked
      // fails the sync (NotReadableError) and is not read on.
      const unchanged = length > 0 ? this.blob.slice(offset, offset + 1).arrayBuffer() : null;
      unchanged?.catch(() => {}); // (awaited below)
      let buf = new ArrayBuffer(length);
      let got = 0;
      while (got < length) {
        const { value, done } = await this.next(new Uint8Array(buf, got, length - got));
        if (value) {
          buf = value.buffer as ArrayBuffer; // (the buffer read into is handed back in `value`)
          got += value.byteLength;
        }
        if (done) break;
      }
      await unchanged;
      this.pos = offset + got;
      return new Uint8Array(buf, 0, got);
    } catch (e) {
      this.close();
      throw e;
    } finally {
      this.busy = false;
    }
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

  private open() {
    this.close();
    this.pos = 0;
    try {
      this.reader = this.blob.stream().getReader({ mode: 'byob' });
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

export interface BlobSourceOptions {
  /** hashes a run of chunks off this thread, handed the run's bytes (hash-pool.ts) */
  hashRun?: (offset: number, lengths: Uint32Array, algo: number, pieces: Uint8Array[]) => Promise<Uint8Array>;
  /** throws once the transfer is cancelled */
  check?: () => void;
  /** sees how far each read (or slice handed to the socket) reaches */
  onRead?: (end: number) => void;
}

/** `file` as a Source; every read returns a new buffer, so its chunks go to `hashRun` with
 *  their bytes (handed over, not copied). */
export function blobSource(file: Blob, o: BlobSourceOptions = {}): Source {
  // The file is sliced once, and every later slice is one of that Blob: a File may ask the
  // browser process for its size and modification time at each `size` and `slice` (Chromium
  // does where it holds no snapshot of them); the Blob's reads fail if the file changes
  // meanwhile, as the File's do.
  const size = file.size;
  const blob = file.slice(0, size);
  const stream = typeof blob.stream === 'function' ? new StreamReads(blob) : null;
  const { hashRun, check, onRead } = o;
  return {
    size,
    ...(hashRun && {
      hashRun: (offset: number, lengths: Uint32Array, algo: number, pieces?: Uint8Array[]) => {
        check?.();
        if (!pieces) return Promise.reject(new Error('a run without its bytes'));
        return hashRun(offset, lengths, algo, pieces);
      },
    }),
    // the Delta Bytes go as slices of the file the socket reads itself (Delta Runs); how far
    // they reach is how far the sending is
    blobSlice: (offset, length) => {
      onRead?.(offset + length);
      return blob.slice(offset, offset + length);
    },
    read: async (offset, length) => {
      check?.();
      let bytes: Uint8Array | null = null;
      if (stream?.takes(offset, length)) bytes = await stream.read(offset, length).catch(() => null);
      bytes ??= new Uint8Array(await blob.slice(offset, offset + length).arrayBuffer());
      onRead?.(offset + bytes.length);
      return bytes;
    },
  };
}
