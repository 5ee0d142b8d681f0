/**
 * Chunk workers in Node (worker_threads), for the CLI's vault pushes and pulls: each worker runs
 * spans.ts's `serveSpans`, the code a page's chunk worker runs (client/src/vault-chunk-worker.ts),
 * reading its spans of the file itself through the push's open descriptor, sealing and opening
 * through node:crypto (`nodeSealer`, `nodeOpener`). The main thread
 * calls `nodeSpanWorkers`; each worker runs `serveSpansHere`, from span-worker.mjs (Node 20 does
 * not carry tsx's loader into worker threads; the compiled CLI has its own entry,
 * scripts/build-cli.mjs).
 */
import { KeyObject, createCipheriv, createDecipheriv, randomFillSync } from 'node:crypto';
import { read } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Worker, isMainThread, parentPort } from 'node:worker_threads';
import { VAULT_CHUNK_WORKERS_MAX } from '../base/limits.ts';
import { loadWasm } from '../chunking/wasm.ts';
import { NONCE_BYTES, SEAL_OVERHEAD, TAG_BYTES } from './format.ts';
import { type ContentOpener, type ContentSealer, contentAad } from './keys.ts';
import { type ChunkKeys, type SpanReply, type SpanRequest, type SpanWorker, serveSpans } from './spans.ts';

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

/** What a request hands over rather than copies: a pull's range of a pack. */
const requestTransfer = (m: SpanRequest<FdFile>): ArrayBuffer[] => (m.op === 'open' && m.bytes.byteOffset === 0 && m.bytes.byteLength === m.bytes.buffer.byteLength ? [m.bytes.buffer as ArrayBuffer] : []);

/** What an answer hands over rather than copies: its arrays' buffers. */
function replyTransfer(r: SpanReply): ArrayBuffer[] {
  if (!r || 'refused' in r) return [];
  if (r instanceof Uint8Array) return [r.buffer as ArrayBuffer];
  return [r.lengths.buffer as ArrayBuffer, r.ids.buffer as ArrayBuffer];
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
  for (const w of workers) void w.request({ op: 'keys', keys: { id: keys.id, idBytes: keys.idBytes, gear: keys.gear, chunkId: keys.chunkId, content: keys.content } }).catch(() => {});
  return { workers, end: async () => void (await Promise.all(threads.map((t) => t.terminate()))) };
}

/** Nonces drawn at once by `nodeSealer` (one call to the system's random source a chunk: 0.4 s
 *  of the workers' time in a 256 MiB push's profile). */
const NONCES_AT_ONCE = 4096;

/**
 * keys.ts's ContentSealer through node:crypto's AES-256-GCM cipher: the same sealed bytes as
 * WebCrypto's (a random 96-bit nonce, the chunk's `contentAad`; nonce || ciphertext || tag,
 * opened by `openChunk` as any), for about half its CPU in Node, where each WebCrypto call is a
 * job on libuv's thread pool and a promise (64 MiB in 8 KiB chunks: 0.18 s of CPU against
 * 0.39 s, bench/results/vault-client.md). The key: `keyObject`'s.
 */
export function nodeSealer(): ContentSealer {
  let nonces = new Uint8Array(0);
  return (k, id, plain, out, at) => {
    const key = keyObject(k.content);
    if (nonces.length < NONCE_BYTES) nonces = randomFillSync(new Uint8Array(NONCE_BYTES * NONCES_AT_ONCE));
    const nonce = nonces.subarray(0, NONCE_BYTES);
    nonces = nonces.subarray(NONCE_BYTES);
    out.set(nonce, at);
    const c = createCipheriv('aes-256-gcm', key, nonce);
    c.setAAD(contentAad(k, id));
    const body = c.update(plain);
    c.final();
    if (body.length !== plain.length) throw new Error('AES-GCM gave a ciphertext of another length');
    out.set(body, at + NONCE_BYTES);
    out.set(c.getAuthTag(), at + NONCE_BYTES + plain.length);
  };
}

/** keys.ts's ContentOpener through node:crypto's AES-256-GCM decipher, as `nodeSealer` seals:
 *  one synchronous call a chunk where WebCrypto's decrypt is a job on libuv's thread pool and a
 *  promise (bench/results/vault-cli.md, "Pulls"). Null when the tag (16 bytes, as sealed) does
 *  not verify: the plaintext `update` gave is then dropped. */
export function nodeOpener(): ContentOpener {
  return (k, id, sealed) => {
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
  };
}

/** The content CryptoKey as a KeyObject for node:crypto (not extractable: its bytes are never
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
  const serve = serveSpans<FdFile>(Promise.resolve(loadWasm()), async (file, from, to) => {
    const into = new Uint8Array(to - from);
    let done = 0;
    for (let n; done < into.length && (n = await readFd(file.fd, from + done, into.subarray(done))); ) done += n;
    return into.subarray(0, done);
  }, nodeSealer(), nodeOpener());
  port.on('message', (e: SpanRequest<FdFile> & { rid: number }) => {
    const { rid, ...m } = e;
    serve(m as SpanRequest<FdFile>).then(
      (value) => port.postMessage({ rid, ok: true, value } satisfies Reply, replyTransfer(value)),
      (err: unknown) => port.postMessage({ rid, ok: false, error: err instanceof Error ? err.message : String(err) } satisfies Reply),
    );
  });
}
