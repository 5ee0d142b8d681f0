/**
 * A message connection over one WebSocket (the browser's, or the `ws` package's in Node: both
 * have the same event API). It encodes and decodes frames with the codec, counts traffic per
 * protocol part, applies send backpressure through `bufferedAmount` and, where the socket can
 * pause (`ws` on the server), receive backpressure on queued bytes.
 *
 * Sessions run on it one after another (the server waits for the next Hello after a Result,
 * docs/protocol.md §3): a client opens one (`Conn.open`) and runs each of its sessions in
 * `session`; connection-pool.ts keeps open ones between sessions.
 */
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { compressibleBuffer } from '../base/entropy.ts';
import { decode, decodeFrame, deltaRunHead, encode } from '../wire/codec.ts';
import { DrainRate } from './drain-rate.ts';
import type { Message } from '../wire/messages.ts';
import { CONNECT_TIMEOUT_MS, DEFAULT_LIMITS, type Limits, MAX_IN_FLIGHT } from '../base/limits.ts';
import { ErrorCode, Msg, ProtocolError, hashLength } from '../wire/protocol.ts';

/** Payload bytes per protocol part, before compression, both directions. */
export interface Traffic {
  checksumList: number;
  matchTokens: number;
  /** the receiver's finer Checksum Lists of its basis (refinement, docs/protocol.md §3) */
  basisChecksums: number;
  delta: number;
  control: number;
  total: number;
}

export type WebSocketCtor = new (url: string) => WebSocketLike;

export interface WebSocketLike {
  binaryType: string;
  readonly bufferedAmount: number;
  readonly readyState: number;
  /** the negotiated extensions, e.g. "permessage-deflate; …" (empty: none) */
  readonly extensions?: string;
  /** `compress`: `ws` only (a browser decides for itself): whether permessage-deflate, where
   *  negotiated, compresses this message; `done`: `ws` only, called once the frame has been
   *  written out (or failed), after which its bytes are no longer read; a Blob is read by the
   *  socket (both send them in order with the other messages) */
  send(data: Uint8Array | Blob, options?: { compress?: boolean }, done?: (err?: Error) => void): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: string, listener: (ev: any) => void): void;
  /** a browser's socket run in another thread (client/src/worker-socket.ts): the rate it sends
   *  at, its own `DrainRate` (drain-rate.ts) as that thread last saw it; it sends Blobs */
  wireRate?(): number | null;
  /** `ws` only: stop / restart reading from the socket */
  pause?: () => void;
  resume?: () => void;
}

/** The peer sent an Error message. */
export class RemoteError extends Error {
  constructor(
    public code: number,
    message: string,
  ) {
    super(message);
    this.name = 'RemoteError';
  }
}

/** The connection closed or failed before the session ended. */
export class ConnectionLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConnectionLost';
  }
}

function part(type: number): keyof Omit<Traffic, 'total'> {
  switch (type) {
    case Msg.Checksums:
    case Msg.ChecksumsEnd:
      return 'checksumList';
    case Msg.Tokens:
    case Msg.TokensEnd:
    case Msg.SplitHashes:
    case Msg.Copies:
      return 'matchTokens';
    case Msg.BasisChecksums:
      return 'basisChecksums';
    case Msg.Delta:
      return 'delta';
    default:
      return 'control';
  }
}

/** Delta frame buffers are taken at least this large: a Delta message holds up to 1 MiB of
 *  chunk bytes, plus their headers. */
const FRAME_ROOM = (1 << 20) + (64 << 10);
/** A browser's Delta frame of at least this many bytes is sent as a Blob, a shorter one as an
 *  ArrayBuffer: Chromium's CPU per 256 MiB sent in frames of 8 / 32 / 64 / 128 / 256 KiB and
 *  1 MiB, ArrayBuffer 4.4 / 2.6 / 2.6 / 2.4 / 2.3 / 3.8 s, Blob 17.1 / 5.0 / 3.0 / 2.1 / 1.8 /
 *  1.4 s (`npm run bench:ws-send`, bench/results/page-vs-cli.md). */
const BLOB_FRAME_MIN = 64 << 10;
/** The most bytes of messages a batch (`cork`) holds before it goes out as a frame, and the
 *  largest Delta message it takes in: a larger one goes in a frame of its own. */
const BATCH_BYTES = 16 << 10;
/** A frame shorter than this is not deflated: deflate's own framing would make it longer (an
 *  8-byte edit's 26-byte Delta became 29), as the server's `ws` threshold says for its own. */
const DEFLATE_MIN = 256;

export interface ConnOptions {
  limits?: Limits;
  /** pause reading when this many received bytes wait to be processed (if the socket can;
   *  default MAX_IN_FLIGHT) */
  maxQueuedBytes?: number;
  /** wait before sending while the socket buffers more than this */
  maxBufferedBytes?: number;
}

export class Conn {
  /** the URL a client opened it to (`Conn.open`); '' for a socket the server took */
  url = '';
  /** digest length of the session's strong hash; set once Hello is known */
  hashLen = 32;
  readonly traffic: Traffic = { checksumList: 0, matchTokens: 0, basisChecksums: 0, delta: 0, control: 0, total: 0 };
  /** bytes handed to the socket, and the rate it sends them at (`wireRate`) */
  private sentBytes = 0;
  private readonly sendRate = new DrainRate();
  /** when `hasRoom` last found no room (performance.now()) */
  private lastFull = -Infinity;
  /** milliseconds spent waiting in recv() — the rest of a session's time is work */
  waitedMs = 0;
  /** chunk bytes sent in Delta Runs (sendDeltaRun) */
  runBytes = 0;
  private queue: Uint8Array[] = [];
  private queuedBytes = 0;
  /** messages of a frame taken from `queue`, not yet received, with their sizes */
  private taken: { m: Message; bytes: number }[] = [];
  /** messages sent while corked, to go out together as one frame, and whether one of them is
   *  to be deflated */
  private batch: Uint8Array[] = [];
  private batchBytes = 0;
  private batchDeflates = false;
  private corked = false;
  private paused = false;
  /** an Error was sent or close() called: incoming frames are dropped */
  private ending = false;
  private waiter: ((v: void) => void) | null = null;
  private closed: Error | null = null;
  private limits: Limits;
  private maxQueued: number;
  private maxBuffered: number;
  /** a browser's (or Node's own) WebSocket, or one in another thread, which sends Blobs; `ws`
   *  does not take them */
  private readonly native: boolean;
  /** a session runs on it (`session`) */
  private inSession = false;

  /** Opens a connection to `url` (the server's /sync endpoint, or its `?deflate=0`). A refused
   *  sign-in is a RemoteError (Unauthorized), any other failure ConnectionLost, as is a
   *  connection not open within `timeoutMs` (it is closed). */
  static open(url: string, WebSocket: WebSocketCtor, timeoutMs = CONNECT_TIMEOUT_MS): Promise<Conn> {
    const ws = new WebSocket(url);
    const conn = new Conn(ws);
    conn.url = url;
    let timer: ReturnType<typeof setTimeout> | undefined;
    return new Promise<Conn>((resolve, reject) => {
      timer = setTimeout(() => {
        reject(new ConnectionLost(`cannot connect to ${url}: no answer in ${timeoutMs / 1000} s`));
        ws.close();
      }, timeoutMs);
      ws.addEventListener('open', () => resolve(conn));
      ws.addEventListener('error', (ev: { message?: string }) =>
        // a refused sign-in (Node's ws names the status; a browser says nothing) is no lost
        // connection: trying again cannot help
        reject(/Unexpected server response: 401\b/.test(ev.message ?? '') ? new RemoteError(ErrorCode.Unauthorized, `${url}: authentication required`) : new ConnectionLost(`cannot connect to ${url}: ${ev.message ?? 'connection refused'}`)),
      );
      ws.addEventListener('close', () => reject(new ConnectionLost(`cannot connect to ${url}`)));
    }).finally(() => clearTimeout(timer));
  }

  constructor(
    readonly ws: WebSocketLike,
    opts: ConnOptions = {},
  ) {
    this.limits = opts.limits ?? DEFAULT_LIMITS;
    this.maxQueued = opts.maxQueuedBytes ?? MAX_IN_FLIGHT;
    this.maxBuffered = opts.maxBufferedBytes ?? 4 << 20;
    this.native = (typeof WebSocket === 'function' && ws instanceof WebSocket) || ws.wireRate !== undefined;
    ws.binaryType = 'arraybuffer';
    ws.addEventListener('message', (ev: { data: unknown }) => {
      if (this.ending) return; // after our Error or close, nothing more is read into memory
      const d = ev.data;
      if (typeof d === 'string') {
        this.fail(new ProtocolError(ErrorCode.Malformed, 'text frames are not part of the protocol'));
        return;
      }
      const frame = d instanceof ArrayBuffer ? new Uint8Array(d) : new Uint8Array(d as ArrayBufferLike);
      // The peer's Error ends the session at once: a sender waiting for room to send (the peer
      // stopped reading: it failed) must not wait for the socket to close before it knows.
      if (frame[0] === Msg.Error && this.peerError(frame)) return;
      this.queue.push(frame);
      this.queuedBytes += frame.length;
      if (this.queuedBytes > this.maxQueued && this.ws.pause && !this.paused) {
        this.paused = true;
        this.ws.pause();
      }
      this.wake();
    });
    ws.addEventListener('close', (ev: { code?: number; reason?: string }) => {
      this.fail(new ConnectionLost(`connection closed (${ev.code ?? '?'}${ev.reason ? ': ' + ev.reason : ''})`));
    });
    ws.addEventListener('error', (ev: { message?: string; error?: Error }) => {
      this.fail(new ConnectionLost(`connection error: ${ev.message ?? ev.error?.message ?? 'unknown'}`));
    });
  }

  /** Open, and not running a session: it can take the next. An error, a lost socket or the
   *  server's idle timeout closes it. */
  get usable(): boolean {
    return !this.inSession && this.isOpen;
  }

  /** Runs `fn` as one session on this connection, with `traffic` and `waitedMs` counted from
   *  zero; a session that fails closes it (the server ends the connection on an error too). */
  async session<T>(fn: (conn: Conn) => Promise<T>): Promise<T> {
    if (!this.usable) throw new ConnectionLost('the connection is closed or busy');
    this.inSession = true;
    this.resetCounters();
    try {
      return await fn(this);
    } catch (e) {
      this.close(1000, 'done');
      throw e;
    } finally {
      this.inSession = false;
    }
  }

  /** Bytes the socket sent and received, where the runtime exposes them (Node's `ws`). */
  socketBytes(): number | null {
    const s = (this.ws as unknown as { _socket?: { bytesRead: number; bytesWritten: number } })._socket;
    return s ? s.bytesRead + s.bytesWritten : null;
  }

  /** Zeroes `traffic` and `waitedMs`, so that they count one session of a connection that
   *  carries several. */
  resetCounters() {
    for (const k of Object.keys(this.traffic) as (keyof Traffic)[]) this.traffic[k] = 0;
    this.waitedMs = 0;
    this.runBytes = 0;
  }

  /** What ended the connection (its close, a socket error, the peer's Error), or null. A side
   *  waiting for room in the socket checks it: a browser's socket that closed keeps its unsent
   *  bytes counted in `bufferedAmount`, so room never comes. */
  get ended(): Error | null {
    return this.closed;
  }

  /** the socket is open and no error or close has been seen */
  get isOpen(): boolean {
    return !this.closed && this.ws.readyState === 1;
  }

  private wake() {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  private fail(e: Error) {
    if (!this.closed) this.closed = e;
    this.wake();
  }

  /** An Error frame from the peer: every later recv() and send() throws it (recv() after the
   *  messages that came before it). False if the frame does not decode (recv() says so). */
  private peerError(frame: Uint8Array): boolean {
    let m: Message;
    try {
      m = decode(frame, this.hashLen, this.limits);
    } catch {
      return false;
    }
    if (m.type !== Msg.Error) return false;
    this.count(m.type, frame.length);
    this.fail(new RemoteError(m.code, m.message));
    return true;
  }

  /** Receives the next message (a frame carries one or more). An Error message from the peer
   *  throws RemoteError. What this side batched goes out first: its peer may wait for it. */
  async recv(): Promise<Message> {
    this.flush();
    if (!this.taken.length) {
      const t0 = performance.now();
      while (this.queue.length === 0) {
        if (this.closed) throw this.closed;
        await new Promise<void>((r) => (this.waiter = r));
      }
      this.waitedMs += performance.now() - t0;
      const frame = this.queue.shift()!;
      this.queuedBytes -= frame.length;
      if (this.paused && this.queuedBytes <= this.maxQueued / 2) {
        this.paused = false;
        this.ws.resume!();
      }
      // the messages after a Hello are in its algorithm's H
      this.taken = decodeFrame(frame, this.hashLen, this.limits, (m) => (m.type === Msg.Hello && m.algo >= 1 && m.algo <= 3 ? hashLength(m.algo) : this.hashLen));
    }
    const { m, bytes } = this.taken.shift()!;
    this.count(m.type, bytes);
    if (m.type === Msg.Error) throw new RemoteError(m.code, m.message);
    return m;
  }

  /** From now on, messages sent go out together as one frame (docs/protocol.md §1: a frame
   *  carries one or more messages; a large Delta goes alone) when `uncork` is called, a
   *  message is received, or the batch holds BATCH_BYTES. */
  cork() {
    this.corked = true;
  }

  /** Sends what was batched, as one frame, and sends each message at once again. */
  uncork() {
    this.corked = false;
    this.flush();
  }

  /** Sends the batch, if any, as one frame. */
  private flush() {
    if (!this.batch.length) return;
    let frame = this.batch[0];
    if (this.batch.length > 1) {
      frame = new Uint8Array(this.batchBytes);
      let at = 0;
      for (const b of this.batch) {
        frame.set(b, at);
        at += b.length;
      }
    }
    const compress = this.batchDeflates && frame.length >= DEFLATE_MIN;
    this.batch = [];
    this.batchBytes = 0;
    this.batchDeflates = false;
    this.sentBytes += frame.length;
    this.ws.send(frame, { compress });
  }

  /** Adds an encoded message to the batch when corked and it fits; false: send it now. */
  private batched(frame: Uint8Array, deflate: boolean): boolean {
    if (!this.corked || frame.length > BATCH_BYTES) return false;
    if (this.batchBytes + frame.length > BATCH_BYTES) this.flush();
    this.batch.push(frame);
    this.batchBytes += frame.length;
    this.batchDeflates ||= deflate;
    return true;
  }

  /** Receives the next message and checks its type. */
  async expect<T extends Message['type']>(...types: T[]): Promise<Extract<Message, { type: T }>> {
    const m = await this.recv();
    if (!(types as number[]).includes(m.type)) {
      const name = (t: number) => Object.keys(Msg).find((k) => Msg[k as keyof typeof Msg] === t);
      throw new ProtocolError(ErrorCode.UnexpectedMessage, `unexpected ${name(m.type)} message here (expected ${types.map(name).join(' or ')})`);
    }
    return m as Extract<Message, { type: T }>;
  }

  /** Whether the socket's send buffer has room: a `send` now would not wait. */
  hasRoom(): boolean {
    const buffered = this.ws.bufferedAmount;
    this.sendRate.see(this.sentBytes, buffered);
    if (buffered <= this.maxBuffered) return true;
    this.lastFull = performance.now();
    return false;
  }

  /** Whether `hasRoom` found the send buffer full within the last `ms`. */
  fullWithin(ms: number): boolean {
    return performance.now() - this.lastFull <= ms;
  }

  /** The rate (bytes per ms) at which the socket has sent what it buffered (drain-rate.ts), as
   *  `hasRoom` saw it, or as a socket in another thread saw it itself (`WebSocketLike.wireRate`:
   *  there `bufferedAmount` lags what the socket holds); null until it can tell. */
  wireRate(): number | null {
    return this.ws.wireRate ? this.ws.wireRate() : this.sendRate.rate();
  }

  /** Sends a message, first waiting while the socket's send buffer is full (`wait: false`: a
   *  small message that must not queue behind the flow control of the large ones). */
  async send(m: Message, { wait = true } = {}): Promise<void> {
    while (wait && !this.hasRoom()) {
      if (this.closed) throw this.closed;
      await new Promise((r) => setTimeout(r, 2));
    }
    if (this.closed) throw this.closed;
    if (m.type !== Msg.Delta) {
      const frame = encode(m, this.hashLen);
      this.count(m.type, frame.length);
      // Basis Checksums repeat where the basis does (tar padding, runs of one byte): deflated,
      // a tarball's list shrinks by a fifth (bench/results/delta-compression.md)
      const deflate = m.type === Msg.BasisChecksums;
      if (this.batched(frame, deflate)) return;
      this.flush();
      this.sentBytes += frame.length;
      this.ws.send(frame, { compress: deflate && frame.length >= DEFLATE_MIN });
      return;
    }
    // A Delta frame is written into a buffer from the read-buffer pool, given back once `ws`
    // says the frame has left (a frame of 1 MiB allocated per message drove full garbage
    // collections on large pushes); a browser never says, and its frames are left to the GC.
    let room: Uint8Array | null = null;
    const frame = encode(m, this.hashLen, (size) => (room = takeBuffer(Math.max(size, FRAME_ROOM))));
    this.count(m.type, frame.length);
    // Delta Bytes that do not compress (media, archives, random data) are sent as they are:
    // deflating them saves nothing and is most of a large pull's CPU
    if (this.corked && frame.length <= BATCH_BYTES) {
      this.batched(frame.slice(), compressibleBuffer(frame));
      if (room) giveBuffers([room]);
      return;
    }
    this.flush();
    if (this.native) {
      // Chromium sends a large frame at less CPU as a Blob (its bytes handed on from the
      // browser's blob store) than as an ArrayBuffer, and a small one at less as an ArrayBuffer
      // (a Blob costs a fixed ~0.4 ms more; BLOB_FRAME_MIN, bench/results/page-vs-cli.md). Either
      // holds a copy: the buffer goes back at once.
      this.sentBytes += frame.length;
      this.ws.send(frame.length < BLOB_FRAME_MIN ? frame : new Blob([frame as Uint8Array<ArrayBuffer>]));
      if (room) giveBuffers([room]);
      return;
    }
    this.sentBytes += frame.length;
    this.ws.send(frame, { compress: frame.length >= DEFLATE_MIN && compressibleBuffer(frame) }, () => {
      if (room) giveBuffers([room]);
    });
  }

  /**
   * Sends a Delta Run (docs/protocol.md): chunks `indices` of `lengths`, whose bytes are
   * `parts` one after another (slices of a file), after waiting like `send`. The socket reads
   * the parts itself: their bytes never pass through JavaScript.
   */
  async sendDeltaRun(indices: Uint32Array, lengths: Uint32Array, parts: Blob[]): Promise<void> {
    while (!this.hasRoom()) {
      if (this.closed) throw this.closed;
      await new Promise((r) => setTimeout(r, 2));
    }
    if (this.closed) throw this.closed;
    this.flush();
    const head = deltaRunHead(indices, lengths) as Uint8Array<ArrayBuffer>;
    const frame = new Blob([head, ...parts]);
    this.count(Msg.Delta, frame.size);
    this.runBytes += frame.size - head.length;
    this.sentBytes += frame.size;
    this.ws.send(frame);
  }

  private count(type: number, bytes: number) {
    this.traffic[part(type)] += bytes;
    this.traffic.total += bytes;
  }

  /** Sends an Error message (best effort) and closes. The Error goes out even when this side
   *  failed on what it received (a text frame, a frame that does not decode). */
  sendError(code: number, message: string) {
    try {
      if (!this.ending && this.ws.readyState === 1) this.ws.send(encode({ type: Msg.Error, code, message }), { compress: false });
    } catch {
      /* the socket is already gone */
    }
    this.close(1000, 'error');
  }

  /** Closes the socket. A socket paused for backpressure is read again (its frames dropped),
   *  so that the peer's close frame, queued behind what it was sending, arrives and the close
   *  handshake ends now instead of at the close timeout. */
  close(code = 1000, reason = '') {
    this.ending = true;
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.taken = [];
    this.batch = [];
    this.batchBytes = 0;
    if (this.paused) {
      this.paused = false;
      this.ws.resume?.();
    }
    try {
      this.ws.close(code, reason);
    } catch {
      /* already closed */
    }
  }

  /** Resolves when every queued frame has left (best effort; used before close). */
  async drain(): Promise<void> {
    while (this.ws.bufferedAmount > 0 && !this.closed) await new Promise((r) => setTimeout(r, 2));
  }
}
