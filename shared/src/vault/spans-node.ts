/**
 * Chunk workers in Node (worker_threads), for the CLI's vault pushes and pulls: each worker runs
 * spans.ts's `serveSpans`, the code a page's chunk worker runs (client/src/vault-chunk-worker.ts),
 * reading its spans of the file itself through the push's open descriptor, sealing and opening
 * through node:crypto (`nodeCipher`). The main thread
 * calls `nodeSpanWorkers`; each worker runs `serveSpansHere`, from span-worker.mjs (Node 20 does
 * not carry tsx's loader into worker threads; the compiled CLI has its own entry,
 * scripts/build-cli.mjs).
 */
import { KeyObject, createCipheriv, createDecipheriv } from 'node:crypto';
import { read } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { VAULT_CHUNK_WORKERS_MAX } from '../base/limits.ts';
import { loadWasm } from '../chunking/wasm.ts';
import { NONCE_BYTES, SEAL_OVERHEAD, TAG_BYTES } from './format.ts';
import { CTR_PIECE, type ContentCipher, contentAad } from './keys.ts';
import { type ChunkKeys, type SpanReply, type SpanRequest, type SpanWorker, chunkKeys, replyTransfer, requestTransfer, serveSpans } from './spans.ts';

/** A file as a Node chunk worker reads it: a descriptor open in this process. */
export interface FdFile {
  fd: number;
}

/** Chunk workers a push or pull uses: one per core up to VAULT_CHUNK_WORKERS_MAX, as the page
 *  does (cores a `taskset` withholds do not count). */
export function defaultChunkWorkers(): number {
  return Math.max(1, Math.min(VAULT_CHUNK_WORKERS_MAX, availableParallelism()));
}

/** Chunk workers as a push and a pull use them, and how to end them. */
export interface NodeSpanWorkers {
  workers: SpanWorker<FdFile>[];
  end(): Promise<void>;
}

type Reply = { rid: number; ok: true; value: SpanReply } | { rid: number; ok: false; error: string };

/** `size` chunk workers (default `defaultChunkWorkers()`) holding `keys`, or null for none. A
 *  worker that fails or exits fails what it was asked; an idle worker does not keep the
 *  process alive. */
export function nodeSpanWorkers(keys: ChunkKeys, size = defaultChunkWorkers()): NodeSpanWorkers | null {
  if (size <= 0) return null;
  const threads: Worker[] = [];
  const workers = Array.from({ length: size }, (): SpanWorker<FdFile> => {
    const w = new Worker(new URL('./span-worker.mjs', import.meta.url));
    threads.push(w);
    const waiting = new Map<number, { resolve: (r: SpanReply) => void; reject: (e: Error) => void }>();
    let next = 1;
    let failed: Error | null = null;
    const fail = (e: Error) => {
      failed ??= new Error(`a chunk worker failed: ${e.message}`);
      for (const p of waiting.values()) p.reject(failed);
      waiting.clear();
    };
    w.unref();
    w.on('message', (r: Reply) => {
      const p = waiting.get(r.rid);
      if (!p) return;
      waiting.delete(r.rid);
      if (!waiting.size) w.unref();
      if (r.ok) p.resolve(r.value);
      else p.reject(new Error(r.error));
    });
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`it exited with code ${code}`)));
    return {
      request: (m) =>
        new Promise<SpanReply>((resolve, reject) => {
          if (failed) return reject(failed);
          const rid = next++;
          if (!waiting.size) w.ref();
          waiting.set(rid, { resolve, reject });
          w.postMessage({ ...m, rid }, requestTransfer(m));
        }),
    };
  });
  // the keys first: every later request is answered after them (a worker answers in order)
  for (const w of workers) void w.request({ op: 'keys', keys: chunkKeys(keys) }).catch(() => {});
  return { workers, end: async () => void (await Promise.all(threads.map((t) => t.terminate()))) };
}

const BLOCK_PAD = new Uint8Array(16);

/**
 * keys.ts's ContentCipher through node:crypto: the same bytes as WebCrypto's, synchronous
 * calls where each WebCrypto call is a job on libuv's thread pool and a promise (bench/results/
 * vault-client.md, vault-cli.md "Pulls"). AES-256-CTR increments its counter block as one
 * 128-bit big-endian number, as WebCrypto's with `length: 128`. An AES-GCM chunk is null when
 * its tag (16 bytes) does not verify: the plaintext `update` gave is then dropped. The keys:
 * `keyObject`'s.
 */
export const nodeCipher: ContentCipher = {
  ctr: (k, counter, skip, data, into) => {
    const c = createCipheriv('aes-256-ctr', keyObject(k.stream), counter);
    if (skip) c.update(BLOCK_PAD.subarray(0, skip));
    if (!into) return c.update(data);
    // in pieces (CTR_PIECE), each written into `into`
    for (let at = 0; at < data.length; at += CTR_PIECE) into.set(c.update(data.subarray(at, at + CTR_PIECE)), at);
    return into.subarray(0, data.length);
  },
  openGcm: (k, id, sealed) => {
    if (sealed.length < SEAL_OVERHEAD) return null;
    const d = createDecipheriv('aes-256-gcm', keyObject(k.content), sealed.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES });
    d.setAAD(contentAad(k, id));
    d.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
    const plain = d.update(sealed.subarray(NONCE_BYTES, sealed.length - TAG_BYTES));
    try {
      d.final();
    } catch {
      return null;
    }
    return plain;
  },
};

/** A content CryptoKey as a KeyObject for node:crypto (not extractable: its bytes are never
 *  read), made once a key. */
const keyObjects = new WeakMap<CryptoKey, KeyObject>();
function keyObject(k: CryptoKey): KeyObject {
  let key = keyObjects.get(k);
  if (!key) keyObjects.set(k, (key = KeyObject.from(k)));
  return key;
}

/** The worker's side, run by span-worker.mjs in each worker thread. */
export function serveSpansHere(): void {
  const port = parentPort;
  if (isMainThread || !port) throw new Error('serveSpansHere runs in a worker thread');
  const readFd = (fd: number, offset: number, into: Uint8Array) => new Promise<number>((resolve, reject) => read(fd, into, 0, into.length, offset, (e, n) => (e ? reject(e) : resolve(n))));
  // spans read into the thread's buffer pool, given back once their spans are dropped: a fresh
  // 17 MiB array a span cost its pages' faults and zeroing, some 0.2 s of CPU a GiB
  // (bench/results/vault-cli.md)
  const room = (size: number) => takeBuffer(size).subarray(0, size);
  const release = (bytes: Uint8Array) => giveBuffers([new Uint8Array(bytes.buffer)]);
  const serve = serveSpans<FdFile>(
    Promise.resolve(loadWasm()),
    async (file, from, to) => {
      const into = room(to - from);
      let done = 0;
      for (let n; done < into.length && (n = await readFd(file.fd, from + done, into.subarray(done))); ) done += n;
      return into.subarray(0, done);
    },
    nodeCipher,
    release,
  );
  port.on('message', (e: SpanRequest<FdFile> & { rid: number }) => {
    const { rid, ...m } = e;
    serve(m as SpanRequest<FdFile>).then(
      (value) => port.postMessage({ rid, ok: true, value } satisfies Reply, replyTransfer(value)),
      (err: unknown) => port.postMessage({ rid, ok: false, error: err instanceof Error ? err.message : String(err) } satisfies Reply),
    );
  });
}
