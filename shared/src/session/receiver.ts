/**
 * The receiver's side of a Dsync session (paper §IV-D, Fig. 8; docs/protocol.md §3). The
 * receiver holds the basis (the old file): on a push the server receives, on a pull the client
 * does. It takes the sender's Checksum List, matches it against the basis (matcher.ts) and
 * answers with Match Tokens, listing the basis stretches between them cut finer first (Basis
 * Checksums, refine.ts); it answers Split Requests, takes each Verdict and the Delta Bytes
 * below it (delta-receiver.ts), rebuilds target = basis + delta in order into a sink (sink.ts), verifies the root
 * and commits, then sends the Result.
 *
 * One loop reads every message in order: the rebuild asks for the next Verdict or Delta, and
 * the Checksums (and, with a known basis, Copies) that come first are handled on the way
 * (`next`, one handler per message). Its state is the phase it is in (`Phase`,
 * session-options.ts).
 */
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { ChecksumList, checkChecksums, listDigest } from './checksum-list.ts';
import { grown } from '../base/buffers.ts';
import { type ChunkIndex, equalBytes, offsetsOf, runHash } from '../chunking/chunk-index.ts';
import { DeltaReceiver } from './delta-receiver.ts';
import type { Checksums, ChecksumsEnd, Copies, Message, SplitRequest, Verdict } from '../wire/messages.ts';
import { type Conn, ConnectionLost } from '../transport/conn.ts';
import { COPY_STRETCH, LIST_BATCH, RESUME_CHECKPOINT_BYTES } from '../base/limits.ts';
import { type Run, WeakMatcher, matchRuns } from './matcher.ts';
import { type ChunkParams, ErrorCode, Msg, ProtocolError, ROOT_CHECK, hashLength, inconsistent as bad } from '../wire/protocol.ts';
import { BasisListing } from './refine.ts';
import type { Basis, BasisChoice, Phase, ReceiveOutcome, ReceiverOptions } from './session-options.ts';
import type { BasisSpans, Sink, SinkFor } from './sink.ts';
import { hash_chunks } from '../../../wasm/pkg/dsync_wasm.js';

/**
 * Runs the receiver's side: takes the Checksum List of a target chunked with `params`/`algo`,
 * matches it against the basis, rebuilds into the sink, verifies the root and commits.
 *
 * With a basis known up front (and not `wholeList`), the list is matched as it arrives: each
 * Checksums message is answered with the Match Tokens it closed and the chunk below which the
 * matching is final, and the Verdicts and Delta Bytes for that part come while the rest of the
 * list is still on its way.
 */
export async function receiveTarget(conn: Conn, params: ChunkParams, algo: number, basis: BasisChoice, sinkFor: SinkFor, opts: ReceiverOptions): Promise<ReceiveOutcome> {
  return new Receiver(conn, params, algo, basis, sinkFor, opts).run();
}

class Receiver {
  private readonly H: number;
  private readonly known: boolean;
  /** matched as the list arrives */
  private readonly streamed: boolean;
  private state: Exclude<Phase, 'result'> = 'checksums';
  /** the target's chunks as they arrive */
  private readonly list: ChecksumList;
  /** per chunk: the basis chunk it copies, -1 for one sent as Delta Bytes */
  private copyFrom = new Int32Array(0);
  private basis: Basis | null;
  private readonly matcher: WeakMatcher | null;
  /** refinement's listing and the basis bytes refined chunks copy (with a basis) */
  private listing: BasisListing | null = null;
  private basisOffsetsCache: Float64Array | null = null;
  /** Match Tokens, all sent (or, with a known basis, the sender's Copies) */
  private readonly runs: Run[] = [];
  /** the matching is final below this chunk (sent) */
  private frontier = 0;
  private sink: Sink | null = null;
  private resumeFrom = 0;
  /** chunks [0, written) are in the sink */
  private written = 0;
  /** the rebuild's position: chunks [0, rebuiltTo) are written */
  private rebuiltTo = 0;
  /** target bytes written, and literal Delta Bytes received, when the last checkpoint was
   *  made (Sink.checkpoint) */
  private checkpointed = { target: 0, literal: 0 };
  /** a chunk index and the target offset where it begins, moved forward by offsetOf */
  private offsetAt = { chunk: 0, offset: 0 };
  /** chunks [0, judgedTo) are judged */
  private judgedTo = 0;
  /** tokens [0, judgedTokens) are judged */
  private judgedTokens = 0;
  /** tokens below this may not be asked for again */
  private splitFrom = 0;
  private root: Uint8Array | null = null;
  /** Phase 3's Delta Bytes, taken message by message */
  private readonly deltas = new DeltaReceiver();
  /** what contiguous basis stretches are read into */
  private stretchBuffer: Uint8Array | null = null;
  private matchedBytes = 0;

  constructor(
    private conn: Conn,
    private params: ChunkParams,
    private algo: number,
    private basisOrChoice: BasisChoice,
    private sinkFor: SinkFor,
    private opts: ReceiverOptions,
  ) {
    this.H = hashLength(algo);
    this.known = !!opts.known;
    this.streamed = typeof basisOrChoice !== 'function' && !opts.wholeList;
    if (this.known && !(this.streamed && basisOrChoice)) throw new Error('a known basis is given up front, and the list matched as it arrives');
    // sized once from Hello's size: FastCDC's chunks average a little above `avg`, so the list
    // rarely grows
    const { expectedSize, limits } = opts;
    this.list = new ChecksumList(this.H, opts.reserve, expectedSize ? Math.min(limits.maxChunks, Math.ceil(expectedSize / params.avg)) : 0);
    this.basis = this.streamed ? (basisOrChoice as Basis | null) : null;
    this.matcher = this.streamed && this.basis && !this.known ? new WeakMatcher(this.basis.index) : null;
    if (this.basis) this.listFor(this.basis);
  }

  async run(): Promise<ReceiveOutcome> {
    try {
      this.enter('checksums');
      if (this.streamed) this.sink = (await this.sinkFor({ digest: null })).sink;
      await this.rebuild();
      return await this.commit();
    } catch (e) {
      // An interrupted upload can be resumed once its whole list is known (its digest).
      const { sink, list } = this;
      if (sink && e instanceof ConnectionLost && sink.suspend && this.written > 0 && this.state !== 'checksums') {
        await sink.suspend({ digest: listDigest(this.algo, list.weak()), count: this.written, hashes: list.hashes.slice(0, this.written * this.H) });
      } else {
        await sink?.abort();
      }
      throw e;
    } finally {
      // no read into them is running: every read was awaited
      giveBuffers([this.stretchBuffer, ...(this.listing?.buffers() ?? [])].filter((b): b is Uint8Array => !!b));
      this.deltas.close();
    }
  }

  private enter(state: Exclude<Phase, 'result'>): void {
    this.state = state;
    this.opts.onPhase?.(state);
  }

  private listFor(basis: Basis): void {
    this.listing = new BasisListing(basis, () => this.basisOffsets(), (m) => this.conn.send(m), this.algo, this.opts.refine, this.opts.maxRefineBytes, this.opts.reserve);
  }

  private basisOffsets(): Float64Array {
    return (this.basisOffsetsCache ??= offsetsOf(this.basis!.index.lengths));
  }

  /**
   * The next message of one of `types`. The Checksums (and with a known basis Copies) that come
   * first are taken in on the way.
   */
  private async next<T extends Message['type']>(...types: T[]): Promise<Extract<Message, { type: T }>> {
    for (;;) {
      // against a known basis no ChecksumsEnd comes: the last Verdict ends the list
      const also: Message['type'][] = this.state !== 'checksums' ? [] : this.known ? [Msg.Checksums, Msg.Copies] : [Msg.Checksums, Msg.ChecksumsEnd];
      const m: Message = await this.conn.expect<Message['type']>(...also, ...types);
      switch (m.type) {
        case Msg.Checksums:
          await this.onChecksums(m);
          break;
        case Msg.ChecksumsEnd:
          await this.onChecksumsEnd(m);
          break;
        case Msg.Copies:
          this.onCopies(m);
          break;
        default:
          return m as Extract<Message, { type: T }>;
      }
    }
  }

  // -------------------------------------------------------------------------------------------
  // Phases 1 and 2

  /** A part of the Checksum List, matched at once when streamed. */
  private async onChecksums(m: Checksums): Promise<void> {
    const { list } = this;
    const from = this.runs.length;
    this.appendList(m);
    if (!this.streamed || this.known) return;
    if (this.matcher) this.addRuns(this.matcher.feed(list.weak(), list.count));
    await this.sendTokens(from, await this.listGaps(this.matcher ? this.matcher.frontier : list.count, false));
  }

  private async onChecksumsEnd(m: ChecksumsEnd): Promise<void> {
    const { list } = this;
    if (m.count !== list.count || m.size !== list.size) {
      throw bad(`ChecksumsEnd says ${m.count} chunks / ${m.size} bytes, the list has ${list.count} / ${list.size}`);
    }
    this.checkListSize();
    this.enter('tokens');
    const from = this.runs.length;
    if (this.streamed) {
      if (this.matcher) this.addRuns(this.matcher.end());
    } else await this.matchWholeList();
    await this.listGaps(list.count, true);
    await this.sendTokens(from, this.streamed ? list.count : 0);
    await this.conn.send({ type: Msg.TokensEnd, count: this.runs.length, resumeFrom: this.resumeFrom });
    this.frontier = list.count;
    this.enter('delta');
  }

  /** The list is whole: its size is Hello's. */
  private checkListSize(): void {
    const { list, opts } = this;
    if (opts.expectedSize !== undefined && list.size !== opts.expectedSize) throw bad(`Hello announced ${opts.expectedSize} bytes, the Checksum List has ${list.size}`);
  }

  /** The whole list is in: chooses the basis, opens the sink (which may hold the start of this
   *  target from an interrupted session) and matches. */
  private async matchWholeList(): Promise<void> {
    const { list, H } = this;
    const target = list.weak();
    const choice = this.basisOrChoice;
    this.basis = typeof choice === 'function' ? await choice(target) : choice;
    if (this.basis) this.listFor(this.basis);
    const opened = await this.sinkFor({ digest: listDigest(this.algo, target) });
    this.sink = opened.sink;
    if (opened.held && opened.held.count <= list.count) {
      const from = (this.resumeFrom = opened.held.count);
      list.hashes.set(opened.held.hashes.subarray(0, from * H));
      this.written = this.rebuiltTo = this.judgedTo = from;
      this.listing?.resumeAt(from);
    }
    // none for chunks the sink already holds
    const resumeFrom = this.resumeFrom;
    for (const r of this.basis ? matchRuns(target, this.basis.index) : []) {
      if (r.first + r.count <= resumeFrom) continue;
      const skip = Math.max(0, resumeFrom - r.first);
      this.addRuns([{ first: r.first + skip, count: r.count - skip, basisFirst: r.basisFirst + skip }]);
    }
  }

  /** Appends a part of the Checksum List (sent, or taken from the basis index for Copies). */
  private appendList(m: Pick<Checksums, 'lengths' | 'fastfps'>): void {
    const { list } = this;
    checkChecksums(list, m, this.params, this.opts.limits, this.opts.expectedSize);
    list.append(m.lengths, m.fastfps);
    if (this.copyFrom.length < list.capacity) this.copyFrom = grown(this.copyFrom, list.capacity, -1);
    if (this.known) this.frontier = list.count; // a Verdict may judge every chunk listed
  }

  /** A known basis: the sender's own Match Tokens, each after the chunks of the list before
   *  it. A run lists its chunks with the lengths and FastFps of the basis chunks (the root check
   *  at the end covers the bytes). */
  private onCopies(m: Copies): void {
    const { list, runs } = this;
    const b = this.basis!.index;
    for (let k = 0, at = 0; k < m.count.length; at += m.listed[k], k++) {
      if (m.listed[k]) this.appendList({ lengths: m.lengths.subarray(at, at + m.listed[k]), fastfps: m.fastfps.subarray(at, at + m.listed[k]) });
      const first = list.count;
      const count = m.count[k];
      const from = m.basisFirst[k];
      if (count === 0 || from + count > b.lengths.length) {
        throw bad(`copy ${runs.length} [${first}, +${count}) from basis chunk ${from} is empty or ends beyond the basis' ${b.lengths.length} chunks`);
      }
      this.appendList({ lengths: b.lengths.subarray(from, from + count), fastfps: b.fastfps.subarray(from, from + count) });
      this.addRuns([{ first, count, basisFirst: from }]);
    }
  }

  private addRuns(closed: Run[]): void {
    for (const r of closed) {
      this.runs.push(r);
      for (let k = 0; k < r.count; k++) this.copyFrom[r.first + k] = r.basisFirst + k;
    }
  }

  /** Lists the basis stretches between the runs found so far (refine.ts); returns how far the
   *  Match Tokens may declare final. */
  private listGaps(final: number, atEnd: boolean): Promise<number> {
    return this.listing ? this.listing.listGaps(this.list, this.runs, final, atEnd) : Promise.resolve(final);
  }

  /** Sends the runs not sent yet as Match Tokens, then says the matching is final below `final`. */
  private async sendTokens(from: number, final: number): Promise<void> {
    const { runs, H } = this;
    const basisHashes = this.basis?.index.hashes;
    for (let t = from; t < runs.length || final > this.frontier; ) {
      const part = runs.slice(t, t + LIST_BATCH);
      t += part.length;
      const upTo = t === runs.length ? final : this.frontier;
      const hashes = new Uint8Array(part.length * H);
      part.forEach((r, k) => hashes.set(runHash(this.algo, basisHashes!, r.basisFirst, r.count), k * H));
      await this.conn.send({ type: Msg.Tokens, upTo, first: Uint32Array.from(part, (r) => r.first), count: Uint32Array.from(part, (r) => r.count), hashes });
      this.frontier = upTo;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Phase 3

  /** Takes the next Verdict (after a Split Request, if one comes first). */
  private async nextVerdict(): Promise<void> {
    let m: SplitRequest | Verdict = await this.next(Msg.SplitRequest, Msg.Verdict);
    if (m.type === Msg.SplitRequest) {
      await this.onSplitRequest(m);
      m = await this.next(Msg.Verdict);
    }
    this.onVerdict(m);
  }

  /** Sends the chunk hashes of each token asked for. */
  private async onSplitRequest(m: SplitRequest): Promise<void> {
    if (this.state !== 'delta') throw bad('a SplitRequest comes after TokensEnd');
    const { runs, H } = this;
    for (const t of m.tokens) {
      if (t < Math.max(this.splitFrom, this.judgedTokens) || t >= runs.length) throw bad(`split request for token ${t} out of order or range`);
      this.splitFrom = t + 1;
      const r = runs[t];
      await this.conn.send({ type: Msg.SplitHashes, token: t, hashes: this.basis!.index.hashes.subarray(r.basisFirst * H, (r.basisFirst + r.count) * H) });
    }
  }

  /** Judges the tokens below the Verdict's `upTo`: a failed one's chunks (all, or those its
   *  bitmap leaves out) come as Delta Bytes. */
  private onVerdict(m: Verdict): void {
    const { runs, list } = this;
    if (this.known && m.root && this.state === 'checksums') {
      // against a known basis the last Verdict ends the list (no ChecksumsEnd comes): the
      // matching is the sender's, final for every chunk
      this.checkListSize();
      this.enter('tokens');
      this.frontier = list.count;
      this.enter('delta');
    }
    // the last Verdict (root, upTo = count, after TokensEnd) may repeat the upTo before it
    if (m.root && !(this.state === 'delta' && m.upTo === list.count)) throw bad('the root comes with the last verdict, and only there');
    if (m.upTo > this.frontier || (m.upTo <= this.judgedTo && !m.root)) throw bad(`verdict up to chunk ${m.upTo} does not advance from ${this.judgedTo} or goes beyond the Match Tokens' ${this.frontier}`);
    let te = this.judgedTokens;
    while (te < runs.length && runs[te].first + runs[te].count <= m.upTo) te++;
    if (te < runs.length && runs[te].first < m.upTo) throw bad(`verdict up to chunk ${m.upTo} ends inside token ${te}`);
    let prev = this.judgedTokens - 1;
    for (const f of m.failed) {
      if (f.token <= prev || f.token >= te) throw bad(`verdict for token ${f.token} out of order or range`);
      prev = f.token;
      const r = runs[f.token];
      if (f.bitmap && f.bitmap.length !== Math.ceil(r.count / 8)) throw bad(`verdict bitmap for token ${f.token} has the wrong length`);
      for (let k = 0; k < r.count; k++) {
        if (!f.bitmap || !(f.bitmap[k >> 3] & (1 << (k & 7)))) this.copyFrom[r.first + k] = -1;
      }
    }
    this.judgedTokens = te;
    this.judgedTo = m.upTo;
    if (m.root) this.root = m.root.slice();
  }

  /** Rebuilds in target order: copies basis chunks or takes the next Delta chunks, up to the
   *  last Verdict, then the next one. */
  private async rebuild(): Promise<void> {
    for (;;) {
      const i = this.rebuiltTo;
      if (i >= this.judgedTo) {
        this.deltas.checkTaken(this.judgedTo);
        if (this.root && i === this.list.count) return;
        await this.nextVerdict();
      } else if (this.copyFrom[i] >= 0) await this.copyStretch(i);
      else await this.takeDelta(i);
      if (this.checkpointDue()) await this.checkpoint();
    }
  }

  /** The target offset where chunk `i` begins. */
  private offsetOf(i: number): number {
    while (this.offsetAt.chunk < i) this.offsetAt.offset += this.list.lengths[this.offsetAt.chunk++];
    return this.offsetAt.offset;
  }

  /**
   * A checkpoint saves a resumed session the literal bytes received since the one before (the
   * copies are found in the basis again), so one is due after RESUME_CHECKPOINT_BYTES of them:
   * a small edit of a large file makes none. Its state lists every chunk written, so they are
   * also spaced by an eighth of the target written: what they write in all stays within a few
   * times the last one.
   */
  private checkpointDue(): boolean {
    if (!this.sink!.checkpoint || this.state === 'checksums') return false;
    const { target, literal } = this.checkpointed;
    return this.deltas.literalBytes >= literal + RESUME_CHECKPOINT_BYTES && this.offsetOf(this.written) >= target + target / 8;
  }

  /** Records what is written so far, for a new session to resume (Sink.checkpoint). */
  private async checkpoint(): Promise<void> {
    const { list, written } = this;
    this.checkpointed = { target: this.offsetOf(written), literal: this.deltas.literalBytes };
    await this.sink!.checkpoint!({ digest: listDigest(this.algo, list.weak()), count: written, hashes: list.hashes.slice(0, written * this.H) });
  }

  /** Writes target chunks [i, j), whose bytes are `bytes`, hashing them in one wasm call. */
  private async put(i: number, j: number, bytes: Uint8Array, basis?: BasisSpans): Promise<void> {
    this.list.hashes.set(hash_chunks(this.algo, bytes, this.list.lengths.subarray(i, j)), i * this.H);
    await this.sink!.write(bytes, basis);
    this.written = j;
  }

  /** Copies the longest stretch from chunk i on that is contiguous in the basis (read: up to
   *  COPY_STRETCH bytes at once; a sink that copies by reference takes its hashes from the
   *  basis index). */
  private async copyStretch(i: number): Promise<void> {
    const { copyFrom, H } = this;
    const basis = this.basis!;
    const sink = this.sink!;
    const offsets = this.basisOffsets();
    const byReference = !!sink.copy;
    let j = i + 1;
    while (j < this.judgedTo && copyFrom[j] === copyFrom[j - 1] + 1 && (byReference || offsets[copyFrom[j] + 1] - offsets[copyFrom[i]] <= COPY_STRETCH)) j++;
    const from = offsets[copyFrom[i]];
    const length = offsets[copyFrom[j - 1] + 1] - from;
    // Basis chunks and target chunks agree in length (the weak match includes it).
    if (from + length > basis.source.size) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
    if (byReference) {
      await sink.copy!(basis.source, from, length);
      this.list.hashes.set(basis.index.hashes.subarray(copyFrom[i] * H, (copyFrom[j - 1] + 1) * H), i * H);
      this.written = j;
    } else {
      const bytes = await basis.source.read(from, length, (this.stretchBuffer ??= takeBuffer(COPY_STRETCH)));
      if (bytes.length !== length) throw new ProtocolError(ErrorCode.Internal, 'the basis is shorter than its index');
      await this.put(i, j, bytes);
    }
    this.matchedBytes += length;
    this.rebuiltTo = j;
  }

  /** Takes the Delta chunks from chunk i on that the current Delta message holds (the next
   *  one, if it is taken; delta-receiver.ts) and writes them as one run: one wasm call hashes
   *  them four at a time (blake3_lanes.rs). */
  private async takeDelta(i: number): Promise<void> {
    const { deltas } = this;
    if (deltas.taken) {
      deltas.open(await this.next(Msg.Delta));
      this.listing?.middles.reached(i);
    }
    const { end, run, spans } = await deltas.take(i, this.list.lengths, (j) => j < this.judgedTo && this.copyFrom[j] < 0, this.listing);
    // a refined chunk's copied pieces: a sink that copies by reference stores them so
    await this.put(i, end, run, spans.length && this.basis ? { from: this.basis.source, spans } : undefined);
    this.rebuiltTo = end;
  }

  /** Verifies the root, commits and sends the Result. */
  private async commit(): Promise<ReceiveOutcome> {
    const { list, H, algo } = this;
    const { literalBytes, refinedBytes } = this.deltas;
    const n = list.count;
    const hashes = list.hashes.slice(0, n * H);
    const index: ChunkIndex = { params: this.params, algo, size: list.size, lengths: list.lengths.slice(0, n), fastfps: list.fastfps.slice(0, n), hashes, root: runHash(algo, hashes, 0, n) };
    // the last Verdict carries the root's first ROOT_CHECK bytes; the index keeps the whole
    // root computed here from the bytes written
    if (!equalBytes(index.root.subarray(0, ROOT_CHECK), this.root!)) {
      throw new ProtocolError(ErrorCode.VerifyFailed, 'the rebuilt file does not match the sender\'s root hash; nothing was stored');
    }
    await this.basis?.verified;
    const version = await this.sink!.commit(index);
    const extra = this.opts.resultExtra?.() ?? { micros: 0, wireIn: 0, wireOut: 0 };
    await this.conn.send({ type: Msg.Result, version, root: index.root, ...extra });
    return {
      index,
      version,
      matchedBytes: this.matchedBytes + refinedBytes,
      refinedBytes,
      refineListed: this.listing?.listed ?? 0,
      literalBytes,
      tokens: this.runs.length,
      resumedChunks: this.resumeFrom,
    };
  }
}
