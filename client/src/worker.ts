/**
 * The sync worker: chunking, hashing (the wasm module) and the sessions run here, off the page's
 * main thread; their sockets run in a worker of their own where one starts (worker-socket.ts).
 * Files are read in slices (Blob.slice), never whole; a downloaded file is collected into
 * Blobs, which the browser may keep on disk.
 */
import type { Source } from '../../shared/src/chunking/chunk-index.ts';
import { blobSource } from './blob-source.ts';
import { HashPool, type HashReply, type HashWorker, OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { type Conn, ConnectionLost, RemoteError, type WebSocketCtor } from '../../shared/src/transport/conn.ts';
import { ConnectionPool, type Connections } from '../../shared/src/transport/connection-pool.ts';
import { StoredKnown } from './known-store.ts';
import { initWasm } from './wasm-init.ts';
import { type LatestInfo, guardedPush } from '../../shared/src/sync/guarded-push.ts';
import { keepSynced, withKept } from './kept-push.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import type { Sink } from '../../shared/src/session/sink.ts';
import { type Progress, pull } from '../../shared/src/session/delta-client.ts';
import { fetchWhileBusy } from '../../shared/src/transport/busy.ts';
import type { Failure, FromWorker, Step, Threads, ToWorker } from './worker-api.ts';
import { PageSocket, type PageSocketLike, WorkerSocket, socketHost, socketHostSettled } from './worker-socket.ts';
import { FolderSync, type FolderFromWorker, type FolderToWorker, isFolderMessage } from './folder-sync.ts';
import { NEW_WORKER_MS, WORKER_READY, WORKER_START_MS, starting } from './worker-start.ts';

/** The wasm module, fetched from the server at start-up; a fetch that failed (the server was
 *  away) is tried again by the next transfer, and that transfer's failure reads "unreachable". */
class WasmUnavailable extends Error {}
let ready: Promise<unknown> = initWasm();
ready.catch(() => {}); // handled by the next transfer
const wasm = () =>
  (ready = ready.catch(() =>
    initWasm().catch((e: Error) => {
      throw new WasmUnavailable(`the sync module could not be loaded: ${e.message}`);
    }),
  ));
const post = (m: FromWorker) => (self as unknown as Worker).postMessage(m);

/** Progress with byte counts is posted at most this often per transfer: each post re-renders
 *  the page's card, ~5 ms of its main thread on this machine and four times that on a phone's
 *  CPU; at 10 per second that was a twentieth of a core taken from the chunking on a 1 GiB push
 *  (bench/results/page-vs-cli.md). */
const PROGRESS_EVERY_MS = 250;
/** A download is gathered in memory up to this much, then turned into a Blob part. */
const BLOB_PART_BYTES = 8 << 20;
/** After the page is back from being away (hidden, frozen, offline), each running transfer's
 *  socket is watched in windows this long: a phone's socket can stay open on a link that died
 *  while it was locked (a NAT that forgot it, a network that changed), and would hold the
 *  transfer until TCP gives up. A socket that in a window hears nothing and gets no byte off
 *  while it holds bytes to send is taken for dead and dropped; the sync client reconnects, and
 *  the upload resumes from what the server kept. Bytes go on leaving for a while on a dead link
 *  (the device's send buffer and the sender's window take them), so one look is not enough. */
const WAKE_GRACE_MS = 5000;
/** A watched socket that holds nothing to send (it waits on the server) is dropped after it
 *  heard nothing and got no byte off for this long: longer than a loaded server's commit of a
 *  large file. */
const WAKE_ANSWER_MS = 30_000;

class Cancelled extends Error {
  constructor() {
    super('cancelled');
  }
}

/** The job each socket works for now (a pooled socket changes hands): a cancelled job's
 *  socket sends nothing more. */
const owner = new WeakMap<PageSocketLike, Job>();
/** When each socket was opened or last received a message (ms since the epoch). */
const heard = new WeakMap<PageSocketLike, number>();
/** Bytes each socket was given to send. */
const given = new WeakMap<PageSocketLike, number>();
/** Bytes that have left `ws` (given, less those it still holds). */
const left = (ws: PageSocketLike) => (given.get(ws) ?? 0) - ws.bufferedAmount;
/** Sockets watched since the page came back (`Job.wake`). */
const watched = new WeakSet<PageSocketLike>();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Ends `ws` now, as a lost connection: its close event is given at once (a close on a dead
 *  link waits for a handshake that never comes), and the socket's own later one is ignored. */
function drop(ws: PageSocketLike, reason: string) {
  ws.close(4000, reason);
  if (ws instanceof WorkerSocket) ws.take({ ev: 'close', id: 0, code: 1006, reason });
  else (ws as unknown as WebSocket).dispatchEvent(new CloseEvent('close', { code: 1006, reason }));
}

/** One running transfer: its sockets (to close on cancel) and where it has got to. */
class Job {
  /** aborted by a cancel: a push's session sends nothing more (delta-client.ts `signal`) */
  readonly stop = new AbortController();
  get cancelled(): boolean {
    return this.stop.signal.aborted;
  }
  /** a socket of this job has opened: a later loss is "lost", not "unreachable" */
  connected = false;
  step: Step = 'connecting';
  readonly sockets = new Set<PageSocketLike>();
  /** where its sockets and hashing ran (the page shows it under Details) */
  private readonly ran: Threads = { socketWorker: false, hashWorkers: 0 };
  private lastPost = 0;
  /** whether this step's progress has been posted with bytes done */
  private moved = false;

  constructor(readonly id: number) {}

  /** The page is back after it was away: each open socket of this job is watched
   *  (WAKE_GRACE_MS) until it hears from the server after its first window (what it hears in
   *  the first may have waited in the device since before the link died), closes, or is
   *  dropped as dead; the sync client then reconnects (and resumes). */
  wake() {
    for (const ws of this.sockets) if (ws.readyState === 1 && !watched.has(ws)) void this.watch(ws);
  }

  private async watch(ws: PageSocketLike) {
    watched.add(ws);
    try {
      let out = left(ws);
      let quietSince = Date.now();
      for (let window = 0; ; window++) {
        const from = Date.now();
        await sleep(WAKE_GRACE_MS);
        if (!this.sockets.has(ws) || ws.readyState !== 1) return;
        const spoke = (heard.get(ws) ?? 0) >= from;
        if (spoke && window > 0) return;
        if (spoke || left(ws) > out) {
          out = left(ws);
          quietSince = Date.now();
        } else if (ws.bufferedAmount > 0 || Date.now() - quietSince >= WAKE_ANSWER_MS) return drop(ws, 'silent since the page came back');
      }
    } finally {
      watched.delete(ws);
    }
  }

  /** Where its sockets and hashing ran so far. */
  threads(): Threads {
    return { ...this.ran };
  }

  /** A socket it took: one of the socket worker's counts once it has opened there (a socket
   *  worker that failed to start fails its sockets, and the retries use the sync worker's own). */
  uses(ws: unknown) {
    if (!(ws instanceof WorkerSocket)) return;
    if (ws.readyState === 1) this.ran.socketWorker = true;
    else ws.addEventListener('open', () => (this.ran.socketWorker = true));
  }

  /** Posts a step's progress: a new step, its first bytes done and its end at once, the bytes
   *  between at most every PROGRESS_EVERY_MS. */
  progress(step: Step, done?: number, total?: number) {
    const now = performance.now();
    if (step === this.step && done !== undefined && done !== total && (this.moved || !done) && now - this.lastPost < PROGRESS_EVERY_MS) return;
    if (step !== this.step) this.moved = false;
    if (done) this.moved = true;
    this.step = step;
    this.lastPost = now;
    post({ kind: 'progress', id: this.id, step, done, total });
  }

  /** The WebSocket constructor this job hands the sync client: it tracks the job's sockets,
   *  and a cancelled job's socket refuses to send. */
  webSocket(): WebSocketCtor {
    const job = this;
    return function JobSocket(url: string) {
      if (job.cancelled) throw new Cancelled();
      const ws = new PageSocket(url);
      job.uses(ws);
      owner.set(ws, job);
      job.sockets.add(ws);
      heard.set(ws, Date.now());
      ws.addEventListener('message', () => heard.set(ws, Date.now()));
      ws.addEventListener('open', () => {
        job.connected = true;
        heard.set(ws, Date.now());
      });
      ws.addEventListener('close', () => job.sockets.delete(ws));
      const send = ws.send.bind(ws);
      ws.send = (data: Uint8Array | Blob) => {
        if (owner.get(ws)?.cancelled) throw new Cancelled();
        send(data);
        given.set(ws, (given.get(ws) ?? 0) + (data instanceof Blob ? data.size : data.byteLength));
      };
      return ws;
    } as unknown as WebSocketCtor;
  }

  /** `file` as a Source (blob-source.ts); `onRead(end)` sees how far each read reached. Its
   *  chunks are hashed by hash workers where the device has cores for them. */
  async source(file: Blob, onRead?: (end: number) => void): Promise<Source> {
    const pool = file.size >= OFF_THREAD_MIN ? await hashPool() : null;
    if (pool) this.ran.hashWorkers = Math.max(this.ran.hashWorkers, pool.size);
    // after a cancel a push reads no more, unless all it needed went out: then it is stored,
    // and what follows (the copy kept of it) goes on
    const check = () => {
      if (this.cancelled && this.step !== 'delta-sent' && this.step !== 'committed') throw new Cancelled();
    };
    // each read is a buffer of its own: the run's buffers are handed over, not copied, and come back
    return blobSource(file, { check, onRead, ...(pool && { hashRun: (offset, lengths, algo, pieces, onSpent) => pool.hash(null, offset, lengths, algo, pieces, true, onSpent) }) });
  }

  /** A pull's sockets close at once. A push's session stops sending instead (its signal, and
   *  its socket refuses a next message): closing the socket would still send what is queued,
   *  and a push whose last messages were queued is committed by the server; so a push either
   *  stops short of its commit (cancelled, nothing stored), also while it waits on a stalled
   *  link, or had sent everything and ends as what it is, stored. */
  cancel(push: boolean) {
    this.stop.abort(new Cancelled());
    if (!push) for (const ws of this.sockets) ws.close(1000, 'cancelled');
  }

  failure(e: unknown): Failure {
    const message = e instanceof Error ? e.message : String(e);
    if (this.cancelled || e instanceof Cancelled) return { kind: 'cancelled', message: 'cancelled' };
    if (e instanceof ConnectionLost) return { kind: this.connected ? 'lost' : 'unreachable', message };
    if (e instanceof WasmUnavailable) return { kind: 'unreachable', message };
    if (e instanceof RemoteError) {
      if (e.code === ErrorCode.Unauthorized) return { kind: 'refused', message };
      if (e.code === ErrorCode.LimitExceeded) return { kind: 'limit', message };
      if (e.code === ErrorCode.StaleBasis) return { kind: 'stale', message };
      // the bytes sent are not those chunked: the file changed on disk while it was read (a
      // browser that does not refuse such reads, as Firefox with a file rewritten in place)
      if (e.code === ErrorCode.VerifyFailed) return { kind: 'unreadable', message };
    }
    if (e instanceof DOMException && ['NotReadableError', 'NotFoundError', 'SecurityError', 'NotAllowedError'].includes(e.name)) return { kind: 'unreadable', message };
    return { kind: 'error', message };
  }
}

/** A download sink: bytes gathered into Blob parts of BLOB_PART_BYTES. */
function blobSink(onWritten: (bytes: number) => void): Sink & { blob(): Blob } {
  const parts: Blob[] = [];
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let written = 0;
  let result: Blob | null = null;
  const flush = () => {
    if (pending.length) parts.push(new Blob(pending as BlobPart[]));
    pending = [];
    pendingBytes = 0;
  };
  return {
    write: async (b) => {
      pending.push(b.slice()); // the session may reuse its buffer
      pendingBytes += b.length;
      written += b.length;
      if (pendingBytes >= BLOB_PART_BYTES) flush();
      onWritten(written);
    },
    commit: async () => {
      flush();
      result = new Blob(parts);
      parts.length = 0;
      return 0;
    },
    abort: async () => {
      parts.length = 0;
      pending = [];
    },
    blob: () => result!,
  };
}

/** Hash workers (shared/src/chunking/hash-pool.ts), started with this worker: one per core
 *  beyond this worker's own, at most 2; none on a single core. The pool is used once each has
 *  said it started (worker-start.ts); where one cannot start (a browser without workers in
 *  workers) or has not within WORKER_START_MS, none is used and this thread hashes. */
let pool: Promise<HashPool | null> | undefined;
function hashPool(): Promise<HashPool | null> {
  pool ??= (async () => {
    const n = Math.min(2, (navigator.hardwareConcurrency || 1) - 1);
    if (n <= 0) return null;
    await socketHostSettled();
    // one after another: each started once the one before has said it runs (see the start below)
    const workers: HashWorker[] = [];
    for (let i = 0; i < n; i++) {
      let w: HashWorker & { started: Promise<boolean> };
      try {
        w = starting(webHashWorker, WORKER_START_MS + NEW_WORKER_MS);
      } catch {
        break;
      }
      workers.push(w);
      if (await w.started) continue;
      for (const x of workers) x.terminate();
      return null;
    }
    return workers.length === n ? new HashPool(workers) : (workers.forEach((w) => w.terminate()), null);
  })();
  return pool;
}

/** A hash worker; `started` is true once it says it runs, false if it fails or has not within
 *  WORKER_START_MS. */
function webHashWorker(): HashWorker & { started: Promise<boolean> } {
  const w = new Worker(new URL('./hash-worker.ts', import.meta.url), { type: 'module' });
  const started = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), WORKER_START_MS);
    const end = (ok: boolean) => {
      clearTimeout(timer);
      resolve(ok);
    };
    w.onmessage = (e) => e.data === WORKER_READY && end(true);
    w.onerror = () => end(false);
  });
  return {
    started,
    post: (m, transfer) => w.postMessage(m, transfer),
    listen(onReply, onFail) {
      w.onmessage = (e: MessageEvent<HashReply | typeof WORKER_READY>) => e.data !== WORKER_READY && onReply(e.data);
      w.onerror = (e) => onFail(new Error(e.message || 'the worker did not start'));
    },
    terminate: () => w.terminate(),
  };
}

/** The server's latest version of `name` (GET /api/versions, with this page's sign-in). */
async function latestOf(url: string, name: string): Promise<LatestInfo | null> {
  const u = new URL(url);
  u.protocol = u.protocol.replace(/^ws/, 'http');
  const res = await fetchWhileBusy(() => fetch(`${u.origin}/api/versions?${new URLSearchParams({ name })}`));
  if (!res.ok) return null;
  const vs = (await res.json()) as LatestInfo[];
  return vs.length ? vs[vs.length - 1] : null;
}

const jobs = new Map<number, Job>();
const kinds = new Map<number, 'push' | 'pull'>();
/** The versions this browser pushed or pulled, per user, so that the next edit of a file goes
 *  up in one round trip (shared/src/session/known.ts), after a reload too (known-store.ts). */
const knowns = new Map<string, Promise<StoredKnown>>();
const knownOf = (user: string) => {
  let k = knowns.get(user);
  if (!k) knowns.set(user, (k = StoredKnown.open(user || 'local')));
  return k;
};

/** Sockets kept open between transfers (connection-pool.ts): a folder's files, or a re-sync
 *  after an edit, skip the TCP and WebSocket handshakes. The server closes one left idle. */
const KEEP_IDLE = 2;
const connections = new ConnectionPool(PageSocket, KEEP_IDLE);

/** The pool's connections as `job` takes them: a new one is opened with the job's WebSocket
 *  (a failure to open throws the sync client's own ConnectionLost, so its retries and messages
 *  apply unchanged); each is the job's while taken (a cancel closes it, for a pull, or stops
 *  its sending, for a push) and is kept for the next job unless this one was cancelled. */
function connectionsOf(job: Job): Connections {
  return {
    take: async (url, alt) => {
      const c = await connections.take(url, alt, job.webSocket());
      job.sockets.add(c.ws as PageSocketLike);
      job.uses(c.ws);
      owner.set(c.ws as PageSocketLike, job);
      job.connected = true;
      return c;
    },
    give: (c: Conn) => {
      job.sockets.delete(c.ws as PageSocketLike);
      connections.give(c, !job.cancelled);
    },
  };
}

async function run(m: Exclude<ToWorker, { kind: 'cancel' | 'wake' }>, job: Job) {
  const WebSocket = job.webSocket();
  const connection = connectionsOf(job);
  const known = await knownOf(m.user);
  const scope = m.user || 'local';
  const onProgress = (progress: Progress, done?: number, total?: number) => job.progress(progress, done, total);
  if (m.kind === 'push') {
    // Once the Checksum List is out, the reads left are the literal chunks' (in file order):
    // how far they have read is the progress.
    const source = await job.source(m.file, (end) => {
      if (job.step === 'tokens-received' || job.step === 'sending') job.progress('sending', end, source.size);
    });
    // against the version this page knows (or expecting no file): a newer version from
    // another device is never reverted, the bytes go up as a conflict copy instead
    const outcome = await guardedPush(source, { url: m.url, name: m.name, WebSocket, connection, retries: m.retries, resume: m.resume, modified: m.file.lastModified, onProgress, signal: job.stop.signal, known: await withKept(known, scope, m.url, m.name), device: m.device, latestOf: (name) => latestOf(m.url, name) });
    const server = outcome.kind === 'pushed' || !outcome.server ? undefined : { version: outcome.server.version, ...(outcome.server.client && { client: outcome.server.client }) };
    if (outcome.kind === 'behind') return post({ kind: 'done', id: m.id, guard: { kind: 'behind', known: outcome.known, server }, threads: job.threads() });
    const report = outcome.report;
    // the copy is made before the page hears of the Result: a file saved again at once (its
    // File no longer readable) would leave nothing kept
    await keepSynced(known, scope, m.url, report.name, report, m.file);
    post({ kind: 'done', id: m.id, report, threads: job.threads(), ...(outcome.kind === 'conflict' && { guard: { kind: 'conflict', known: outcome.known, server, savedAs: report.name } }) });
  } else {
    const basis = m.basis ? await job.source(m.basis, (end) => job.progress('chunking', end, basis!.size)) : null;
    const sink = blobSink((written) => job.progress('receiving', written, m.size));
    const report = await pull({ url: m.url, name: m.name, version: m.version, basis, WebSocket, connection, sink, onProgress, known });
    const blob = sink.blob();
    await keepSynced(known, scope, m.url, m.name, report, blob);
    post({ kind: 'done', id: m.id, report, blob, threads: job.threads() });
  }
}

/** The folder this worker keeps in sync (folder-sync.ts), if any. */
let folder: FolderSync | null = null;

async function folderMessage(m: FolderToWorker) {
  const tell = (status: FolderFromWorker['status']) => (self as unknown as Worker).postMessage({ kind: 'folder', status } satisfies FolderFromWorker);
  if (m.kind === 'folder-start') {
    folder?.stop();
    folder = null;
    try {
      await wasm();
    } catch (e) {
      return tell({ folder: m.handle.name, state: 'error', error: (e as Error).message, recent: [], conflicts: [], skipped: [], watch: 'polling' });
    }
    folder = new FolderSync({ handle: m.handle, url: m.url, user: m.user, device: m.device, known: await knownOf(m.user), post: tell });
  } else if (m.kind === 'folder-pass') folder?.request();
  else if (m.kind === 'folder-allow-deletes') folder?.allowDeletes();
  else {
    folder?.stop();
    folder = null;
  }
}

self.onmessage = async (ev: MessageEvent<ToWorker | FolderToWorker>) => {
  const m = ev.data;
  if (isFolderMessage(m)) return folderMessage(m);
  if (m.kind === 'cancel') return jobs.get(m.id)?.cancel(kinds.get(m.id) === 'push');
  if (m.kind === 'wake') return jobs.forEach((j) => j.wake());
  const job = new Job(m.id);
  jobs.set(m.id, job);
  kinds.set(m.id, m.kind);
  try {
    await wasm();
    await run(m, job);
  } catch (e) {
    post({ kind: 'failed', id: m.id, failure: job.failure(e) });
  } finally {
    jobs.delete(m.id);
    kinds.delete(m.id);
  }
};
// This worker's own workers start one at a time after the wasm module is loaded (or failed
// to load), each once the one before has said it runs, and only then does this worker say it
// runs (WORKER_READY): in Firefox ESR a worker's `new Worker` now and then never returns, and
// the worker stands still for good with every transfer behind it; far more often when called
// beside another start (its wasm's, another worker's, a service worker's install: the page
// registers its service worker once this worker runs). e2e/engines/worker-start.ts, 100 fresh
// pages each at load 8–17: 9 stuck with the socket and hash workers started beside the wasm's
// load; 3–4 with them started after it but at once; 1 started one at a time, its socket
// worker's start never returning; and a CI run saw a hash worker's. Each start tells the page
// how long it may take (`starting`), so a sync worker stuck in one is found within
// NEW_WORKER_MS and the page starts another (worker-start.ts `PageWorker`). Transfers wait
// behind this.
void ready.catch(() => {}).then(async () => {
  starting(socketHost, WORKER_START_MS + NEW_WORKER_MS);
  await hashPool();
  (self as unknown as Worker).postMessage(WORKER_READY);
});
