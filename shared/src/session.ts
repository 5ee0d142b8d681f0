/**
 * The three phases of a Dsync session (paper §IV-D, Fig. 8), written once for both
 * directions. The *sender* holds the target (the new file) and the *receiver* the basis (the
 * old file): on a push the client sends and the server receives; on a pull (delta download)
 * it is the other way round.
 *
 *   Phase 1  sender -> receiver  Checksum List: FastFp + length per target chunk
 *   Phase 2  receiver -> sender  Match Tokens: merged weak-matched runs with their run hash
 *   Phase 3  sender -> receiver  per slice of the target it has hashed: [Split Request <->
 *                                Split Hashes], Verdict, Delta Bytes; the last Verdict
 *                                carries the root
 *            receiver            rebuilds target = basis + delta in order, verifies the root,
 *                                commits
 *            receiver -> sender  Result
 */
import { type ChecksumList, type ChunkIndex, type Source, giveBuffers, offsetsOf, runHash, takeBuffer } from './chunk-index.ts';
import type { Checksums, Delta, Failed, Result, Tokens } from './codec.ts';
import { type Conn, ConnectionLost } from './conn.ts';
import { type Run, matchRuns } from './matcher.ts';
import { type ChunkParams, ErrorCode, Msg, ProtocolError, hashLength } from './protocol.ts';
import { StrongHasher, hash_chunks } from '../../wasm/pkg/dsync_wasm.js';

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
// Sender

export interface SenderOptions {
  splitThreshold?: number;
  deltaMessageBytes?: number;
  /** bytes of the target read and hashed per Verdict (default HASH_SLICE) */
  hashSlice?: number;
  /** awaited after the Checksum List is sent, before Match Tokens are read */
  onChecksumsSent?: () => Promise<void> | void;
  onTokens?: () => void;
  onDeltaSent?: () => void;
}

export interface SendOutcome {
  result: Result;
  /** bytes of the target covered by confirmed Match Tokens / sent as Delta Bytes / already
   *  held by the receiver from an interrupted session */
  matchedBytes: number;
  literalBytes: number;
  resumedBytes: number;
  tokens: number;
  failedTokens: number;
}

/** Bytes the sender reads and hashes before it judges the tokens below them (one Verdict). */
export const HASH_SLICE = 8 << 20;

/**
 * Runs the sender's side of Phases 1–3 for `target` (whose bytes `source` reads). Without
 * strong hashes in `target` (a client's upload), the sender hashes its chunks during Phase 3,
 * a slice at a time, and judges and sends each slice while the next one is read, so the Delta
 * Bytes flow while the rest of the file is still being hashed; with them (a stored version),
 * one Verdict judges every token.
 */
export async function sendTarget(
  conn: Conn,
  algo: number,
  target: ChecksumList & { hashes?: Uint8Array },
  source: Source,
  opts: SenderOptions = {},
): Promise<SendOutcome> {
  const H = hashLength(algo);
  const n = target.lengths.length;
  // Phase 1: the Checksum List.
  for (let i = 0; i < n; i += BATCH) {
    const end = Math.min(n, i + BATCH);
    await conn.send({ type: Msg.Checksums, fastfps: target.fastfps.subarray(i, end), lengths: target.lengths.subarray(i, end) });
  }
  await conn.send({ type: Msg.ChecksumsEnd, count: n, size: target.size });

  // Phase 2, Match Tokens, read while this side starts hashing its file (the round trip and
  // the receiver's matching overlap the first slices).
  const firsts: number[] = [];
  const counts: number[] = [];
  const tokenHashes: Uint8Array[] = [];
  let resumeFrom = 0;
  let phase2Over = false;
  const phase2 = (async () => {
    await opts.onChecksumsSent?.();
    for (;;) {
      const m = await conn.expect(Msg.Tokens, Msg.TokensEnd);
      if (m.type === Msg.TokensEnd) {
        if (m.count !== firsts.length) throw bad(`Tokens End says ${m.count} tokens, received ${firsts.length}`);
        if (m.resumeFrom > n || (firsts.length && firsts[0] < m.resumeFrom)) throw bad(`resume from chunk ${m.resumeFrom} overlaps the tokens or exceeds ${n} chunks`);
        resumeFrom = m.resumeFrom;
        break;
      }
      for (let k = 0; k < m.first.length; k++) {
        const first = m.first[k];
        const count = m.count[k];
        const prevEnd = firsts.length ? firsts[firsts.length - 1] + counts[counts.length - 1] : 0;
        if (count === 0 || first < prevEnd || first + count > n) {
          throw bad(`token ${firsts.length} [${first}, +${count}) is empty, overlaps or lies outside ${n} chunks`);
        }
        firsts.push(first);
        counts.push(count);
        tokenHashes.push(m.hashes.subarray(k * H, (k + 1) * H));
      }
    }
    opts.onTokens?.();
  })().finally(() => (phase2Over = true));
  phase2.catch(() => {}); // awaited below

  // Phase 3, a slice at a time: hash the target's chunks, confirm each token that ends in what
  // is hashed by its run hash (splitting large failed ones), send a Verdict for the chunks
  // below `end`, then the Delta Bytes among them. The last Verdict carries the root.
  const offsets = offsetsOf(target.lengths);
  const hashes = target.hashes ?? new Uint8Array(n * H);
  const covered = new Uint8Array(n);
  const splitThreshold = opts.splitThreshold ?? SPLIT_THRESHOLD;
  const maxMsg = opts.deltaMessageBytes ?? DELTA_MESSAGE_BYTES;
  const sliceBytes = opts.hashSlice ?? HASH_SLICE;
  let literalBytes = 0;
  let failedTokens = 0;

  // Slices of whole chunks, each read in one go into one of two buffers while the other is
  // hashed and sent (a slice is at least one chunk, so it may exceed `sliceBytes`).
  const bufs: Uint8Array[] = [];
  const readSlice = async (from: number, k: number) => {
    let to = from + 1;
    while (to < n && offsets[to + 1] - offsets[from] <= sliceBytes) to++;
    const length = offsets[to] - offsets[from];
    if (!bufs[k] || bufs[k].length < length) {
      if (bufs[k]) giveBuffers([bufs[k]]);
      bufs[k] = takeBuffer(Math.max(length, Math.min(sliceBytes, target.size)));
    }
    const bytes = await source.read(offsets[from], length, bufs[k]);
    if (bytes.length !== length) throw new Error('the file changed size while syncing');
    return { from, to, bytes };
  };
  let hashed = target.hashes ? n : 0; // chunks [0, hashed) have their strong hashes
  let slice: { from: number; to: number; bytes: Uint8Array } | null = null;
  let next = hashed < n ? readSlice(0, 0) : null;
  let reads = 1;
  const hashNext = async () => {
    slice = await next!;
    next = slice.to < n ? readSlice(slice.to, reads++ & 1) : null;
    hashes.set(hash_chunks(algo, slice.bytes, target.lengths.subarray(slice.from, slice.to)), slice.from * H);
    hashed = slice.to;
  };
  let upTo = 0; // chunks below upTo are judged and sent
  let t = 0; // the first token not judged yet
  let root: Uint8Array | null = null; // sent with the last Verdict
  try {
    while (!phase2Over && hashed < n) await hashNext();
    await phase2;
    covered.fill(1, 0, resumeFrom); // the receiver kept these from an interrupted session
    upTo = resumeFrom;
    for (;;) {
      // Judge the tokens wholly below `hashed`; a token still open holds `end` at its start.
      let te = t;
      while (te < firsts.length && firsts[te] + counts[te] <= hashed) te++;
      const end = te < firsts.length && firsts[te] < hashed ? firsts[te] : hashed;
      if (end <= upTo && end !== n) {
        await hashNext(); // end < n, so hashed < n
        continue;
      }
      const failed: Failed[] = [];
      const toSplit: number[] = [];
      for (; t < te; t++) {
        if (equalBytes(runHash(algo, hashes, firsts[t], counts[t]), tokenHashes[t])) {
          covered.fill(1, firsts[t], firsts[t] + counts[t]);
        } else if (counts[t] > 1 && offsets[firsts[t] + counts[t]] - offsets[firsts[t]] >= splitThreshold) {
          toSplit.push(t);
        } else {
          failed.push({ token: t, bitmap: null });
        }
      }
      if (toSplit.length) {
        await conn.send({ type: Msg.SplitRequest, tokens: Uint32Array.from(toSplit) });
        for (const s of toSplit) {
          const m = await conn.expect(Msg.SplitHashes);
          if (m.token !== s || m.hashes.length !== counts[s] * H) throw bad(`Split Hashes for token ${m.token} do not answer the request`);
          const bitmap = new Uint8Array(Math.ceil(counts[s] / 8));
          for (let j = 0; j < counts[s]; j++) {
            const i = firsts[s] + j;
            if (equalBytes(hashes.subarray(i * H, (i + 1) * H), m.hashes.subarray(j * H, (j + 1) * H))) {
              bitmap[j >> 3] |= 1 << (j & 7);
              covered[i] = 1;
            }
          }
          failed.push({ token: s, bitmap });
        }
        failed.sort((a, b) => a.token - b.token);
      }
      failedTokens += failed.length;
      if (end === n) root = runHash(algo, hashes, 0, n);
      await conn.send({ type: Msg.Verdict, upTo: end, root, failed });
      literalBytes += await sendDelta(conn, upTo, end, covered, offsets, maxMsg, (i, j) =>
        slice && i >= slice.from && j <= slice.to ? slice.bytes.subarray(offsets[i] - offsets[slice.from], offsets[j] - offsets[slice.from]) : readChunks(source, offsets, i, j),
      );
      upTo = end;
      if (end === n) break;
      await hashNext();
    }
  } finally {
    if (next) next.catch(() => {}); // a read still running after a failure keeps its buffer
    else giveBuffers(bufs);
  }
  opts.onDeltaSent?.();

  const result = await conn.expect(Msg.Result);
  if (!equalBytes(result.root, root!) || result.size !== target.size) {
    throw new ProtocolError(ErrorCode.VerifyFailed, 'the receiver reports a different file than the one sent');
  }
  return { result, matchedBytes: target.size - literalBytes - offsets[resumeFrom], literalBytes, resumedBytes: offsets[resumeFrom], tokens: firsts.length, failedTokens };
}

/** Reads target chunks [i, j) from the source. */
async function readChunks(source: Source, offsets: Float64Array, i: number, j: number): Promise<Uint8Array> {
  const bytes = await source.read(offsets[i], offsets[j] - offsets[i]);
  if (bytes.length !== offsets[j] - offsets[i]) throw new Error('the file changed size while syncing');
  return bytes;
}

/** Sends the chunks of [from, to) that are not covered as Delta Bytes, in order, with one read
 *  per run of up to `maxMsg` bytes; returns their size. */
async function sendDelta(
  conn: Conn,
  from: number,
  to: number,
  covered: Uint8Array,
  offsets: Float64Array,
  maxMsg: number,
  bytesOf: (i: number, j: number) => Uint8Array | Promise<Uint8Array>,
): Promise<number> {
  let sent = 0;
  let batch: { indices: number[]; chunks: Uint8Array[]; bytes: number } = { indices: [], chunks: [], bytes: 0 };
  const flush = async () => {
    if (!batch.indices.length) return;
    await conn.send({ type: Msg.Delta, indices: Uint32Array.from(batch.indices), chunks: batch.chunks });
    batch = { indices: [], chunks: [], bytes: 0 };
  };
  for (let i = from; i < to; ) {
    if (covered[i]) {
      i++;
      continue;
    }
    let j = i;
    while (j < to && !covered[j] && (j === i || offsets[j + 1] - offsets[i] <= maxMsg)) j++;
    const bytes = await bytesOf(i, j);
    for (let k = i; k < j; k++) {
      const c = bytes.subarray(offsets[k] - offsets[i], offsets[k + 1] - offsets[i]);
      if (batch.bytes + c.length > maxMsg) await flush();
      batch.indices.push(k);
      batch.chunks.push(c);
      batch.bytes += c.length;
      sent += c.length;
    }
    i = j;
  }
  // flushed before returning: the chunks may be views of a buffer the caller reuses
  await flush();
  return sent;
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

/** Opens the sink for a target once its Checksum List is known; `digest` is a strong hash of
 *  that list (lengths and FastFps). `held` is what a suspended earlier session with the same
 *  list already wrote into that sink; the root check at the end covers those chunks too. */
export type SinkFor = (target: { digest: Uint8Array; count: number; size: number }) => Promise<{ sink: Sink; held?: Held }>;

export interface ReceiverLimits {
  maxFileSize: number;
  maxChunks: number;
}

export type Phase = 'checksums' | 'tokens' | 'delta';

export interface ReceiverOptions {
  limits: ReceiverLimits;
  /** the size Hello announced, which the Checksum List must add up to */
  expectedSize?: number;
  /** fills the Result's timing and wire fields */
  resultExtra?: () => Pick<Result, 'micros' | 'wireIn' | 'wireOut'>;
  /** called as each phase starts (the server times phases) */
  onPhase?: (p: Phase) => void;
}

export interface ReceiveOutcome {
  index: ChunkIndex;
  version: number;
  matchedBytes: number;
  literalBytes: number;
  tokens: number;
  /** chunks an interrupted earlier session had already written */
  resumedChunks: number;
}

/** The basis: its chunk index and its bytes. */
export interface Basis {
  index: ChunkIndex;
  source: Source;
}

/**
 * Runs the receiver's side: takes the Checksum List of a target chunked with `params`/`algo`,
 * matches it against the basis (null: none, everything is sent; a function: chosen once the
 * Checksum List is known), rebuilds into the sink, verifies the root and commits.
 */
export async function receiveTarget(
  conn: Conn,
  params: ChunkParams,
  algo: number,
  basisOrChoice: Basis | null | ((target: { fastfps: Uint32Array; lengths: Uint32Array }) => Promise<Basis | null>),
  sinkFor: SinkFor,
  opts: ReceiverOptions,
): Promise<ReceiveOutcome> {
  const H = hashLength(algo);
  const { limits, expectedSize } = opts;
  let sink: Sink | null = null;
  let digest: Uint8Array | null = null;
  let hashes: Uint8Array | null = null;
  let written = 0; // chunks [0, written) are in the sink
  // [basis stretches, literal runs]: one buffer each, from the read-buffer pool (a fresh
  // multi-MiB allocation per stretch or per session drove full GCs)
  const scratch: Uint8Array[] = [];
  try {
    opts.onPhase?.('checksums');
    // Phase 1: the Checksum List.
    const fastfps: Uint32Array[] = [];
    const lengths: Uint32Array[] = [];
    let count = 0;
    let size = 0;
    let end;
    for (;;) {
      const m = await conn.expect(Msg.Checksums, Msg.ChecksumsEnd);
      if (m.type === Msg.ChecksumsEnd) {
        end = m;
        break;
      }
      checkChecksums(m, params, count, limits);
      for (const l of m.lengths) size += l;
      if (size > limits.maxFileSize) {
        throw new ProtocolError(ErrorCode.LimitExceeded, `file larger than the limit of ${limits.maxFileSize} bytes`);
      }
      count += m.lengths.length;
      fastfps.push(m.fastfps);
      lengths.push(m.lengths);
    }
    if (end.count !== count || end.size !== size) {
      throw bad(`Checksum List End says ${end.count} chunks / ${end.size} bytes, the list has ${count} / ${size}`);
    }
    if (expectedSize !== undefined && size !== expectedSize) throw bad(`Hello announced ${expectedSize} bytes, the Checksum List has ${size}`);
    const target = { fastfps: concatU32(fastfps, count), lengths: concatU32(lengths, count) };
    const basis = typeof basisOrChoice === 'function' ? await basisOrChoice(target) : basisOrChoice;
    // Every chunk but the last is at least `min` long (FastCDC); catch lists that are not.
    for (let i = 0; i + 1 < count; i++) {
      if (target.lengths[i] < params.min) throw bad(`chunk ${i} is ${target.lengths[i]} bytes, below min ${params.min}`);
    }
    digest = listDigest(algo, target);
    const opened = await sinkFor({ digest, count, size });
    sink = opened.sink;
    hashes = new Uint8Array(count * H);
    const resumeFrom = opened.held && opened.held.count <= count ? opened.held.count : 0;
    if (resumeFrom) hashes.set(opened.held!.hashes.subarray(0, resumeFrom * H));
    written = resumeFrom;

    // Phase 2: match and merge, send Match Tokens (none for chunks the sink already holds).
    opts.onPhase?.('tokens');
    const runs: Run[] = [];
    for (const r of basis ? matchRuns(target, basis.index) : []) {
      if (r.first + r.count <= resumeFrom) continue;
      const skip = Math.max(0, resumeFrom - r.first);
      runs.push({ first: r.first + skip, count: r.count - skip, basisFirst: r.basisFirst + skip });
    }
    for (let t = 0; t < runs.length; t += BATCH) {
      const part = runs.slice(t, t + BATCH);
      const tok: Tokens = {
        type: Msg.Tokens,
        first: Uint32Array.from(part, (r) => r.first),
        count: Uint32Array.from(part, (r) => r.count),
        hashes: new Uint8Array(part.length * H),
      };
      part.forEach((r, k) => tok.hashes.set(runHash(algo, basis!.index.hashes, r.basisFirst, r.count), k * H));
      await conn.send(tok);
    }
    await conn.send({ type: Msg.TokensEnd, count: runs.length, resumeFrom });

    // Phase 3: Verdicts, each judging the tokens below its `upTo` (after an optional split
    // round), each followed by the Delta Bytes below it; the last one carries the root.
    opts.onPhase?.('delta');
    // copyFrom[i] = basis chunk to copy for target chunk i, or -1 for a literal.
    const copyFrom = new Int32Array(count).fill(-1);
    for (const r of runs) for (let k = 0; k < r.count; k++) copyFrom[r.first + k] = r.basisFirst + k;
    let upTo = resumeFrom; // chunks [0, upTo) are judged
    let judged = 0; // tokens [0, judged) are judged
    let splitFrom = 0; // tokens below this may not be asked for again
    let root: Uint8Array | null = null;
    const verdict = async () => {
      let m = await conn.expect(Msg.SplitRequest, Msg.Verdict);
      if (m.type === Msg.SplitRequest) {
        for (const t of m.tokens) {
          if (t < Math.max(splitFrom, judged) || t >= runs.length) throw bad(`split request for token ${t} out of order or range`);
          splitFrom = t + 1;
          const r = runs[t];
          await conn.send({ type: Msg.SplitHashes, token: t, hashes: basis!.index.hashes.subarray(r.basisFirst * H, (r.basisFirst + r.count) * H) });
        }
        m = await conn.expect(Msg.Verdict);
      }
      if (m.upTo > count || (m.upTo <= upTo && m.upTo !== count)) throw bad(`verdict up to chunk ${m.upTo} does not advance from ${upTo} or exceeds ${count} chunks`);
      let te = judged;
      while (te < runs.length && runs[te].first + runs[te].count <= m.upTo) te++;
      if (te < runs.length && runs[te].first < m.upTo) throw bad(`verdict up to chunk ${m.upTo} ends inside token ${te}`);
      if ((m.upTo === count) !== !!m.root) throw bad('the root comes with the last verdict, and only there');
      let prev = judged - 1;
      for (const f of m.failed) {
        if (f.token <= prev || f.token >= te) throw bad(`verdict for token ${f.token} out of order or range`);
        prev = f.token;
        const r = runs[f.token];
        if (f.bitmap && f.bitmap.length !== Math.ceil(r.count / 8)) throw bad(`verdict bitmap for token ${f.token} has the wrong length`);
        for (let k = 0; k < r.count; k++) {
          if (!f.bitmap || !(f.bitmap[k >> 3] & (1 << (k & 7)))) copyFrom[r.first + k] = -1;
        }
      }
      judged = te;
      upTo = m.upTo;
      if (m.root) root = m.root.slice();
    };

    // Rebuild: in target order, copy basis chunks or take the next literal; hash what we write
    // (copies into a sink that can reference them take their hashes from the basis index).
    const basisOffsets = basis ? offsetsOf(basis.index.lengths) : null;
    let literal: Delta | null = null;
    let li = 0;
    let matchedBytes = 0;
    let literalBytes = 0;
    // Writes target chunks [i, j), whose bytes are `bytes`, hashing them in one wasm call.
    const put = async (i: number, j: number, bytes: Uint8Array) => {
      hashes!.set(hash_chunks(algo, bytes, target.lengths.subarray(i, j)), i * H);
      await sink!.write(bytes);
      written = j;
    };
    const byReference = !!sink.copy;
    for (let i = resumeFrom; ; ) {
      if (i >= upTo) {
        if (literal && li !== literal.indices.length) throw bad(`Delta Bytes carry chunk ${literal.indices[li]}, not below the verdict's ${upTo}`);
        if (root && i === count) break;
        await verdict();
        continue;
      }
      if (copyFrom[i] >= 0) {
        // Copy the longest stretch that is contiguous in the basis (read: up to 4 MiB at once).
        let j = i + 1;
        while (j < upTo && copyFrom[j] === copyFrom[j - 1] + 1 && (byReference || basisOffsets![copyFrom[j] + 1] - basisOffsets![copyFrom[i]] <= COPY_STRETCH)) j++;
        const from = basisOffsets![copyFrom[i]];
        const length = basisOffsets![copyFrom[j - 1] + 1] - from;
        // Basis chunks and target chunks agree in length (the weak match includes it).
        if (from + length > basis!.source.size) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
        if (byReference) {
          await sink.copy!(basis!.source, from, length);
          hashes.set(basis!.index.hashes.subarray(copyFrom[i] * H, (copyFrom[j - 1] + 1) * H), i * H);
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
        literal = await conn.expect(Msg.Delta);
        li = 0;
        if (literal.indices.length === 0) throw bad('empty Delta message');
      }
      // Take the consecutive literal chunks this message holds (up to 1 MiB) and write them as
      // one run: one wasm call hashes them four at a time (blake3_lanes.rs).
      const from = li;
      let j = i;
      let bytes = 0;
      while (li < literal.indices.length && literal.indices[li] === j && j < upTo && copyFrom[j] < 0 && (j === i || bytes + literal.chunks[li].length <= DELTA_MESSAGE_BYTES)) {
        const c = literal.chunks[li++];
        if (c.length !== target.lengths[j]) throw bad(`Delta chunk ${j} is ${c.length} bytes, the Checksum List says ${target.lengths[j]}`);
        bytes += c.length;
        j++;
      }
      if (j === i) throw bad(`Delta Bytes sent chunk ${literal.indices[li]}, expected chunk ${i}`);
      let run = literal.chunks[from];
      if (j - i > 1) {
        run = (scratch[1] ??= takeBuffer(DELTA_MESSAGE_BYTES)).subarray(0, bytes);
        for (let k = from, o = 0; k < li; o += literal.chunks[k++].length) run.set(literal.chunks[k], o);
      }
      await put(i, j, run);
      literalBytes += bytes;
      i = j;
    }
    const index: ChunkIndex = { params, algo, size, lengths: target.lengths, fastfps: target.fastfps, hashes, root: runHash(algo, hashes, 0, count) };
    if (!equalBytes(index.root, root!)) {
      throw new ProtocolError(ErrorCode.VerifyFailed, 'the rebuilt file does not match the sender\'s root hash; nothing was stored');
    }
    const version = await sink.commit(index);
    const extra = opts.resultExtra?.() ?? { micros: 0, wireIn: 0, wireOut: 0 };
    await conn.send({ type: Msg.Result, version, size, root: index.root, ...extra });
    return { index, version, matchedBytes, literalBytes, tokens: runs.length, resumedChunks: resumeFrom };
  } catch (e) {
    if (sink && e instanceof ConnectionLost && sink.suspend && written > 0 && digest && hashes) {
      await sink.suspend({ digest, count: written, hashes: hashes.slice(0, written * H) });
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

function concatU32(parts: Uint32Array[], n: number): Uint32Array {
  if (parts.length === 1) return parts[0].slice();
  const out = new Uint32Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
