/**
 * The sync worker's WebSockets, run in a worker of their own (socket-worker.ts): `WorkerSocket`
 * has a WebSocket's API, and its socket sends and receives while this thread chunks a file. A
 * browser moves a WebSocket's bytes only when the thread that owns it turns its event loop:
 * owned by the sync worker, the socket stood still through each slice's chunking, and a large
 * push's Delta Bytes waited for the pass (bench/results/page-vs-cli.md). `PageSocket` makes
 * the sync worker's sockets: this one where a worker can start workers, else the browser's own
 * WebSocket.
 */
import type { WebSocketLike } from '../../shared/src/transport/conn.ts';
import { WORKER_READY, WORKER_START_MS } from './worker-start.ts';

export type ToSocket =
  | { op: 'open'; id: number; url: string }
  | { op: 'send'; id: number; data: ArrayBuffer | Blob }
  | { op: 'close'; id: number; code?: number; reason?: string };

export type FromSocket =
  | { ev: 'open'; id: number; extensions: string }
  | { ev: 'message'; id: number; data: ArrayBuffer | string }
  | { ev: 'error'; id: number; message?: string }
  | { ev: 'close'; id: number; code: number; reason: string }
  /** the socket has taken `got` bytes in all and holds `buffered` of them unsent; it sends at
   *  `rate` (bytes per ms, drain-rate.ts; null: it cannot tell yet) */
  | { ev: 'sent'; id: number; got: number; buffered: number; rate: number | null };

/** The socket worker, started when the sync worker starts (worker.ts); null where it cannot
 *  start (a browser without workers in workers), failed to, or did not say it had within
 *  WORKER_START_MS. */
let host: Worker | null | undefined;
/** Settles once the socket worker has said it started, or was given up. */
let hostSettled: Promise<void> = Promise.resolve();
export const socketHostSettled = () => hostSettled;
const sockets = new Map<number, WorkerSocket>();
let nextId = 1;

export function socketHost(): Worker | null {
  if (host !== undefined) return host;
  let started: Worker;
  try {
    started = host = new Worker(new URL('./socket-worker.ts', import.meta.url), { type: 'module' });
  } catch {
    return (host = null);
  }
  // the worker did not start (or failed): its sockets fail, and the sync client's retry, as
  // every later socket, is the browser's own
  let settle = () => {};
  hostSettled = new Promise<void>((r) => (settle = r));
  const giveUp = (message: string) => {
    clearTimeout(timer);
    settle();
    if (host !== started) return;
    host = null;
    started.terminate();
    for (const s of sockets.values()) {
      s.take({ ev: 'error', id: 0, message });
      s.take({ ev: 'close', id: 0, code: 1006, reason: '' });
    }
  };
  const timer = setTimeout(() => giveUp(`the socket worker did not start in ${WORKER_START_MS / 1000} s`), WORKER_START_MS);
  started.onmessage = (e: MessageEvent<FromSocket | typeof WORKER_READY>) => {
    if (e.data === WORKER_READY) return void (clearTimeout(timer), settle());
    sockets.get(e.data.id)?.take(e.data);
  };
  started.onerror = (e) => giveUp(e.message || 'the socket worker did not start');
  return host;
}

export class WorkerSocket implements WebSocketLike {
  binaryType = 'arraybuffer';
  readyState = 0;
  extensions = '';
  private readonly id = nextId++;
  /** bytes handed over, and what the socket worker last reported of them */
  private posted = 0;
  private got = 0;
  private buffered = 0;
  private rate: number | null = null;
  private readonly listeners = new Map<string, ((ev: unknown) => void)[]>();

  constructor(url: string, private readonly worker: Worker) {
    sockets.set(this.id, this);
    worker.postMessage({ op: 'open', id: this.id, url } satisfies ToSocket);
  }

  /** Bytes sent and not yet on the wire: those on their way to the socket worker, and those its
   *  socket holds (as last reported, up to socket-worker.ts REPORT_MS and a thread's turn ago). */
  get bufferedAmount(): number {
    return this.posted - this.got + this.buffered;
  }

  /** The rate its socket sends at, as the socket worker measured it (`Conn.wireRate`: this
   *  side's `bufferedAmount` lags, and a burst that left at once looked like a slow wire). */
  wireRate(): number | null {
    return this.rate;
  }

  send(data: Uint8Array | Blob): void {
    if (this.readyState === 0) throw new DOMException('the socket is still connecting', 'InvalidStateError');
    const size = data instanceof Blob ? data.size : data.byteLength;
    this.posted += size;
    if (this.readyState !== 1) return; // as a browser's socket: counted, never sent
    if (data instanceof Uint8Array) {
      // exactly its bytes (a view of a larger buffer would be copied whole), handed over
      const copy = data.slice();
      this.worker.postMessage({ op: 'send', id: this.id, data: copy.buffer } satisfies ToSocket, [copy.buffer]);
    } else this.worker.postMessage({ op: 'send', id: this.id, data } satisfies ToSocket);
  }

  close(code?: number, reason?: string): void {
    if (this.readyState >= 2) return;
    this.readyState = 2;
    this.worker.postMessage({ op: 'close', id: this.id, code, reason } satisfies ToSocket);
  }

  addEventListener(type: string, listener: (ev: any) => void): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  /** An event of its socket in the socket worker. */
  take(m: FromSocket): void {
    switch (m.ev) {
      case 'sent':
        this.got = m.got;
        this.buffered = m.buffered;
        this.rate = m.rate;
        return;
      case 'open':
        if (this.readyState === 0) this.readyState = 1;
        this.extensions = m.extensions;
        return this.emit('open', {});
      case 'message':
        return this.emit('message', { data: m.data });
      case 'error':
        return this.emit('error', m.message ? { message: m.message } : {});
      case 'close':
        if (this.readyState === 3) return;
        this.readyState = 3;
        sockets.delete(this.id);
        return this.emit('close', { code: m.code, reason: m.reason });
    }
  }

  private emit(type: string, ev: unknown) {
    for (const l of this.listeners.get(type) ?? []) l(ev);
  }
}

/** What the sync worker's sockets are: a WebSocket's API, and Blobs sent. */
export type PageSocketLike = WebSocketLike & { send(data: Uint8Array | Blob): void };

/** A socket for this thread: a `WorkerSocket` where the socket worker runs, else the browser's
 *  own WebSocket (a constructor that returns either). */
export const PageSocket = function PageSocket(url: string): PageSocketLike {
  const worker = socketHost();
  return worker ? new WorkerSocket(url, worker) : (new WebSocket(url) as unknown as PageSocketLike);
} as unknown as new (url: string) => PageSocketLike;
