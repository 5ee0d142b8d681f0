/**
 * The sync client, the same in the browser and in Node: it is handed a WebSocket constructor
 * and a Source (a Blob or a file handle), so it does no file or network setup of its own.
 *
 *   push: Hello, then chunk and hash the file a slice at a time, sending each slice's part of
 *         the Checksum List at once; the Delta Bytes of what the server has matched go out
 *         while the rest is still being chunked.
 *   pull: ask for a version; with a local basis, the three phases run mirrored so only the
 *         changed chunks come down; the rebuilt file is verified before it is kept.
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { type ChunkIndex, type Source, bufferSource, chunkParts, chunkSource } from '../chunking/chunk-index.ts';
import { Conn, ConnectionLost, RemoteError, type Traffic, type WebSocketCtor } from '../transport/conn.ts';
import type { Connections } from '../transport/connection-pool.ts';
import { KNOWN_MAX_DELTA, KNOWN_MAX_FILE, type KnownVersion, type KnownVersions, basisChecksumsOf, chunksTo, fineIndex, knownKey } from './known.ts';
import { keptBasisOf } from './kept.ts';
import { matchKnown } from './matcher.ts';
import { BASIS_ABSENT, type ChunkParams, DEFAULT_ALGO, DEFAULT_FINE, DEFAULT_PARAMS, ErrorCode, Msg, Op, PROTOCOL_VERSION, busyRetryS, hashLength, sameParams } from '../wire/protocol.ts';
import { indexParts } from './checksum-list.ts';
import { receiveTarget } from './receiver.ts';
import { withRoute } from '../transport/route.ts';
import { sendTarget } from './sender.ts';
import { ANY_MODE_MAX_BYTES, DAMAGED_BASIS_RETRIES, MAX_MODIFIED_MS, RESUME_MIN_FILE } from '../base/limits.ts';
import { whileBusy as waitWhileBusy } from '../transport/busy.ts';
import { compressible } from '../base/entropy.ts';
import type { Phase, SendOutcome, SenderOptions } from './session-options.ts';
import type { Sink } from './sink.ts';

/** What a progress callback reports, in order (a push's Delta Bytes start to flow during
 *  'chunking'); the middle three are the ends of the sender's phases (`PROGRESS_OF`). */
export type Progress = 'connecting' | 'chunking' | 'checksums-sent' | 'tokens-received' | 'delta-sent' | 'committed' | 'retrying' | 'busy';

/** The progress the sender's entering a phase reports. */
const PROGRESS_OF: Record<Exclude<Phase, 'checksums'>, Progress> = { tokens: 'checksums-sent', delta: 'tokens-received', result: 'delta-sent' };

export interface SyncOptions {
  /** ws:// or wss:// URL of the server's /sync endpoint; a session whose bytes do not
   *  compress runs on `?deflate=0` of it instead (see `worthDeflating`) */
  url: string;
  name: string;
  WebSocket: WebSocketCtor;
  /** an open connection to run the session on, or where to take one to the session's URL
   *  (with or without `?deflate=0`) and give it back after (a `ConnectionPool`,
   *  connection-pool.ts); a ConnectionLost from taking one counts as a failed attempt, like
   *  one of the session's own. Without one, or when the given one has closed, the session
   *  opens its own and closes it at the end. */
  connection?: Conn | Connections;
  params?: ChunkParams;
  algo?: number;
  onProgress?: (progress: Progress, done?: number, total?: number) => void;
  /** versions this client pushed or pulled before (known.ts): a file found there is pushed
   *  against it in one round trip when few of its bytes changed; each version pushed or pulled
   *  is kept there. Absent: every push runs the three phases. */
  known?: KnownVersions;
  /** how long to wait in all for a busy server, which names the seconds to wait at each
   *  refusal (ErrorCode.Busy; progress 'busy' with those seconds), before failing with its
   *  "busy" (default BUSY_WAIT_MS; 0: fail at the first) */
  busyWaitMs?: number;
  /** how long a connection the session opens itself may take to open before it counts as lost
   *  (default CONNECT_TIMEOUT_MS; `Conn.open`) */
  connectMs?: number;
}

/** What one sync did; printed by `dsync push` as its last line. */
export interface SyncReport {
  name: string;
  version: number;
  size: number;
  /** the version's root hash, hex (chunk-index.ts): what the sync engine names content by */
  root: string;
  chunks: number;
  /** bytes the receiver took from the basis: covered by Match Tokens, or copied by refined chunks */
  matchedBytes: number;
  /** of matchedBytes, those copied by refined chunks (docs/protocol.md §3, Refinement) */
  refinedBytes: number;
  literalBytes: number;
  traffic: Traffic & { wire: number };
  timeMs: { client: number; server: number; network: number; total: number };
  /** whether the socket compressed its messages (permessage-deflate) */
  deflate: boolean;
  /** push: chunk bytes that went as Delta Runs of file slices the socket read itself (a
   *  browser's file: the fast path, docs/protocol.md 0x0E); 0 where they were read and copied */
  runBytes?: number;
  /** push: the version the client knew and sent its own Match Tokens against (one round trip,
   *  docs/protocol.md §3 "A known basis"); absent: the three phases ran */
  knownVersion?: number;
  /** push: the content equals the stored latest version: nothing was stored, `version` is that
   *  version's number */
  unchanged?: true;
  /** push: the bytes of that version were kept here and the edit went as byte-exact copies of
   *  them (kept.ts) */
  keptBasis?: boolean;
  /** pull: the version's modification time as its pusher gave it (ms since the epoch, Ready's
   *  `modified`), for the caller to set on the file it wrote; absent: none */
  modified?: number;
}

/** A file's modification time as a Hello carries it: whole ms since the epoch (a stat's
 *  `mtimeMs` has a fraction), undefined outside 0 … MAX_MODIFIED_MS (before 1970, a clock gone
 *  wrong: the version then has none). */
export function modifiedOf(ms: number | undefined): number | undefined {
  if (ms === undefined) return undefined;
  const t = Math.floor(ms);
  return Number.isSafeInteger(t) && t >= 0 && t <= MAX_MODIFIED_MS ? t : undefined;
}

/** The connection of one session to `url`, and what to do with it after: the given one while
 *  it can take a session (kept open), else one from the given pool (given back), else one of
 *  its own (closed). */
async function connectionFor(opts: SyncOptions, url: string, alt?: string): Promise<{ conn: Conn; release: () => void }> {
  const given = opts.connection;
  if (given instanceof Conn) {
    if (given.usable) return { conn: given, release: () => {} };
  } else if (given) {
    const conn = await given.take(url, alt);
    return { conn, release: () => given.give(conn) };
  }
  const conn = await Conn.open(url, opts.WebSocket, opts.connectMs);
  return { conn, release: () => conn.close(1000, 'done') };
}

/** Bytes per sample, and samples per file, of `worthDeflating`'s estimate. */
const SAMPLE_BYTES = 64 << 10;
const SAMPLES = 8;

/**
 * Whether permessage-deflate is worth its CPU for a file: whether a few evenly spaced samples
 * are `compressible`. In Chromium compressing a file that is not cost the network service
 * 7.5 s of CPU per 256 MiB and capped an upload at ~20 MiB/s (bench/results/browser-memory.md).
 */
export async function worthDeflating(source: Source): Promise<boolean> {
  const len = Math.min(SAMPLE_BYTES, source.size);
  const samples = Math.min(SAMPLES, Math.ceil(source.size / SAMPLE_BYTES));
  const pieces: Uint8Array[] = [];
  for (let k = 0; k < samples; k++) {
    const offset = samples > 1 ? Math.floor(((source.size - len) * k) / (samples - 1)) : 0;
    pieces.push(await source.read(offset, len));
  }
  return compressible(pieces);
}

/** The URL of a session: the /sync endpoint, or its no-compression variant; with the routing
 *  hint of the file `name` (route.ts) when given. */
export function sessionUrl(url: string, deflate: boolean, name?: string): string {
  if (name !== undefined) url = withRoute(url, name);
  if (deflate) return url;
  const u = new URL(url);
  u.searchParams.set('deflate', '0');
  return u.toString();
}

const deflated = (c: Conn) => /permessage-deflate/.test(c.ws.extensions ?? '');


const ms = (t: number) => Math.round(t * 10) / 10;

/** Delay before retry `attempt` (0, 1, …): 0.5 s doubling to 8 s, with jitter. */
export const backoffMs = (attempt: number) => Math.min(8000, 500 * 2 ** attempt) * (0.75 + Math.random() / 2);

/** Whether a push with the three phases says it may resume an interrupted upload of its name
 *  (Hello's resume flag, docs/protocol.md §3 "Resuming"): a retry after a lost connection,
 *  whose upload the server may hold; a push whose caller's record says an earlier upload of
 *  the file to this server was cut off (`cutOff` true: known.ts UploadRecord, or
 *  PushOptions.resume), so that a push run again after its client or server was killed
 *  resumes; and, where the caller keeps no record (`cutOff` undefined), a file of
 *  RESUME_MIN_FILE and more on every try, for the same reason. Any other push starts from the
 *  server's guess of the file head (one store request less); an upload of its file that waits
 *  is missed, and its bytes are sent again. */
export const mayResume = (size: number, reconnects: number, cutOff: boolean | undefined) => reconnects > 0 || (cutOff ?? size >= RESUME_MIN_FILE);

/** A push's plan against a version of the file this client knows (known.ts). Known with its
 *  finer cut (one this client pushed), the push goes against it (`against`) and chunks as it
 *  sends: refined against that cut, it sends what the three phases would, one round trip
 *  sooner. Known without (a pulled one), the file is chunked first and pushed against it when
 *  at most `maxDelta` bytes are not found there, else with the three phases on the index
 *  already made (`index`). Nothing known, or other chunking: the three phases. */
export async function planKnown(
  source: Source,
  params: ChunkParams,
  algo: number,
  known: KnownVersion | undefined,
  o: { maxDelta?: number; onProgress?: (done: number) => void; index?: ChunkIndex } = {},
): Promise<{ index: ChunkIndex | null; against: KnownVersion | null }> {
  let index = o.index ?? null;
  if (!known || known.algo !== algo || !sameParams(known.params, params) || source.size > KNOWN_MAX_FILE) return { index, against: null };
  if (known.fine || known.kept) return { index, against: known };
  o.onProgress?.(0);
  index ??= await chunkSource(source, params, algo, o.onProgress);
  return { index, against: matchKnown(index, known, hashLength(algo)).uncovered <= (o.maxDelta ?? KNOWN_MAX_DELTA) ? known : null };
}

/** One push session on an open connection: Hello (naming the known version pushed against, if
 *  any, or with the three phases saying whether it may resume an interrupted upload), then the
 *  sender's side, over an index already made or the file chunked as it goes. */
export async function pushSession(
  conn: Conn,
  source: Source,
  o: { name: string; params: ChunkParams; algo: number; basisVersion?: number; index?: ChunkIndex | null; against?: KnownVersion | null; resume?: boolean; modified?: number; sliceBytes?: number; onChunked?: (done: number) => void; sender?: SenderOptions },
): Promise<SendOutcome & { unchanged: boolean }> {
  const k = o.against;
  /** Ready's version: the basis the server builds on (0: none) */
  let basis = 0;
  conn.hashLen = hashLength(o.algo);
  const modified = modifiedOf(o.modified);
  await conn.send({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Push, params: o.params, algo: o.algo, size: source.size, basisVersion: o.basisVersion ?? 0, name: o.name, ...(k ? { known: { version: k.version, root: k.root } } : o.resume && { resume: true }), ...(modified !== undefined && { modified }) });
  const parts = o.index ? indexParts(o.index) : chunkParts(source, o.params, o.algo, { sliceBytes: o.sliceBytes, onProgress: o.onChunked });
  const out = await sendTarget(conn, o.algo, { size: source.size, parts }, source, {
    ...o.sender,
    // against a known version no Ready comes: its basis is that version, which the client
    // knows (docs/protocol.md §3 "A known basis")
    ...(k ? { known: k, basisChecksums: k.kept ? keptBasisOf(k.kept) : k.fine && basisChecksumsOf(k.fine, k.algo) } : {
      // a push may send Hello and its list before Ready: it is read before the Match Tokens
      beforeTokens: async () => void (basis = (await conn.expect(Msg.Ready)).version),
    }),
  });
  if (k) basis = k.version;
  // a new version is numbered above every stored one, its basis too: a Result naming the basis
  // or an older version stored nothing (docs/protocol.md §7, unchanged)
  return { ...out, unchanged: basis > 0 && out.result.version <= basis };
}

/** Keeps what a push sent as the version the server stored, with its finer cut (files up to
 *  KNOWN_MAX_FILE; `made`: already cut) and, where the store keeps bytes, the bytes themselves
 *  once their chunk index is found to be the one sent (the file may have changed since it was
 *  read: then they are not kept); after the Result, so none of this is part of the push. */
export async function remember(known: KnownVersions, key: string, out: SendOutcome, params: ChunkParams, algo: number, source: Source, made?: KnownVersion['fine']) {
  const size = out.lengths.reduce((a, x) => a + x, 0);
  const v: KnownVersion = { version: out.result.version, root: out.result.root.slice(), params, algo, lengths: out.lengths.slice(), hashes: out.hashes.slice() };
  // a larger file is remembered by its version and root only: the basis its next push names
  if (size > KNOWN_MAX_FILE) return known.set(key, v);
  let from = source;
  if (known.keeps?.(size) && source.size === size) {
    // one copy of the file in memory: the buffer read into, unless the source answered with
    // bytes of its own (which it may reuse)
    const buf = new Uint8Array(size);
    const got = await source.read(0, size, buf);
    const bytes = got.buffer === buf.buffer && got.byteOffset === 0 && got.length === size ? buf : got.slice();
    from = bufferSource(bytes);
    if (await chunksTo(from, v)) v.kept = bytes;
  }
  v.fine = made ?? (await fineIndex(from, DEFAULT_FINE, algo));
  // what the next push refines against, made now rather than during it (where the version is
  // kept in memory: one read back from disk is indexed by the push that reads it)
  if (!known.readsBack) {
    if (v.kept) keptBasisOf(v.kept).index();
    else basisChecksumsOf(v.fine, algo);
  }
  known.set(key, v);
}

export interface PushOptions extends SyncOptions {
  /** what the client expects at the name, checked by the server before the push and again at
   *  its commit (Hello's `basisVersion`, docs/protocol.md §7); a mismatch is a RemoteError
   *  with ErrorCode.StaleBasis and stores nothing. `{ version: K }`: the latest version is K,
   *  the version this edit was based on; 'absent': the name has no version (a first push);
   *  undefined: no check. */
  expect?: { version: number } | 'absent';
  /** reconnect this many times after a lost connection (default 0); the server resumes an
   *  interrupted upload, so Delta Bytes it already wrote are not sent again */
  retries?: number;
  /** an earlier push of this file to this name was cut off (the page's uploads it did not see
   *  finish): the first try too says it may resume (Hello's resume flag), as every try does
   *  after a lost connection (`mayResume`). Absent, the record of `known.uploads` tells, and
   *  without one a file of RESUME_MIN_FILE and more says it may resume on every try. */
  resume?: boolean;
  /** the file's modification time (ms since the epoch: a stat's `mtimeMs`, a File's
   *  `lastModified`), sent in Hello (`modifiedOf`) and kept with the version the push makes; a
   *  push found unchanged keeps the stored version as it is, its time too */
  modified?: number;
  /** bytes of the file read, chunked and hashed per step, whose part of the Checksum List
   *  then goes out (default chunk-index.ts READ_SLICE, 4 MiB); two slices are held in memory */
  sliceBytes?: number;
  /** push against a known version only when at most this many bytes are not found in it
   *  (default KNOWN_MAX_DELTA) */
  knownMaxDelta?: number;
  /** the file's chunk index, made before (a sync pass's plan hashed the file): its Checksum
   *  List goes out as it is, rather than the file read and hashed again. Used when its params,
   *  algorithm and size are the push's; bytes that are no longer what it lists fail the
   *  server's root check (VerifyFailed, nothing stored), and a retry chunks the file anew. */
  index?: ChunkIndex;
  /** a cancel: once aborted the session sends nothing more and fails with the signal's reason,
   *  also while it waits for room in a socket that no longer drains (a stalled link); a push
   *  whose last Delta Bytes already went out is not stopped and ends as the server answers */
  signal?: AbortSignal;
}

/** Runs a session, again while the server refuses it as busy (busy.ts whileBusy). The refused
 *  connection is closed (as after any Error), so the next try opens a new one. */
function whileBusy<T>(opts: SyncOptions, run: () => Promise<T>): Promise<T> {
  const busyS = (e: unknown) => (e instanceof RemoteError && e.code === ErrorCode.Busy ? busyRetryS(e.message) : null);
  return waitWhileBusy(run, busyS, { busyWaitMs: opts.busyWaitMs, onBusy: (s) => opts.onProgress?.('busy', s) });
}

/** Pushes `source` to the server as a new version of `opts.name`; a busy server is waited for
 *  (whileBusy). Whether an earlier upload of it was cut off is read before this one is noted
 *  begun (`known.uploads`). */
export function push(source: Source, opts: PushOptions): Promise<SyncReport> {
  const cutOff = opts.resume || opts.known?.uploads?.cutOff(knownKey(opts.url, opts.name));
  return whileBusy(opts, () => pushOnce(source, opts, cutOff));
}

async function pushOnce(source: Source, opts: PushOptions, cutOff: boolean | undefined): Promise<SyncReport> {
  const params = opts.params ?? DEFAULT_PARAMS;
  const algo = opts.algo ?? DEFAULT_ALGO;
  const t0 = performance.now();
  const deflate = await worthDeflating(source);
  const url = sessionUrl(opts.url, deflate, opts.name);
  // a small file's session runs as well on an idle connection of the other mode (limits.ts)
  const alt = source.size <= ANY_MODE_MAX_BYTES ? sessionUrl(opts.url, !deflate, opts.name) : undefined;
  const key = knownKey(opts.url, opts.name);
  const basisVersion = opts.expect === 'absent' ? BASIS_ABSENT : (opts.expect?.version ?? 0);
  const chunked = (d: number) => opts.onProgress?.('chunking', d, source.size);
  const made = opts.index && opts.index.algo === algo && opts.index.size === source.size && sameParams(opts.index.params, params) ? opts.index : undefined;
  let { index, against } = await planKnown(source, params, algo, opts.known?.get(key), { maxDelta: opts.knownMaxDelta, onProgress: chunked, index: made });
  let client = performance.now() - t0;
  const traffic = { checksumList: 0, matchTokens: 0, basisChecksums: 0, delta: 0, control: 0, total: 0, wire: 0 };
  /** reconnects after a lost connection; sessions again after a damaged basis */
  let reconnects = 0;
  let damagedBasis = 0;
  const uploads = opts.known?.uploads;
  let noted = false;
  for (;;) {
    // an upload that can leave a checkpoint (the three phases, RESUME_MIN_FILE and more) is
    // noted before its first byte goes out; the note ends at the Result of any push of the
    // file (an upload cut off before it built on an older version)
    if (uploads && !noted && !against && source.size >= RESUME_MIN_FILE) {
      uploads.begin(key);
      noted = true;
    }
    opts.onProgress?.('connecting');
    let taken: { conn: Conn; release: () => void } | null = null;
    try {
      taken = await connectionFor(opts, url, alt);
      const c = taken.conn;
      const wire0 = c.socketBytes();
      const tOpen = performance.now();
      const out = await c.session(async (conn) => {
        // a retry chunks the file again: it may have changed, and the server's resumption of
        // the interrupted upload is decided by the list
        if (!index) chunked(0);
        return pushSession(conn, source, {
          name: opts.name,
          params,
          algo,
          basisVersion,
          index,
          against,
          resume: mayResume(source.size, reconnects, cutOff),
          modified: opts.modified,
          sliceBytes: opts.sliceBytes,
          onChunked: chunked,
          sender: { onPhase: (p) => opts.onProgress?.(PROGRESS_OF[p]), signal: opts.signal },
        });
      });
      opts.onProgress?.('committed');
      const tEnd = performance.now();
      uploads?.end(key);
      if (opts.known) await remember(opts.known, key, out, params, algo, source);
      const wire = c.socketBytes();
      // Client time: the session's own work, chunking and hashing included (not waiting for the server).
      client += tEnd - tOpen - c.waitedMs;
      addTraffic(traffic, c.traffic, wire !== null && wire0 !== null ? wire - wire0 : out.result.wireIn + out.result.wireOut);
      const total = tEnd - t0;
      const server = out.result.micros / 1000;
      return {
        name: opts.name,
        version: out.result.version,
        size: source.size,
        root: hex(out.result.root),
        chunks: out.chunks,
        matchedBytes: out.matchedBytes + out.resumedBytes,
        refinedBytes: out.refinedBytes,
        literalBytes: out.literalBytes,
        traffic,
        timeMs: { client: ms(client), server: ms(server), network: ms(Math.max(0, total - client - server)), total: ms(total) },
        deflate: deflated(c),
        runBytes: c.runBytes,
        ...(out.unchanged && { unchanged: true }),
        ...(against && { knownVersion: against.version, ...(against.kept && { keptBasis: true }) }),
      };
    } catch (e) {
      if (taken) addTraffic(traffic, taken.conn.traffic, 0);
      switch (afterFailure(e, { known: against !== null, damagedBasis, reconnects, retries: opts.retries ?? 0 })) {
        case 'without-known':
          opts.known?.delete(key);
          against = null;
          break;
        case 'again':
          damagedBasis++;
          break;
        case 'reconnect':
          // the next session chunks the file again (it may have changed) and runs the three phases
          index = null;
          against = null;
          opts.onProgress?.('retrying', reconnects + 1, opts.retries);
          await new Promise((r) => setTimeout(r, backoffMs(reconnects++)));
          break;
        case 'fail':
          throw e;
      }
    } finally {
      taken?.release();
    }
  }
}

/** What a push does after a failed session. */
type NextStep = 'without-known' | 'again' | 'reconnect' | 'fail';

/**
 * The step after a failed push session:
 * - `without-known`: the server does not hold the known version pushed against as this client
 *   knew it (UnknownBasis), or refused what this client took from it (Inconsistent,
 *   VerifyFailed: a memory gone wrong): forget it and push again with the three phases (the
 *   known-basis fallback, docs/protocol.md §3 "A known basis");
 * - `again`: the stored version the server built on (the latest, or a similar file) proved
 *   damaged by the push's reads or its commit (UnknownBasis without a known version): nothing
 *   was stored, the next session finds the damage when it opens the basis and the push sends
 *   everything (docs/store.md §4); at most DAMAGED_BASIS_RETRIES times;
 * - `reconnect`: the connection was lost; after `backoffMs`, up to `retries` times (the server
 *   resumes the interrupted upload);
 * - `fail`: anything else.
 */
function afterFailure(e: unknown, o: { known: boolean; damagedBasis: number; reconnects: number; retries: number }): NextStep {
  if (e instanceof RemoteError) {
    if (o.known && (e.code === ErrorCode.UnknownBasis || e.code === ErrorCode.Inconsistent || e.code === ErrorCode.VerifyFailed)) return 'without-known';
    if (!o.known && e.code === ErrorCode.UnknownBasis && o.damagedBasis < DAMAGED_BASIS_RETRIES) return 'again';
  }
  if (e instanceof ConnectionLost && o.reconnects < o.retries) return 'reconnect';
  return 'fail';
}

function addTraffic(sum: Traffic & { wire: number }, t: Traffic, wire: number) {
  sum.checksumList += t.checksumList;
  sum.matchTokens += t.matchTokens;
  sum.basisChecksums += t.basisChecksums;
  sum.delta += t.delta;
  sum.control += t.control;
  sum.total += t.total;
  sum.wire += wire;
}

export interface PullOptions extends SyncOptions {
  /** the version to fetch, 0 or absent for the latest */
  version?: number;
  /** the local old copy to use as basis, if any */
  basis?: Source | null;
  /** where the verified file goes: `write` in order, then `commit` (or `abort` on failure) */
  sink: Sink;
  /** the server's Ready is in, before any byte: the version coming, its size and its
   *  modification time (absent: none), for a sink that sets it before its commit renames */
  onReady?: (ready: { version: number; size: number; modified?: number }) => void;
}

/** Pulls a version; with a basis, only the chunks the basis lacks are transferred. A busy
 *  server is waited for (whileBusy). */
export function pull(opts: PullOptions): Promise<SyncReport> {
  return whileBusy(opts, () => pullOnce(opts));
}

async function pullOnce(opts: PullOptions): Promise<SyncReport> {
  const params = opts.params ?? DEFAULT_PARAMS;
  const algo = opts.algo ?? DEFAULT_ALGO;
  const t0 = performance.now();
  let basis: { index: ChunkIndex; source: Source } | null = null;
  if (opts.basis && opts.basis.size > 0) {
    opts.onProgress?.('chunking', 0, opts.basis.size);
    basis = { index: await chunkSource(opts.basis, params, algo), source: opts.basis };
  }
  // The old copy tells how well the new one compresses; without one, compress.
  const url = sessionUrl(opts.url, !opts.basis || (await worthDeflating(opts.basis)), opts.name);
  const tChunked = performance.now();
  const { conn: c, release } = await connectionFor(opts, url);
  const wire0 = c.socketBytes();
  const tOpen = performance.now();
  try {
    return await c.session(async (conn) => {
      conn.hashLen = hashLength(algo);
      await conn.send({ type: Msg.Hello, version: PROTOCOL_VERSION, op: Op.Pull, params, algo, size: opts.basis?.size ?? 0, basisVersion: opts.version ?? 0, name: opts.name });
      const ready = await conn.expect(Msg.Ready);
      opts.onReady?.(ready);
      const limits = { maxFileSize: Number.MAX_SAFE_INTEGER, maxChunks: 2 ** 32 - 1 };
      const waitedBefore = conn.waitedMs;
      const sink: Sink = { ...opts.sink, commit: async (ix) => (await opts.sink.commit(ix), ready.version) };
      const out = await receiveTarget(conn, params, algo, basis, async () => ({ sink }), { limits, expectedSize: ready.size, refine: DEFAULT_FINE });
      opts.onProgress?.('committed');
      // (a version this client pushed is known already, with its finer cut)
      const key = knownKey(opts.url, opts.name);
      if (opts.known && opts.known.get(key)?.version !== ready.version) opts.known.set(key, { version: ready.version, root: out.index.root, params, algo, lengths: out.index.lengths, hashes: out.index.hashes });
      const tEnd = performance.now();
      const wire = c.socketBytes();
      const total = tEnd - t0;
      const client = tChunked - t0 + (tEnd - tOpen - (conn.waitedMs - waitedBefore));
      return {
        name: opts.name,
        version: ready.version,
        size: out.index.size,
        root: hex(out.index.root),
        chunks: out.index.lengths.length,
        matchedBytes: out.matchedBytes,
        refinedBytes: out.refinedBytes,
        literalBytes: out.literalBytes,
        traffic: { ...conn.traffic, wire: wire !== null && wire0 !== null ? wire - wire0 : 0 },
        timeMs: { client: ms(client), server: 0, network: ms(Math.max(0, total - client)), total: ms(total) },
        deflate: deflated(c),
        ...(ready.modified !== undefined && { modified: ready.modified }),
      };
    });
  } finally {
    await c.drain();
    release();
  }
}
