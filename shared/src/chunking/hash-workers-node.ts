/**
 * Hash workers in Node (worker_threads), for the CLI and the benchmark's client: see
 * hash-pool.ts. The main thread calls `nodeHashPool`; each worker runs `serveHashesHere`, from
 * hash-worker.mjs (Node 20 does not carry tsx's loader into worker threads).
 */
import { read } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { loadWasm } from './wasm.ts';
import { HashPool, type HashReply, type HashRequest, replyTransfer, serveHashes } from './hash-pool.ts';

/** Hash workers this process may use: one per core beyond this thread's own, at most 2 (the
 *  cut on this thread keeps up with about two; cores a `taskset` withholds do not count). */
export function defaultHashWorkers(): number {
  return Math.max(0, Math.min(2, availableParallelism() - 1));
}

/** A pool of `size` worker threads (default `defaultHashWorkers()`), or null for none. An
 *  idle worker does not keep the process alive. */
export function nodeHashPool(size = defaultHashWorkers()): HashPool | null {
  if (size <= 0) return null;
  const workers = Array.from({ length: size }, () => {
    const w = new Worker(new URL('./hash-worker.mjs', import.meta.url));
    // an idle worker does not keep the process alive; one with requests out does
    let out = 0;
    w.unref();
    return {
      post(m: HashRequest, transfer: ArrayBuffer[]) {
        if (out++ === 0) w.ref();
        w.postMessage(m, transfer);
      },
      listen(onReply: (r: HashReply) => void, onFail: (e: Error) => void) {
        w.on('message', (r: HashReply) => {
          if (--out === 0) w.unref();
          onReply(r);
        });
        w.on('error', onFail);
        w.on('exit', (code) => onFail(new Error(`exited with code ${code}`)));
      },
      terminate: () => void w.terminate(),
    };
  });
  return new HashPool(workers);
}

/** The worker's side, run by hash-worker.mjs in each worker thread. */
export function serveHashesHere() {
  const port = parentPort;
  if (isMainThread || !port) throw new Error('serveHashesHere runs in a worker thread');
  const readFd = (fd: number, offset: number, into: Uint8Array) =>
    new Promise<number>((resolve, reject) => read(fd, into, 0, into.length, offset, (e, n) => (e ? reject(e) : resolve(n))));
  const serve = serveHashes(
    Promise.resolve(loadWasm()),
    async (share, offset, into) => {
      let done = 0;
      for (let n; done < into.length && (n = await readFd(share.fd, offset + done, into.subarray(done))); ) done += n;
      return done;
    },
    (r) => port.postMessage(r, replyTransfer(r)),
  );
  port.on('message', serve);
}
