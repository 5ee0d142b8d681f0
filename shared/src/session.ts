/**
 * The three phases of a Dsync session (paper §IV-D, Fig. 8), written once for both
 * directions. The *sender* holds the target (the new file) and the *receiver* the basis (the
 * old file): on a push the client sends and the server receives; on a pull (delta download)
 * it is the other way round.
 *
 *   Phase 1  sender -> receiver  Checksum List: FastFp + length per target chunk, root hash
 *   Phase 2  receiver -> sender  Match Tokens: merged weak-matched runs with their run hash
 *   Phase 3  sender -> receiver  [Split Request <-> Split Hashes], Verdict, Delta Bytes
 *            receiver            rebuilds target = basis + delta, verifies the root, commits
 *            receiver -> sender  Result
 */
import { type ChunkIndex, type Source, offsetsOf, runHash } from './chunk-index.ts';
import type { Checksums, Delta, Failed, Result, Tokens } from './codec.ts';
import { type Conn, ConnectionLost } from './conn.ts';
import { type Run, matchRuns } from './matcher.ts';
import { type ChunkParams, ErrorCode, Msg, ProtocolError, hashLength } from './protocol.ts';
import { hash_chunks } from '../../wasm/pkg/dsync_wasm.js';

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

/** Runs the sender's side of Phases 1–3 for `target` (whose bytes `source` reads). */
export async function sendTarget(conn: Conn, target: ChunkIndex, source: Source, opts: SenderOptions = {}): Promise<SendOutcome> {
  const H = hashLength(target.algo);
  const n = target.lengths.length;
  // Phase 1: the Checksum List.
  for (let i = 0; i < n; i += BATCH) {
    const end = Math.min(n, i + BATCH);
    await conn.send({ type: Msg.Checksums, fastfps: target.fastfps.subarray(i, end), lengths: target.lengths.subarray(i, end) });
  }
  await conn.send({ type: Msg.ChecksumsEnd, count: n, size: target.size, root: target.root });
  await opts.onChecksumsSent?.();

  // Phase 2: Match Tokens.
  const firsts: number[] = [];
  const counts: number[] = [];
  const hashes: Uint8Array[] = [];
  let resumeFrom = 0;
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
      hashes.push(m.hashes.subarray(k * H, (k + 1) * H));
    }
  }

  opts.onTokens?.();
  // Phase 3: confirm each run with its strong hash; split large failed runs; send the rest.
  const offsets = offsetsOf(target.lengths);
  const covered = new Uint8Array(n);
  covered.fill(1, 0, resumeFrom); // the receiver kept these from an interrupted session
  const failed: Failed[] = [];
  const toSplit: number[] = [];
  const splitThreshold = opts.splitThreshold ?? SPLIT_THRESHOLD;
  for (let t = 0; t < firsts.length; t++) {
    if (equalBytes(runHash(target.algo, target.hashes, firsts[t], counts[t]), hashes[t])) {
      covered.fill(1, firsts[t], firsts[t] + counts[t]);
    } else if (counts[t] > 1 && offsets[firsts[t] + counts[t]] - offsets[firsts[t]] >= splitThreshold) {
      toSplit.push(t);
    } else {
      failed.push({ token: t, bitmap: null });
    }
  }
  if (toSplit.length) {
    await conn.send({ type: Msg.SplitRequest, tokens: Uint32Array.from(toSplit) });
    for (const t of toSplit) {
      const m = await conn.expect(Msg.SplitHashes);
      if (m.token !== t || m.hashes.length !== counts[t] * H) throw bad(`Split Hashes for token ${m.token} do not answer the request`);
      const bitmap = new Uint8Array(Math.ceil(counts[t] / 8));
      for (let k = 0; k < counts[t]; k++) {
        const i = firsts[t] + k;
        if (equalBytes(target.hashes.subarray(i * H, (i + 1) * H), m.hashes.subarray(k * H, (k + 1) * H))) {
          bitmap[k >> 3] |= 1 << (k & 7);
          covered[i] = 1;
        }
      }
      failed.push({ token: t, bitmap });
    }
    failed.sort((a, b) => a.token - b.token);
  }
  await conn.send({ type: Msg.Verdict, failed });

  let literalBytes = 0;
  const maxMsg = opts.deltaMessageBytes ?? DELTA_MESSAGE_BYTES;
  let batch: { indices: number[]; chunks: Uint8Array[]; bytes: number } = { indices: [], chunks: [], bytes: 0 };
  const flush = async () => {
    if (!batch.indices.length) return;
    await conn.send({ type: Msg.Delta, indices: Uint32Array.from(batch.indices), chunks: batch.chunks });
    batch = { indices: [], chunks: [], bytes: 0 };
  };
  // Read contiguous literal chunks with one read per run of up to DELTA_MESSAGE_BYTES.
  for (let i = 0; i < n; ) {
    if (covered[i]) {
      i++;
      continue;
    }
    let j = i;
    while (j < n && !covered[j] && (j === i || offsets[j + 1] - offsets[i] <= maxMsg)) j++;
    const bytes = await source.read(offsets[i], offsets[j] - offsets[i]);
    if (bytes.length !== offsets[j] - offsets[i]) throw new Error('the file changed size while syncing');
    for (let k = i; k < j; k++) {
      const c = bytes.subarray(offsets[k] - offsets[i], offsets[k + 1] - offsets[i]);
      if (batch.bytes + c.length > maxMsg) await flush();
      batch.indices.push(k);
      batch.chunks.push(c);
      batch.bytes += c.length;
      literalBytes += c.length;
    }
    i = j;
  }
  await flush();
  opts.onDeltaSent?.();

  const result = await conn.expect(Msg.Result);
  if (!equalBytes(result.root, target.root) || result.size !== target.size) {
    throw new ProtocolError(ErrorCode.VerifyFailed, 'the receiver reports a different file than the one sent');
  }
  return { result, matchedBytes: target.size - literalBytes - offsets[resumeFrom], literalBytes, resumedBytes: offsets[resumeFrom], tokens: firsts.length, failedTokens: failed.length };
}

// ---------------------------------------------------------------------------------------------
// Receiver

/** Where the receiver writes the rebuilt target. */
export interface Sink {
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
  root: Uint8Array;
  count: number;
  hashes: Uint8Array;
}

/** Opens the sink for a target once its Checksum List is known; `held` is what a suspended
 *  earlier session of the same target (same root) already wrote into that sink. */
export type SinkFor = (target: { root: Uint8Array; count: number; size: number }) => Promise<{ sink: Sink; held?: Held }>;

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
  let root: Uint8Array | null = null;
  let hashes: Uint8Array | null = null;
  let written = 0; // chunks [0, written) are in the sink
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
    root = end.root.slice();
    const opened = await sinkFor({ root, count, size });
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

    // Phase 3: optional split round, then the Verdict.
    opts.onPhase?.('delta');
    let m = await conn.expect(Msg.SplitRequest, Msg.Verdict);
    if (m.type === Msg.SplitRequest) {
      let prev = -1;
      for (const t of m.tokens) {
        if (t <= prev || t >= runs.length) throw bad(`split request for token ${t} out of order or range`);
        prev = t;
        const r = runs[t];
        await conn.send({ type: Msg.SplitHashes, token: t, hashes: basis!.index.hashes.subarray(r.basisFirst * H, (r.basisFirst + r.count) * H) });
      }
      m = await conn.expect(Msg.Verdict);
    }
    // copyFrom[i] = basis chunk to copy for target chunk i, or -1 for a literal.
    const copyFrom = new Int32Array(count).fill(-1);
    for (const r of runs) for (let k = 0; k < r.count; k++) copyFrom[r.first + k] = r.basisFirst + k;
    let prev = -1;
    for (const f of m.failed) {
      if (f.token <= prev || f.token >= runs.length) throw bad(`verdict for token ${f.token} out of order or range`);
      prev = f.token;
      const r = runs[f.token];
      if (f.bitmap && f.bitmap.length !== Math.ceil(r.count / 8)) throw bad(`verdict bitmap for token ${f.token} has the wrong length`);
      for (let k = 0; k < r.count; k++) {
        if (!f.bitmap || !(f.bitmap[k >> 3] & (1 << (k & 7)))) copyFrom[r.first + k] = -1;
      }
    }

    // Rebuild: in target order, copy basis chunks or take the next literal; hash what we write
    // (copies into a sink that can reference them take their hashes from the basis index).
    const basisOffsets = basis ? offsetsOf(basis.index.lengths) : null;
    let scratch: Uint8Array | undefined;
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
    for (let i = resumeFrom; i < count; ) {
      if (copyFrom[i] >= 0) {
        // Copy the longest stretch that is contiguous in the basis (read: up to 4 MiB at once).
        let j = i + 1;
        while (j < count && copyFrom[j] === copyFrom[j - 1] + 1 && (byReference || basisOffsets![copyFrom[j] + 1] - basisOffsets![copyFrom[i]] <= COPY_STRETCH)) j++;
        const from = basisOffsets![copyFrom[i]];
        const length = basisOffsets![copyFrom[j - 1] + 1] - from;
        // Basis chunks and target chunks agree in length (the weak match includes it).
        if (from + length > basis!.source.size) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
        if (byReference) {
          await sink.copy!(basis!.source, from, length);
          hashes.set(basis!.index.hashes.subarray(copyFrom[i] * H, (copyFrom[j - 1] + 1) * H), i * H);
          written = j;
        } else {
          // one buffer for every stretch: a fresh 4 MiB allocation each time drove full GCs
          const bytes = await basis!.source.read(from, length, (scratch ??= new Uint8Array(COPY_STRETCH)));
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
      if (literal.indices[li] !== i) throw bad(`Delta Bytes sent chunk ${literal.indices[li]}, expected chunk ${i}`);
      const c = literal.chunks[li++];
      if (c.length !== target.lengths[i]) throw bad(`Delta chunk ${i} is ${c.length} bytes, the Checksum List says ${target.lengths[i]}`);
      await put(i, i + 1, c);
      literalBytes += c.length;
      i++;
    }
    if (literal && li !== literal.indices.length) throw bad('Delta Bytes carry chunks beyond the target');
    const index: ChunkIndex = { params, algo, size, lengths: target.lengths, fastfps: target.fastfps, hashes, root: runHash(algo, hashes, 0, count) };
    if (!equalBytes(index.root, root)) {
      throw new ProtocolError(ErrorCode.VerifyFailed, 'the rebuilt file does not match the sender\'s root hash; nothing was stored');
    }
    const version = await sink.commit(index);
    const extra = opts.resultExtra?.() ?? { micros: 0, wireIn: 0, wireOut: 0 };
    await conn.send({ type: Msg.Result, version, size, root, ...extra });
    return { index, version, matchedBytes, literalBytes, tokens: runs.length, resumedChunks: resumeFrom };
  } catch (e) {
    if (sink && e instanceof ConnectionLost && sink.suspend && written > 0 && root && hashes) {
      await sink.suspend({ root, count: written, hashes: hashes.slice(0, written * H) });
    } else {
      await sink?.abort();
    }
    throw e;
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
