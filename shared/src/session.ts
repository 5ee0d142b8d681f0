/**
 * The three phases of a Dsync session (paper §IV-D, Fig. 8), written once for both
 * directions. The *sender* holds the target (the new file) and the *receiver* the basis (the
 * old file): on a push the client sends and the server receives; on a pull (delta download)
 * it is the other way round.
 *
 *   Phase 1  sender -> receiver  Checksum List: FastFp + length per target chunk, a slice at a
 *                                time as the sender chunks its file
 *   Phase 2  receiver -> sender  Match Tokens: merged weak-matched runs with their run hash,
 *                                each message saying below which chunk the matching is final;
 *                                before them, Basis Checksums of the basis stretches between
 *                                the runs, cut finer (refine.ts)
 *   Phase 3  sender -> receiver  for what is final: [Split Request <-> Split Hashes], Verdict,
 *                                Delta Bytes; the last Verdict carries the root
 *            receiver            rebuilds target = basis + delta in order, verifies the root,
 *                                commits
 *            receiver -> sender  Result
 *
 * The phases overlap: the Delta Bytes of the file's start go out while its end is still being
 * chunked (docs/protocol.md §3).
 */
import { type ChunkIndex, type ListPart, type Source, giveBuffers, offsetsOf, runHash, takeBuffer } from './chunk-index.ts';
import { type Checksums, type ChecksumsEnd, type Copies, type Delta, type Failed, type Message, PREFIX, type Piece, type Result, chunkLength } from './codec.ts';
import { type Conn, ConnectionLost } from './conn.ts';
import { Matcher, type Run, type WeakList, matchRuns } from './matcher.ts';
import { type ChunkParams, ErrorCode, type FineParams, Msg, ProtocolError, hashLength } from './protocol.ts';
import { BasisCopies, BasisHints, COPY_WINDOW, KEEP_LISTED, MAX_REFINE_BYTES, MiddleYield, fineCut } from './refine.ts';
import { KnownMatcher, type KnownVersion } from './known.ts';
import { StrongHasher, hash_chunks } from '../../wasm/pkg/dsync_wasm.js';

/** The run hash of a token of this side's own (a known basis): never compared. */
const NO_HASH = new Uint8Array(0);
/** Entries per Checksums / Tokens message. */
const BATCH = 8192;
/** Largest payload of one Delta message the sender builds (a single chunk may exceed it). */
export const DELTA_MESSAGE_BYTES = 1 << 20;
/** Largest stretch of basis bytes the receiver reads at once (a single chunk may exceed it). */
const COPY_STRETCH = 4 << 20;
/** The paper's threshold: a failed merged run at least this large is split before resending. */
export const SPLIT_THRESHOLD = 800 * 1024;

const bad = (why: string) => new ProtocolError(ErrorCode.Inconsistent, why);

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// The Checksum List as it grows

/** Capacity of a GrowingList, at least. */
const LIST_MIN_CAPACITY = 1024;

/** Bytes a GrowingList holds per chunk with strong hashes of H bytes: length 4, FastFp 4, the
 *  strong hash H, offset 8, mark 4 (52 with BLAKE3; measured in bench/results/hostile.md). */
export const listBytesPerChunk = (H: number) => 20 + H;

/**
 * A Checksum List that grows as its parts are made or arrive, with each chunk's offset, room
 * for its strong hash and one mark per chunk (the sender: 1 once the receiver has the chunk;
 * the receiver: the basis chunk to copy, -1 for a literal). `reserve` is told the bytes each
 * growth adds, before they are allocated, and may refuse by throwing (a memory budget). The
 * arrays are made `expected` chunks large at once when that is known (the receiver's estimate
 * from Hello's size), else doubled when full: each growth leaves the old arrays to the garbage
 * collector, which held them resident for a while (a list grown by a quarter at a time held
 * 2.4× its size in RSS).
 */
class GrowingList {
  count = 0;
  /** chunks whose strong hashes are in `hashes` (a sender's hashes trail its chunks: ListPart) */
  hashed = 0;
  lengths = new Uint32Array(0);
  fastfps = new Uint32Array(0);
  hashes = new Uint8Array(0);
  offsets = new Float64Array(1);
  marks = new Int32Array(0);

  constructor(
    private H: number,
    private unmarked: number,
    private reserve?: (bytes: number) => void,
    private expected = 0,
  ) {}

  get size(): number {
    return this.offsets[this.count];
  }

  append(lengths: Uint32Array, fastfps: Uint32Array, hashes?: Uint8Array) {
    const n = this.count;
    const m = n + lengths.length;
    if (m > this.lengths.length) {
      const cap = Math.max(m, 2 * this.lengths.length, this.expected, LIST_MIN_CAPACITY);
      this.reserve?.((cap - this.lengths.length) * listBytesPerChunk(this.H));
      const grow = <T extends Uint32Array | Uint8Array | Float64Array | Int32Array>(a: T, size: number, C: { new (n: number): T }) => {
        const b = new C(size);
        b.set(a as never);
        return b;
      };
      this.lengths = grow(this.lengths, cap, Uint32Array);
      this.fastfps = grow(this.fastfps, cap, Uint32Array);
      this.hashes = grow(this.hashes, cap * this.H, Uint8Array);
      this.offsets = grow(this.offsets, cap + 1, Float64Array);
      this.marks = grow(this.marks, cap, Int32Array);
      this.marks.fill(this.unmarked, n);
    }
    this.lengths.set(lengths, n);
    this.fastfps.set(fastfps, n);
    if (hashes?.length) {
      if (this.hashed * this.H + hashes.length > m * this.H) throw new Error('strong hashes for chunks not in the list');
      this.hashes.set(hashes, this.hashed * this.H);
      this.hashed += hashes.length / this.H;
    }
    for (let i = n; i < m; i++) this.offsets[i + 1] = this.offsets[i] + this.lengths[i];
    this.count = m;
  }

  /** The list so far (views, valid until the next append). */
  weak(): WeakList {
    return { lengths: this.lengths.subarray(0, this.count), fastfps: this.fastfps.subarray(0, this.count) };
  }
}

// ---------------------------------------------------------------------------------------------
// Sender

/** The target as its sender produces it: its size, and its Checksum List with each chunk's
 *  strong hash, in parts in chunk order (`chunkParts` while reading a file, or `indexParts`
 *  of a stored index). */
export interface TargetList {
  size: number;
  parts: AsyncIterable<ListPart>;
}

/** The parts of a stored index, as many entries as one Checksums message carries. */
export async function* indexParts(index: ChunkIndex): AsyncGenerator<ListPart> {
  const H = hashLength(index.algo);
  for (let i = 0; i < index.lengths.length; i += BATCH) {
    const j = Math.min(index.lengths.length, i + BATCH);
    yield { lengths: index.lengths.subarray(i, j), fastfps: index.fastfps.subarray(i, j), hashes: index.hashes.subarray(i * H, j * H) };
  }
}

export interface SenderOptions {
  splitThreshold?: number;
  deltaMessageBytes?: number;
  /** awaited before the first Match Tokens are read (a push reads Ready here) */
  beforeTokens?: () => Promise<void> | void;
  /** called once the whole Checksum List is sent */
  onListSent?: () => void;
  onTokens?: () => void;
  onDeltaSent?: () => void;
  /** a known basis (Hello's `known`, known.ts): the sender finds its chunks there itself as
   *  their hashes come and sends those Match Tokens as Copies, each part before the Verdict
   *  that judges it; the receiver sends none */
  known?: KnownVersion;
  /** and the known basis cut finer, the table the chunks sent are refined against */
  basisHints?: BasisHints;
  /** told the bytes the session's Checksum List is about to grow by; throws to refuse */
  reserve?: (bytes: number) => void;
}

export interface SendOutcome {
  result: Result;
  /** bytes of the target covered by confirmed Match Tokens or copied from the basis by
   *  refined chunks / sent as Delta Bytes / already held by the receiver from an interrupted
   *  session */
  matchedBytes: number;
  /** of matchedBytes, those refined chunks copied (Basis Checksums) */
  refinedBytes: number;
  literalBytes: number;
  resumedBytes: number;
  chunks: number;
  tokens: number;
  failedTokens: number;
  /** the target's chunk lengths and strong hashes (what a later push may know it by) */
  lengths: Uint32Array;
  hashes: Uint8Array;
}

/**
 * Runs the sender's side of Phases 1–3 for `target` (whose bytes `source` reads). One loop
 * does the work, in this order of priority: send the next Delta message of what is judged
 * while the socket takes it (the wire is what a large change waits for); judge the next part
 * the receiver has declared final and send its Verdict; take the next part of the Checksum
 * List (a client chunks and hashes its next slice here) and send it; else wait for room in
 * the socket or for Match Tokens, which a second strand reads meanwhile. So the Delta Bytes of
 * the file's start flow while its end is still being chunked, and chunking fills the time the
 * socket is full.
 */
export async function sendTarget(conn: Conn, algo: number, target: TargetList, source: Source, opts: SenderOptions = {}): Promise<SendOutcome> {
  const H = hashLength(algo);
  const list = new GrowingList(H, 0, opts.reserve);
  let listDone = false; // the whole Checksum List is sent (its strong hashes may still be due)
  let partsDone = false; // and every part of it is taken, hashes too
  let failure: unknown = null;
  let wake: (() => void) | null = null;
  const signal = () => {
    const w = wake;
    wake = null;
    w?.();
  };

  // Phase 2, read by its own strand: Match Tokens, final below the latest `upTo` (all of them
  // after TokensEnd).
  const firsts: number[] = [];
  const counts: number[] = [];
  const tokenHashes: Uint8Array[] = [];
  let frontier = 0;
  let tokensDone = false;
  let resumeFrom = 0;
  const hints = opts.basisHints ?? new BasisHints(algo);
  // A known basis: the Match Tokens are this side's own (confirmed), with the basis chunk each
  // starts at, for the Copies.
  const km = opts.known ? new KnownMatcher(opts.known, H) : null;
  const basisFirsts: number[] = [];
  const ok: boolean[] = []; // whether token k's run hash equals this side's, computed once per token
  const addKnown = (runs: Run[]) => {
    for (const r of runs) {
      ok[firsts.length] = true;
      firsts.push(r.first);
      counts.push(r.count);
      tokenHashes.push(NO_HASH);
      basisFirsts.push(r.basisFirst);
    }
  };
  const phase2 = (async () => {
    await opts.beforeTokens?.();
    if (km) return; // no Match Tokens come
    for (;;) {
      const m = await conn.expect(Msg.Tokens, Msg.TokensEnd, Msg.BasisChecksums);
      if (m.type === Msg.BasisChecksums) {
        hints.add(m);
        continue;
      }
      const n = list.count;
      if (m.type === Msg.TokensEnd) {
        if (!listDone) throw bad('Tokens End before the Checksum List ended');
        if (m.count !== firsts.length) throw bad(`Tokens End says ${m.count} tokens, received ${firsts.length}`);
        if (m.resumeFrom > n || (m.resumeFrom > 0 && (frontier > 0 || (firsts.length && firsts[0] < m.resumeFrom)))) {
          throw bad(`resume from chunk ${m.resumeFrom} overlaps the tokens or exceeds ${n} chunks`);
        }
        resumeFrom = m.resumeFrom;
        frontier = n;
        tokensDone = true;
        signal();
        break;
      }
      // upTo 0: nothing final yet (a receiver that waits for the whole list sends its tokens
      // so, and Tokens End makes them final); otherwise the tokens end at or below upTo.
      if ((m.upTo < frontier || m.upTo > n) && !(m.upTo === 0 && frontier === 0)) throw bad(`Match Tokens up to chunk ${m.upTo} go back from ${frontier} or beyond the ${n} chunks sent`);
      for (let k = 0; k < m.first.length; k++) {
        const first = m.first[k];
        const count = m.count[k];
        const prevEnd = firsts.length ? firsts[firsts.length - 1] + counts[counts.length - 1] : 0;
        if (count === 0 || first < Math.max(prevEnd, frontier) || first + count > n) {
          throw bad(`token ${firsts.length} [${first}, +${count}) is empty, overlaps, lies below ${frontier} or beyond the ${n} chunks sent`);
        }
        firsts.push(first);
        counts.push(count);
        tokenHashes.push(m.hashes.subarray(k * H, (k + 1) * H));
      }
      const lastEnd = firsts.length ? firsts[firsts.length - 1] + counts[counts.length - 1] : 0;
      if (m.upTo > 0 && lastEnd > m.upTo) throw bad(`Match Tokens up to chunk ${m.upTo} hold a token ending at ${lastEnd}`);
      frontier = m.upTo;
      signal();
    }
    opts.onTokens?.();
  })();
  phase2.catch((e) => {
    failure ??= e;
    signal();
  });

  const splitThreshold = opts.splitThreshold ?? SPLIT_THRESHOLD;
  const maxMsg = opts.deltaMessageBytes ?? DELTA_MESSAGE_BYTES;
  let literalBytes = 0;
  let refinedBytes = 0;
  let failedTokens = 0;
  let upTo = 0; // chunks below upTo are judged
  let cursor = 0; // chunks below cursor are judged and sent (the Delta Bytes of [cursor, upTo) are due)
  let t = 0; // the first token not judged yet
  let root: Uint8Array | null = null; // sent with the last Verdict
  let resumed = false;
  const confirmed = (k: number) => (ok[k] ??= equalBytes(runHash(algo, list.hashes, firsts[k], counts[k]), tokenHashes[k]));
  const splittable = (k: number) => counts[k] > 1 && list.offsets[firsts[k] + counts[k]] - list.offsets[firsts[k]] >= splitThreshold;

  // Phase 3: confirms each token below `end` by its run hash (splitting large failed ones, a
  // round trip that comes after Tokens End, so that one strand reads at a time) and sends the
  // Verdict up to `end`. The last Verdict carries the root.
  const judge = async (end: number) => {
    const t0 = t;
    let te = t;
    while (te < firsts.length && firsts[te] + counts[te] <= end) te++;
    const failed: Failed[] = [];
    const toSplit: number[] = [];
    for (; t < te; t++) {
      if (confirmed(t)) list.marks.fill(1, firsts[t], firsts[t] + counts[t]);
      else if (splittable(t)) toSplit.push(t);
      else failed.push({ token: t, bitmap: null });
    }
    if (toSplit.length) {
      await conn.send({ type: Msg.SplitRequest, tokens: Uint32Array.from(toSplit) });
      for (const s of toSplit) {
        const m = await conn.expect(Msg.SplitHashes);
        if (m.token !== s || m.hashes.length !== counts[s] * H) throw bad(`Split Hashes for token ${m.token} do not answer the request`);
        const bitmap = new Uint8Array(Math.ceil(counts[s] / 8));
        for (let j = 0; j < counts[s]; j++) {
          const i = firsts[s] + j;
          if (equalBytes(list.hashes.subarray(i * H, (i + 1) * H), m.hashes.subarray(j * H, (j + 1) * H))) {
            bitmap[j >> 3] |= 1 << (j & 7);
            list.marks[i] = 1;
          }
        }
        failed.push({ token: s, bitmap });
      }
      failed.sort((a, b) => a.token - b.token);
    }
    failedTokens += failed.length;
    if (km) {
      for (let k = t0; k < te; k += BATCH) {
        const j = Math.min(te, k + BATCH);
        await conn.send({ type: Msg.Copies, first: Uint32Array.from(firsts.slice(k, j)), count: Uint32Array.from(counts.slice(k, j)), basisFirst: Uint32Array.from(basisFirsts.slice(k, j)) });
      }
    }
    if (tokensDone && end === list.count) root = runHash(algo, list.hashes, 0, list.count);
    await conn.send({ type: Msg.Verdict, upTo: end, root, failed });
    upTo = end;
  };

  // The next Delta message: the uncovered chunks from `cursor` on, below `upTo`, up to maxMsg
  // bytes (at least one chunk), read in one go per run into one buffer, reused from message to
  // message (the message is encoded, a copy, before `send` resolves).
  let scratch: Uint8Array | null = null;
  const nextDelta = async () => {
    const indices: number[] = [];
    const chunks: (Uint8Array | Piece[])[] = [];
    let bytes = 0;
    while (cursor < upTo) {
      if (list.marks[cursor]) {
        cursor++;
        continue;
      }
      let j = cursor;
      while (j < upTo && !list.marks[j] && (bytes + list.offsets[j + 1] - list.offsets[cursor] <= maxMsg || (j === cursor && bytes === 0))) j++;
      if (j === cursor) break; // this message is full
      const length = list.offsets[j] - list.offsets[cursor];
      if (!scratch || scratch.length < bytes + length) {
        if (bytes) break; // (a single chunk above maxMsg goes alone)
        if (scratch) giveBuffers([scratch]);
        scratch = takeBuffer(Math.max(maxMsg, length));
      }
      const run = await source.read(list.offsets[cursor], length, scratch.subarray(bytes));
      if (run.length !== length) throw new Error('the file changed size while syncing');
      const ends: number[] = [];
      for (let k = cursor; k < j; k++) {
        indices.push(k);
        ends.push(list.offsets[k + 1] - list.offsets[cursor]);
      }
      if (hints.count) {
        // copy what the receiver listed of its basis instead of sending it (refine.ts)
        const refined = hints.refine(run, ends);
        chunks.push(...refined.chunks);
        refinedBytes += refined.copied;
        literalBytes -= refined.copied;
      } else for (let k = 0; k < ends.length; k++) chunks.push(run.subarray(k ? ends[k - 1] : 0, ends[k]));
      bytes += length;
      cursor = j;
    }
    if (indices.length) await conn.send({ type: Msg.Delta, indices: Uint32Array.from(indices), chunks });
    literalBytes += bytes;
  };

  // The next part is asked for ahead and taken when it is there: a slow read of the file must
  // not hold up the Delta Bytes of what is already matched.
  const parts = target.parts[Symbol.asyncIterator]();
  let asked: Promise<void> | null = null;
  let got: IteratorResult<ListPart> | null = null;
  // Waits for a signal (a part, Match Tokens), or at most `ms` (room in the socket).
  const idle = (ms?: number) =>
    new Promise<void>((r) => {
      wake = r;
      if (ms) setTimeout(signal, ms);
    });
  try {
    for (;;) {
      if (failure) throw failure;
      if (tokensDone && !resumed) {
        resumed = true;
        // the receiver kept these from an interrupted session (no Verdict was sent: every
        // Tokens upTo was 0)
        list.marks.fill(1, 0, resumeFrom);
        upTo = Math.max(upTo, resumeFrom);
        cursor = Math.max(cursor, resumeFrom);
      }
      while (cursor < upTo && list.marks[cursor]) cursor++;
      // 1. Delta Bytes, while the socket takes them
      if (cursor < upTo && conn.hasRoom()) {
        await nextDelta();
        continue;
      }
      if (cursor === upTo && root) break;
      if (cursor === upTo) {
        // 2. a Verdict for the next part declared final and hashed, up to the start of a
        // token that goes on beyond it (the whole list declared final before Tokens End: the
        // last Verdict, with the root, comes once it is in; a large failed token, split after
        // Tokens End)
        let end = Math.min(frontier, list.hashed);
        for (let k = t; k < firsts.length && firsts[k] < end; k++) if (firsts[k] + counts[k] > end) end = firsts[k];
        const wholeBeforeEnd = !tokensDone && listDone && end === list.count;
        if (!tokensDone) for (let k = t; k < firsts.length && firsts[k] < end; k++) if (splittable(k) && !confirmed(k)) end = firsts[k];
        if ((end > upTo && !wholeBeforeEnd) || (tokensDone && !root && end === list.count)) {
          await judge(end);
          continue;
        }
      }
      // 3. the next part of the Checksum List, or of its strong hashes; it does not wait for
      // the send buffer to drain (conn.send's `wait`): it is small, and the Match Tokens
      // depend on it
      if (!partsDone) {
        const r = got as IteratorResult<ListPart> | null;
        got = null;
        if (r?.done) {
          partsDone = true;
          if (list.hashed !== list.count) throw new Error(`strong hashes for ${list.hashed} of ${list.count} chunks`);
        } else if (r) {
          const p = r.value;
          list.append(p.lengths, p.fastfps, p.hashes);
          if (km) {
            addKnown(km.feed(list.lengths, list.hashes, list.hashed));
            frontier = km.frontier;
          }
          for (let i = list.count - p.lengths.length; i < list.count; i += BATCH) {
            const j = Math.min(list.count, i + BATCH);
            await conn.send({ type: Msg.Checksums, fastfps: list.fastfps.subarray(i, j), lengths: list.lengths.subarray(i, j) }, { wait: false });
          }
        }
        // the list ends where its chunks cover the file, before the last hashes are in
        if (!listDone && (list.size >= target.size || partsDone)) {
          if (list.size !== target.size) throw new Error('the file changed size while syncing');
          listDone = true;
          await conn.send({ type: Msg.ChecksumsEnd, count: list.count, size: target.size }, { wait: false });
          opts.onListSent?.();
        }
        if (km && partsDone && !tokensDone) {
          // every chunk is hashed and fed by now: the last run closes
          addKnown(km.end());
          frontier = list.count;
          tokensDone = true;
        }
        // asked for only now: taking the next part may hash this one's chunks (chunkParts)
        if (!partsDone)
          asked ??= parts.next().then(
            (x) => {
              got = x;
              asked = null;
              signal();
            },
            (e) => {
              failure ??= e;
              signal();
            },
          );
        if (!r) await idle(cursor < upTo ? 2 : undefined);
        continue;
      }
      // 4. wait for room in the socket, or for Match Tokens
      await idle(cursor < upTo ? 2 : undefined);
    }
    await phase2;
  } finally {
    // stops the chunking and frees its buffers (after a read still running, if one is)
    if (!partsDone) void parts.return?.(undefined)?.catch(() => {});
    if (scratch) giveBuffers([scratch]); // every read into it was awaited
  }
  opts.onDeltaSent?.();

  const result = await conn.expect(Msg.Result);
  if (!equalBytes(result.root, root!) || result.size !== target.size) {
    throw new ProtocolError(ErrorCode.VerifyFailed, 'the receiver reports a different file than the one sent');
  }
  const resumedBytes = list.offsets[resumeFrom];
  return { result, matchedBytes: target.size - literalBytes - resumedBytes, refinedBytes, literalBytes, resumedBytes, chunks: list.count, tokens: firsts.length, failedTokens, lengths: list.lengths.subarray(0, list.count), hashes: list.hashes.subarray(0, list.count * H) };
}

// ---------------------------------------------------------------------------------------------
// Receiver

/** Where the receiver writes the rebuilt target. */
export interface Sink {
  /** Appends bytes: a view of a buffer the receiver reuses once the promise resolves. */
  write(bytes: Uint8Array): Promise<void>;
  /**
   * Optional: appends `length` bytes of `from` at `offset` (a stretch of the basis) without
   * the receiver reading them, e.g. by reference. A sink offers this only where the basis'
   * bytes are known to match its chunk index (the server's stored versions, verified when
   * they were written): the receiver then takes the copied chunks' strong hashes from the
   * basis index instead of hashing them again, so its work follows the size of the change.
   */
  copy?(from: Source, offset: number, length: number): Promise<void>;
  /** Called once the target is verified; returns the version number it was stored as. */
  commit(index: ChunkIndex): Promise<number>;
  /** Called on any failure: nothing of the target may remain visible. */
  abort(): Promise<void>;
  /** Optional: called instead of abort when the connection is lost, with chunks [0, held)
   *  written, so that a new session for the same target can resume (see `SinkFor`). */
  suspend?(held: Held): Promise<void>;
}

/** What an interrupted receiver kept: the first `count` chunks, written, and their hashes. */
export interface Held {
  /** the Checksum List's digest (see `SinkFor`) */
  digest: Uint8Array;
  count: number;
  hashes: Uint8Array;
}

/** Opens the sink for a target. With `digest` (a strong hash of the whole Checksum List,
 *  lengths and FastFps), a suspended earlier session with the same list may be resumed:
 *  `held` is what it already wrote into that sink; the root check at the end covers those
 *  chunks too. Without (the list is still arriving), the sink is a new one. */
export type SinkFor = (target: { digest: Uint8Array | null }) => Promise<{ sink: Sink; held?: Held }>;

export interface ReceiverLimits {
  maxFileSize: number;
  maxChunks: number;
}

export type Phase = 'checksums' | 'tokens' | 'delta';

export interface ReceiverOptions {
  limits: ReceiverLimits;
  /** the size Hello announced, which the Checksum List must add up to */
  expectedSize?: number;
  /** match only once the whole Checksum List is in: for a sink that may resume an interrupted
   *  session, which its digest decides (a basis chosen from the list implies it) */
  wholeList?: boolean;
  /** fills the Result's timing and wire fields */
  resultExtra?: () => Pick<Result, 'micros' | 'wireIn' | 'wireOut'>;
  /** called as each phase starts (the server times phases) */
  onPhase?: (p: Phase) => void;
  /** finer chunk sizes to refine the basis stretches no Match Token covers with (Basis
   *  Checksums, refine.ts); absent: no refinement */
  refine?: FineParams;
  /** at most this many basis bytes are refined per session (default MAX_REFINE_BYTES) */
  maxRefineBytes?: number;
  /** the sender holds the basis' chunk index (Hello's known version, which `basis` must be):
   *  it sends its own Match Tokens as Copies, each before the Verdict that judges it, and the
   *  receiver sends none, no Basis Checksums and no Tokens End (docs/protocol.md §3, "A known
   *  basis") */
  known?: boolean;
  /** told the bytes the session is about to hold (its Checksum List as it grows, the basis
   *  bytes refinement keeps) before they are allocated; throws to refuse */
  reserve?: (bytes: number) => void;
}

export interface ReceiveOutcome {
  index: ChunkIndex;
  version: number;
  matchedBytes: number;
  literalBytes: number;
  tokens: number;
  /** chunks an interrupted earlier session had already written */
  resumedChunks: number;
  /** of matchedBytes, those refined chunks copied */
  refinedBytes: number;
  /** basis bytes listed in Basis Checksums */
  refineListed: number;
}

/** The basis: its chunk index and its bytes. */
export interface Basis {
  index: ChunkIndex;
  source: Source;
}

/**
 * Runs the receiver's side: takes the Checksum List of a target chunked with `params`/`algo`,
 * matches it against the basis (null: none, everything is sent; a function: chosen once the
 * whole list is known), rebuilds into the sink, verifies the root and commits.
 *
 * With a basis known up front (and not `wholeList`), the list is matched as it arrives: each
 * Checksums message is answered with the Match Tokens it closed and the chunk below which the
 * matching is final, and the Verdicts and Delta Bytes for that part come while the rest of the
 * list is still on its way. One loop reads every message in order; the rebuild asks for the
 * next Verdict or Delta, and the Checksums that come first are matched on the way.
 */
export async function receiveTarget(
  conn: Conn,
  params: ChunkParams,
  algo: number,
  basisOrChoice: Basis | null | ((target: WeakList) => Promise<Basis | null>),
  sinkFor: SinkFor,
  opts: ReceiverOptions,
): Promise<ReceiveOutcome> {
  const H = hashLength(algo);
  const { limits, expectedSize } = opts;
  const known = !!opts.known;
  const streamed = typeof basisOrChoice !== 'function' && !opts.wholeList;
  if (known && !(streamed && basisOrChoice)) throw new Error('a known basis is given up front, and the list matched as it arrives');
  // the target's chunks as they arrive; marks: the basis chunk each copies, -1 for a literal
  // sized once from Hello's size: FastCDC's chunks average a little above `avg` (~1.2× on random
  // bytes), so the list rarely grows; a list may not exceed that size (Inconsistent)
  const list = new GrowingList(H, -1, opts.reserve, expectedSize ? Math.min(limits.maxChunks, Math.ceil(expectedSize / params.avg)) : 0);
  let ended = false; // ChecksumsEnd is in: list.count is the chunk count
  let basis: Basis | null = streamed ? (basisOrChoice as Basis | null) : null;
  const matcher = streamed && basis && !known ? new Matcher(basis.index) : null;
  const runs: Run[] = []; // Match Tokens, all sent
  let frontier = 0; // the receiver's matching is final below this chunk (sent)
  let tokensEnded = false;
  let sink: Sink | null = null;
  let resumeFrom = 0;
  let written = 0; // chunks [0, written) are in the sink
  let i = 0; // the rebuild's position: chunks [0, i) are written
  let upTo = 0; // chunks [0, upTo) are judged
  // [basis stretches, literal runs]: one buffer each, from the read-buffer pool (a fresh
  // multi-MiB allocation per stretch or per session drove full GCs)
  const scratch: Uint8Array[] = [];
  let basisOffsets: Float64Array | null = null;

  // Refinement (refine.ts): before the Match Tokens that make a part final, Basis Checksums of
  // the basis stretch between each two runs of that part, cut finer. A stretch much longer
  // than the target chunks it faces (a cut) is listed only at both ends.
  const fine = opts.refine;
  let refineLeft = opts.maxRefineBytes ?? MAX_REFINE_BYTES;
  let refineListed = 0;
  let listRun = 0; // the first run whose gap before it is not listed yet
  let listedTo = 0; // target chunks below it are listed or covered by runs
  let prevEnd = 0; // basis offset where the run before `listedTo` ends (-1: unknown)
  let copies: BasisCopies | null = null; // the basis bytes refined chunks copy
  let keptReserved = 0; // of the listed bytes BasisCopies keeps (at most KEEP_LISTED)
  const copiesOf = () => {
    if (!copies) {
      opts.reserve?.(COPY_WINDOW);
      copies = new BasisCopies((o, n, into) => basis!.source.read(o, n, into), basis!.source.size, (scratch[3] ??= takeBuffer(COPY_WINDOW)));
    }
    return copies;
  };
  // The buffer basis stretches are read into, as large as the largest read so far (a small
  // edit reads a few KiB: a 4 MiB buffer per session cost an allocation per sync under load).
  const readBuffer = (n: number) => {
    if (!scratch[2] || scratch[2].length < n) {
      if (scratch[2]) giveBuffers([scratch[2]]);
      scratch[2] = takeBuffer(n);
    }
    return scratch[2];
  };
  // Basis stretches to list, read together when they lie close (each read of a version costs
  // one file read per extent it crosses).
  const stretches: [number, number][] = [];
  const listStretches = async () => {
    for (let s = 0; s < stretches.length && refineLeft > 0; ) {
      // a hole between two stretches is read along when it is no longer than what the span
      // lists so far (16 KiB at least): fewer reads, at most twice the bytes
      let e = s + 1;
      for (let listed = stretches[s][1] - stretches[s][0]; e < stretches.length; e++) {
        const [p, q] = stretches[e];
        const hole = p - stretches[e - 1][1];
        if (hole < 0 || hole > Math.max(16 << 10, listed) || q - stretches[s][0] > COPY_STRETCH) break;
        listed += q - p;
      }
      const from = stretches[s][0];
      const length = stretches[e - 1][1] - from;
      const span = length <= COPY_STRETCH ? await basis!.source.read(from, length, readBuffer(length)) : null;
      if (span && span.length !== length) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
      for (; s < e && refineLeft > 0; s++) {
        const [p, q] = stretches[s];
        for (let o = p; o < q && refineLeft > 0; ) {
          const len = Math.min(COPY_STRETCH, q - o, refineLeft);
          const bytes = span ? span.subarray(o - from, o - from + len) : await basis!.source.read(o, len, readBuffer(len));
          if (bytes.length !== len) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
          const { lengths, prefixes } = fineCut(bytes, fine!, algo);
          const keeps = Math.min(bytes.length, KEEP_LISTED - keptReserved);
          if (keeps > 0) {
            opts.reserve?.(keeps);
            keptReserved += keeps;
          }
          copiesOf().keep(o, bytes);
          for (let k = 0, off = o; k < lengths.length; k += BATCH) {
            const end = Math.min(lengths.length, k + BATCH);
            await conn.send({ type: Msg.BasisChecksums, offset: off, fine: fine!, lengths: lengths.subarray(k, end), prefixes: prefixes.subarray(k * PREFIX, end * PREFIX) });
            for (let t = k; t < end; t++) off += lengths[t];
          }
          refineListed += len;
          refineLeft -= len;
          o += len;
        }
      }
    }
    stretches.length = 0;
  };
  // The gap of target chunks [a, b) faces basis bytes [x, y). Its ends, as many basis bytes
  // as its first and last target chunks hold, are always listed; its middle while middles pay.
  const middles = new MiddleYield();
  const listGap = (a: number, b: number, x: number, y: number) => {
    if (x < 0 || y <= x) return; // unknown, or runs out of order
    const e1 = list.lengths[a];
    const e2 = list.lengths[b - 1];
    if (y - x <= e1 + e2) {
      stretches.push([x, y]);
      return;
    }
    if (!middles.listMiddle()) {
      stretches.push([x, x + e1], [y - e2, y]);
      return;
    }
    const cap = 2 * (list.offsets[b] - list.offsets[a]) + (64 << 10);
    if (y - x <= cap) stretches.push([x, y]);
    else stretches.push([x, x + cap / 2], [y - cap / 2, y]);
    middles.listedMiddle(a, b, x + e1, y - e2, Math.min(y - x, cap) - e1 - e2);
  };
  // Lists the gaps before the runs found so far and, once the list has ended, the last one;
  // returns how far the Match Tokens may declare final: not into a gap whose end is unknown.
  const listGaps = async (final: number, atEnd: boolean): Promise<number> => {
    if (!fine || !basis) return final;
    basisOffsets ??= offsetsOf(basis.index.lengths);
    for (; listRun < runs.length; listRun++) {
      const r = runs[listRun];
      if (r.first > listedTo) listGap(listedTo, r.first, prevEnd, basisOffsets[r.basisFirst]);
      listedTo = r.first + r.count;
      prevEnd = basisOffsets[r.basisFirst + r.count];
    }
    if (atEnd && list.count > listedTo) listGap(listedTo, list.count, prevEnd, basisOffsets[basis.index.lengths.length]);
    await listStretches();
    if (!atEnd) return Math.min(final, listedTo);
    listedTo = list.count;
    return final;
  };

  // Sends the runs not sent yet as Match Tokens, then says the matching is final below `final`.
  const sendTokens = async (from: number, final: number) => {
    for (let t = from; t < runs.length || final > frontier; ) {
      const part = runs.slice(t, t + BATCH);
      t += part.length;
      const upToNow = t === runs.length ? final : frontier;
      const hashes = new Uint8Array(part.length * H);
      part.forEach((r, k) => hashes.set(runHash(algo, basis!.index.hashes, r.basisFirst, r.count), k * H));
      await conn.send({ type: Msg.Tokens, upTo: upToNow, first: Uint32Array.from(part, (r) => r.first), count: Uint32Array.from(part, (r) => r.count), hashes });
      frontier = upToNow;
    }
  };
  const addRuns = (closed: Run[]) => {
    for (const r of closed) {
      runs.push(r);
      for (let k = 0; k < r.count; k++) list.marks[r.first + k] = r.basisFirst + k;
    }
  };

  // Phase 1 and 2: a slice of the Checksum List, matched at once when streamed.
  const onChecksums = async (m: Checksums) => {
    checkChecksums(m, params, list.count, limits);
    // Every chunk but the list's last is at least `min` long (FastCDC): this message's last
    // chunk is checked when the next one comes.
    const n = m.lengths.length;
    if (list.count > 0 && list.lengths[list.count - 1] < params.min) throw bad(`chunk ${list.count - 1} is ${list.lengths[list.count - 1]} bytes, below min ${params.min}`);
    for (let k = 0; k + 1 < n; k++) if (m.lengths[k] < params.min) throw bad(`chunk ${list.count + k} is ${m.lengths[k]} bytes, below min ${params.min}`);
    let size = list.size;
    for (const l of m.lengths) size += l;
    if (size > limits.maxFileSize) throw new ProtocolError(ErrorCode.LimitExceeded, `file larger than the limit of ${limits.maxFileSize} bytes`);
    if (expectedSize !== undefined && size > expectedSize) throw bad(`Hello announced ${expectedSize} bytes, the Checksum List has more`);
    const from = runs.length;
    list.append(m.lengths, m.fastfps);
    if (known) frontier = list.count; // a Verdict may judge every chunk listed
    if (!streamed || known) return;
    if (matcher) addRuns(matcher.feed(list.weak(), list.count));
    await sendTokens(from, await listGaps(matcher ? matcher.frontier : list.count, false));
  };
  const onChecksumsEnd = async (m: ChecksumsEnd) => {
    if (m.count !== list.count || m.size !== list.size) {
      throw bad(`Checksum List End says ${m.count} chunks / ${m.size} bytes, the list has ${list.count} / ${list.size}`);
    }
    if (expectedSize !== undefined && list.size !== expectedSize) throw bad(`Hello announced ${expectedSize} bytes, the Checksum List has ${list.size}`);
    ended = true;
    opts.onPhase?.('tokens');
    if (known) {
      // the sender's last Copies and Verdicts come next
      frontier = list.count;
      tokensEnded = true;
      opts.onPhase?.('delta');
      return;
    }
    const target = list.weak();
    const from = runs.length;
    if (streamed) {
      if (matcher) addRuns(matcher.end());
    } else {
      basis = typeof basisOrChoice === 'function' ? await basisOrChoice(target) : basisOrChoice;
      const opened = await sinkFor({ digest: listDigest(algo, target) });
      sink = opened.sink;
      if (opened.held && opened.held.count <= list.count) {
        resumeFrom = opened.held.count;
        list.hashes.set(opened.held.hashes.subarray(0, resumeFrom * H));
        written = i = upTo = listedTo = resumeFrom;
        if (resumeFrom) prevEnd = -1;
      }
      // none for chunks the sink already holds
      for (const r of basis ? matchRuns(target, basis.index) : []) {
        if (r.first + r.count <= resumeFrom) continue;
        const skip = Math.max(0, resumeFrom - r.first);
        addRuns([{ first: r.first + skip, count: r.count - skip, basisFirst: r.basisFirst + skip }]);
      }
    }
    await listGaps(list.count, true);
    await sendTokens(from, streamed ? list.count : 0);
    await conn.send({ type: Msg.TokensEnd, count: runs.length, resumeFrom });
    frontier = list.count;
    tokensEnded = true;
    opts.onPhase?.('delta');
  };
  // A known basis: the sender's own Match Tokens, checked against the basis index (the root
  // check at the end covers the bytes; lengths and FastFps must agree here, as a weak match's do).
  const onCopies = (m: Copies) => {
    const b = basis!.index;
    for (let k = 0; k < m.first.length; k++) {
      const first = m.first[k];
      const count = m.count[k];
      const from = m.basisFirst[k];
      const prev = runs[runs.length - 1];
      if (count === 0 || (prev && first < prev.first + prev.count) || first < upTo || first + count > list.count || from + count > b.lengths.length) {
        throw bad(`copy ${runs.length} [${first}, +${count}) from basis chunk ${from} is empty, overlaps, lies below the Verdict's ${upTo}, or beyond the ${list.count} chunks listed or the basis' ${b.lengths.length}`);
      }
      for (let j = 0; j < count; j++) {
        if (list.lengths[first + j] !== b.lengths[from + j] || list.fastfps[first + j] !== b.fastfps[from + j]) {
          throw bad(`copy ${runs.length}: target chunk ${first + j} differs from basis chunk ${from + j} in length or FastFp`);
        }
      }
      addRuns([{ first, count, basisFirst: from }]);
    }
  };
  // The next message of one of `types`; Checksums (and with a known basis Copies) that come
  // first are taken in on the way.
  const next = async <T extends Message['type']>(...types: T[]): Promise<Extract<Message, { type: T }>> => {
    for (;;) {
      const also: Message['type'][] = ended ? [] : [Msg.Checksums, Msg.ChecksumsEnd];
      if (known) also.push(Msg.Copies);
      const m: Message = await conn.expect<Message['type']>(...also, ...types);
      if (m.type === Msg.Checksums) await onChecksums(m as Checksums);
      else if (m.type === Msg.ChecksumsEnd) await onChecksumsEnd(m as ChecksumsEnd);
      else if (m.type === Msg.Copies) onCopies(m as Copies);
      else return m as Extract<Message, { type: T }>;
    }
  };

  try {
    opts.onPhase?.('checksums');
    if (streamed) sink = (await sinkFor({ digest: null })).sink;

    // Phase 3: Verdicts, each judging the tokens below its `upTo` (after an optional split
    // round), each followed by the Delta Bytes below it; the last one carries the root.
    let judged = 0; // tokens [0, judged) are judged
    let splitFrom = 0; // tokens below this may not be asked for again
    let root: Uint8Array | null = null;
    const verdict = async () => {
      let m = await next(Msg.SplitRequest, Msg.Verdict);
      if (m.type === Msg.SplitRequest) {
        if (!tokensEnded) throw bad('a Split Request comes after Tokens End');
        for (const t of m.tokens) {
          if (t < Math.max(splitFrom, judged) || t >= runs.length) throw bad(`split request for token ${t} out of order or range`);
          splitFrom = t + 1;
          const r = runs[t];
          await conn.send({ type: Msg.SplitHashes, token: t, hashes: basis!.index.hashes.subarray(r.basisFirst * H, (r.basisFirst + r.count) * H) });
        }
        m = await next(Msg.Verdict);
      }
      // the last Verdict (root, upTo = count, after TokensEnd) may repeat the upTo before it
      if (m.root && !(tokensEnded && m.upTo === list.count)) throw bad('the root comes with the last verdict, and only there');
      if (m.upTo > frontier || (m.upTo <= upTo && !m.root)) throw bad(`verdict up to chunk ${m.upTo} does not advance from ${upTo} or goes beyond the Match Tokens' ${frontier}`);
      let te = judged;
      while (te < runs.length && runs[te].first + runs[te].count <= m.upTo) te++;
      if (te < runs.length && runs[te].first < m.upTo) throw bad(`verdict up to chunk ${m.upTo} ends inside token ${te}`);
      let prev = judged - 1;
      for (const f of m.failed) {
        if (f.token <= prev || f.token >= te) throw bad(`verdict for token ${f.token} out of order or range`);
        prev = f.token;
        const r = runs[f.token];
        if (f.bitmap && f.bitmap.length !== Math.ceil(r.count / 8)) throw bad(`verdict bitmap for token ${f.token} has the wrong length`);
        for (let k = 0; k < r.count; k++) {
          if (!f.bitmap || !(f.bitmap[k >> 3] & (1 << (k & 7)))) list.marks[r.first + k] = -1;
        }
      }
      judged = te;
      upTo = m.upTo;
      if (m.root) root = m.root.slice();
    };

    // Rebuild: in target order, copy basis chunks or take the next literal; hash what we write
    // (copies into a sink that can reference them take their hashes from the basis index).
    let literal: Delta | null = null;
    let li = 0;
    let matchedBytes = 0;
    let literalBytes = 0;
    let refinedBytes = 0;
    // Writes target chunks [i, j), whose bytes are `bytes`, hashing them in one wasm call.
    const put = async (i: number, j: number, bytes: Uint8Array) => {
      list.hashes.set(hash_chunks(algo, bytes, list.lengths.subarray(i, j)), i * H);
      await sink!.write(bytes);
      written = j;
    };
    for (;;) {
      if (i >= upTo) {
        if (literal && li !== literal.indices.length) throw bad(`Delta Bytes carry chunk ${literal.indices[li]}, not below the verdict's ${upTo}`);
        if (root && i === list.count) break;
        await verdict();
        continue;
      }
      const marks = list.marks;
      if (marks[i] >= 0) {
        // Copy the longest stretch that is contiguous in the basis (read: up to 4 MiB at once).
        basisOffsets ??= offsetsOf(basis!.index.lengths);
        const byReference = !!sink!.copy;
        let j = i + 1;
        while (j < upTo && marks[j] === marks[j - 1] + 1 && (byReference || basisOffsets[marks[j] + 1] - basisOffsets[marks[i]] <= COPY_STRETCH)) j++;
        const from = basisOffsets[marks[i]];
        const length = basisOffsets[marks[j - 1] + 1] - from;
        // Basis chunks and target chunks agree in length (the weak match includes it).
        if (from + length > basis!.source.size) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
        if (byReference) {
          await sink!.copy!(basis!.source, from, length);
          list.hashes.set(basis!.index.hashes.subarray(marks[i] * H, (marks[j - 1] + 1) * H), i * H);
          written = j;
        } else {
          const bytes = await basis!.source.read(from, length, (scratch[0] ??= takeBuffer(COPY_STRETCH)));
          if (bytes.length !== length) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
          await put(i, j, bytes);
        }
        matchedBytes += length;
        i = j;
        continue;
      }
      if (!literal || li === literal.indices.length) {
        literal = await next(Msg.Delta);
        li = 0;
        if (literal.indices.length === 0) throw bad('empty Delta message');
        middles.reached(i);
      }
      // Take the consecutive literal chunks this message holds (up to 1 MiB) and write them as
      // one run: one wasm call hashes them four at a time (blake3_lanes.rs). A refined chunk is
      // put together from its pieces: literal bytes and copies of the basis.
      const from = li;
      let j = i;
      let bytes = 0;
      let whole = true; // every chunk is plain bytes
      while (li < literal.indices.length && literal.indices[li] === j && j < upTo && list.marks[j] < 0) {
        const c = literal.chunks[li];
        const length = chunkLength(c);
        if (j > i && bytes + length > DELTA_MESSAGE_BYTES) break;
        if (length !== list.lengths[j]) throw bad(`Delta chunk ${j} is ${length} bytes, the Checksum List says ${list.lengths[j]}`);
        if (!(c instanceof Uint8Array)) whole = false;
        bytes += length;
        li++;
        j++;
      }
      if (j === i) throw bad(`Delta Bytes sent chunk ${literal.indices[li]}, expected chunk ${i}`);
      let run = literal.chunks[from] as Uint8Array;
      if (j - i > 1 || !whole) {
        run = bytes <= DELTA_MESSAGE_BYTES ? (scratch[1] ??= takeBuffer(DELTA_MESSAGE_BYTES)).subarray(0, bytes) : new Uint8Array(bytes);
        let o = 0;
        for (let k = from; k < li; k++) {
          const c = literal.chunks[k];
          for (const p of c instanceof Uint8Array ? [c] : c) {
            if (p instanceof Uint8Array) {
              run.set(p, o);
              literalBytes += p.length;
            } else {
              if (!basis) throw bad('a Delta chunk copies basis bytes, and there is no basis');
              run.set(await copiesOf().copy(p), o);
              middles.copy(literal.indices[k], p.offset, p.length);
              refinedBytes += p.length;
            }
            o += p.length;
          }
        }
      } else literalBytes += bytes;
      await put(i, j, run);
      i = j;
    }
    const n = list.count;
    const hashes = list.hashes.slice(0, n * H);
    const index: ChunkIndex = { params, algo, size: list.size, lengths: list.lengths.slice(0, n), fastfps: list.fastfps.slice(0, n), hashes, root: runHash(algo, hashes, 0, n) };
    if (!equalBytes(index.root, root!)) {
      throw new ProtocolError(ErrorCode.VerifyFailed, 'the rebuilt file does not match the sender\'s root hash; nothing was stored');
    }
    const version = await sink!.commit(index);
    const extra = opts.resultExtra?.() ?? { micros: 0, wireIn: 0, wireOut: 0 };
    await conn.send({ type: Msg.Result, version, size: index.size, root: index.root, ...extra });
    return { index, version, matchedBytes: matchedBytes + refinedBytes, refinedBytes, refineListed, literalBytes, tokens: runs.length, resumedChunks: resumeFrom };
  } catch (e) {
    // An interrupted upload can be resumed once its whole list is known (its digest).
    if (sink && e instanceof ConnectionLost && sink.suspend && written > 0 && ended) {
      await sink.suspend({ digest: listDigest(algo, list.weak()), count: written, hashes: list.hashes.slice(0, written * H) });
    } else {
      await sink?.abort();
    }
    throw e;
  } finally {
    giveBuffers(scratch.filter(Boolean)); // no read into them is running: every read was awaited
  }
}

/** The strong hash of a Checksum List (lengths, then FastFps): what a resumed session must match. */
function listDigest(algo: number, list: { lengths: Uint32Array; fastfps: Uint32Array }): Uint8Array {
  const hasher = new StrongHasher(algo);
  try {
    for (const a of [list.lengths, list.fastfps]) hasher.update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    return hasher.digest();
  } finally {
    hasher.free();
  }
}

function checkChecksums(m: Checksums, params: ChunkParams, before: number, limits: ReceiverLimits) {
  if (m.lengths.length === 0) throw bad('empty Checksums message');
  if (before + m.lengths.length > limits.maxChunks) {
    throw new ProtocolError(ErrorCode.LimitExceeded, `more than ${limits.maxChunks} chunks`);
  }
  for (const l of m.lengths) {
    if (l === 0 || l > params.max) throw bad(`chunk length ${l} outside 1..${params.max}`);
  }
}
