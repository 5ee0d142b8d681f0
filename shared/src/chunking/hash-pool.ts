/**
 * Hash workers: the strong hashes of a sender's chunks computed on other threads while this one
 * cuts the file (FastCDC + FastFp). In Node a worker reads the bytes of a run of chunks itself,
 * through the open file's descriptor (worker threads share them), so only chunk lengths and
 * hashes cross between threads. In a page, where reading a File is costly, the thread that cut
 * the slices hands their buffers over (transferred, not copied).
 * Cutting is sequential; hashing a run needs only its chunks' lengths, so with one worker the
 * two run side by side, and a 1 GiB file chunks and hashes in the time of the slower of the two
 * (bench/results/README.md, "Hash workers").
 *
 * Platform glue: shared/src/chunking/hash-workers-node.ts (worker_threads) and client/src/hash-worker.ts
 * (a Web Worker started by the sync worker).
 */
import { RunHasher, wasm_memory } from '../../../wasm/pkg/dsync_wasm.js';
import { giveBuffers } from '../base/buffers.ts';

/** What a Node worker opens to read the same bytes as the thread that cuts them. */
export type Share = { fd: number };

export interface HashRequest {
  id: number;
  /** where the worker reads the run (null when `pieces` are given) */
  share: Share | null;
  /** the run's bytes, when the caller has them (a page's Blob slices: reading them again
   *  would cost more than handing them over) */
  pieces?: Uint8Array[];
  /** where the run's first chunk starts in the file */
  offset: number;
  /** the run's chunk lengths */
  lengths: Uint32Array;
  algo: number;
}

/** A run's strong hashes, with the buffers of its pieces handed back (`spent`, transferred):
 *  the caller reads its next slices into them (buffers.ts) instead of into fresh memory, whose
 *  first touch costs page faults (bench/results/page-vs-cli.md). */
export type HashReply = { id: number; hashes: Uint8Array; spent?: ArrayBuffer[] } | { id: number; error: string };

const giveAll = (buffers: ArrayBuffer[]) => giveBuffers(buffers.map((b) => new Uint8Array(b)));

/** The buffers `pieces` lie in, each once, in the order the pieces first use them: what a run
 *  hands over, and what comes back in `spent`. */
export function pieceBuffers(pieces: Uint8Array[]): ArrayBuffer[] {
  return [...new Set(pieces.map((p) => p.buffer as ArrayBuffer))];
}

/** What a reply transfers: the hashes' buffer and the pieces' buffers handed back. */
export function replyTransfer(r: HashReply): ArrayBuffer[] {
  return 'hashes' in r ? [r.hashes.buffer as ArrayBuffer, ...(r.spent ?? [])] : [];
}

/** One worker, as the pool sees it (a Node worker thread or a Web Worker, adapted). */
export interface HashWorker {
  /** `transfer`: buffers handed over with the message (not copied) */
  post(m: HashRequest, transfer: ArrayBuffer[]): void;
  /** called with each reply, and with an Error once if the worker fails */
  listen(onReply: (r: HashReply) => void, onFail: (e: Error) => void): void;
  terminate(): void;
}

/** Smallest file whose chunks `chunkParts` hashes off its thread: below it, hashing costs less
 *  than a worker takes to start (~50 ms of hashing against ~170 ms for a Node worker thread). */
export const OFF_THREAD_MIN = 64 << 20;

/** Bytes of runs a pool's caller may have out at once (`chunkParts` waits above this). */
export const HASH_AHEAD = 16 << 20;

/** Workers that hash runs of chunks, each run given to the one with the fewest bytes pending. */
export class HashPool {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve(h: Uint8Array): void; reject(e: Error): void; worker: number; bytes: number; onSpent?: (buffers: ArrayBuffer[]) => void }>();
  private readonly pendingBytes: number[];
  private failed: Error | null = null;

  constructor(private readonly workers: HashWorker[]) {
    if (!workers.length) throw new Error('a hash pool needs a worker');
    this.pendingBytes = workers.map(() => 0);
    workers.forEach((w, i) =>
      w.listen(
        (r) => {
          const wait = this.waiting.get(r.id);
          if (!wait) return;
          this.waiting.delete(r.id);
          this.pendingBytes[wait.worker] -= wait.bytes;
          if ('error' in r) wait.reject(new Error(r.error));
          else {
            if (r.spent) (wait.onSpent ?? giveAll)(r.spent);
            wait.resolve(r.hashes);
          }
        },
        (e) => this.fail(new Error(`a hash worker failed: ${e.message}`), i),
      ),
    );
  }

  get size() {
    return this.workers.length;
  }

  /** The strong hashes (`algo`) of the chunks with `lengths` starting at `offset` in `share`,
   *  or in `pieces` (the run's bytes, one after another) when given; `handOver`: the pieces'
   *  buffers are transferred to the worker (not copied), and the caller must not use them again;
   *  they come back to `onSpent` (one per buffer, in the order the pieces first use them), else
   *  to the pool (buffers.ts). */
  hash(share: Share | null, offset: number, lengths: Uint32Array, algo: number, pieces?: Uint8Array[], handOver = false, onSpent?: (buffers: ArrayBuffer[]) => void): Promise<Uint8Array> {
    if (this.failed) return Promise.reject(this.failed);
    let bytes = 0;
    for (let i = 0; i < lengths.length; i++) bytes += lengths[i];
    let w = 0;
    for (let i = 1; i < this.workers.length; i++) if (this.pendingBytes[i] < this.pendingBytes[w]) w = i;
    const id = this.nextId++;
    this.pendingBytes[w] += bytes;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, worker: w, bytes, onSpent });
      const transfer = handOver && pieces ? pieceBuffers(pieces) : [];
      this.workers[w].post({ id, share, offset, lengths, algo, ...(pieces && { pieces }) }, transfer);
    });
  }

  /** A failed worker fails what it had and every later request: the pool is spent. */
  private fail(e: Error, worker: number) {
    this.failed ??= e;
    for (const [id, wait] of this.waiting) {
      if (wait.worker !== worker) continue;
      this.waiting.delete(id);
      wait.reject(e);
    }
  }

  close() {
    for (const w of this.workers) w.terminate();
    this.failed ??= new Error('the hash pool is closed');
    for (const wait of this.waiting.values()) wait.reject(this.failed);
    this.waiting.clear();
  }
}

/**
 * A worker's side: answers requests one at a time, copying each run's pieces, or reading the
 * run (`read(share, offset, into)` fills `into` and returns how many bytes it read; a page's
 * worker is always handed the pieces and has none), straight into wasm memory and hashing it
 * there. `ready` is the wasm module being loaded.
 */
export function serveHashes(ready: Promise<unknown>, read: ((share: Share, offset: number, into: Uint8Array) => Promise<number>) | null, reply: (r: HashReply) => void): (m: HashRequest) => void {
  const hashers = new Map<number, RunHasher>();
  let queue: Promise<unknown> = ready;
  const one = async (m: HashRequest) => {
    let length = 0;
    for (let i = 0; i < m.lengths.length; i++) length += m.lengths[i];
    let h = hashers.get(m.algo);
    if (!h) hashers.set(m.algo, (h = new RunHasher(m.algo)));
    const memory = wasm_memory() as WebAssembly.Memory;
    const at = h.room(length);
    const room = new Uint8Array(memory.buffer, at, length);
    if (m.pieces) {
      let o = 0;
      for (const p of m.pieces) {
        if (o + p.length > length) throw new Error('the pieces are longer than the chunks');
        room.set(p, o);
        o += p.length;
      }
      if (o !== length) throw new Error('the pieces are shorter than the chunks');
    } else {
      if (!m.share || !read) throw new Error('a run with neither bytes nor a file');
      // nothing else runs in this module while the read does, so the view stays put
      const got = await read(m.share, m.offset, room);
      if (got !== length) throw new Error('the file changed size while syncing');
    }
    return { hashes: h.hash(length, m.lengths) as Uint8Array, spent: m.pieces && pieceBuffers(m.pieces) };
  };
  return (m) => {
    queue = queue.then(() => one(m)).then(
      ({ hashes, spent }) => reply({ id: m.id, hashes, ...(spent && { spent }) }),
      (e: unknown) => reply({ id: m.id, error: e instanceof Error ? e.message : String(e) }),
    );
  };
}
