/**
 * The sender's side of a Dsync session (paper §IV-D, Fig. 8; docs/protocol.md §3). The sender
 * holds the target (the new file): on a push the client sends, on a pull the server does.
 *
 *   Phase 1  sender -> receiver  Checksum List: FastFp + length per target chunk, a part at a
 *                                time as the sender chunks its file
 *   Phase 2  receiver -> sender  Match Tokens, each message saying below which chunk the
 *                                matching is final; Basis Checksums before them (refine.ts)
 *   Phase 3  sender -> receiver  for what is final: [Split Request <-> Split Hashes], Verdict,
 *                                Delta Bytes; the last Verdict carries the root
 *            receiver -> sender  Result
 *
 * The phases overlap: the Delta Bytes of the file's start go out while its end is still being
 * chunked. One loop (`run`) does the work in this order of priority: send the next Delta
 * message of what is judged while the socket takes it (delta-sender.ts; the wire is what a large
 * change waits for); judge the next part the receiver has declared final and send its Verdict; take the
 * next part of the Checksum List (a client chunks and hashes its next slice here) and send it;
 * else wait for room in the socket or for Match Tokens, which a second strand (`readReceiver`)
 * reads meanwhile, one handler per message.
 *
 * The sender's state (`SenderState`, as ws's receiver names its own) is where its Checksum
 * List is; beside it, `tokensEnded` says that the matching is final for the whole list, and
 * `root` that the last Verdict is sent. Against a known basis (docs/protocol.md §3, "A known
 * basis") the sender finds its Match Tokens itself: `KnownBasisSender` lists them as Copies and
 * reads no Match Tokens; the rest is the same.
 */
import { BasisChecksumTable, type Refiner } from './basis-checksums.ts';
import { ChecksumList } from './checksum-list.ts';
import { grown } from '../base/buffers.ts';
import { type ListPart, type Source, equalBytes, runHash } from '../chunking/chunk-index.ts';
import { DeltaSender, type Judged } from './delta-sender.ts';
import type { BasisChecksums, Failed, Result, Tokens, TokensEnd } from '../wire/messages.ts';
import type { Conn } from '../transport/conn.ts';
import { DELTA_MESSAGE_BYTES, DELTA_RUN_BYTES, LIST_BATCH, MAX_SPLIT_CHUNKS, PASS_LEAD, SPLIT_THRESHOLD } from '../base/limits.ts';
import { KnownMatcher } from './matcher.ts';
import { ErrorCode, Msg, ProtocolError, ROOT_PREFIX, hashLength, inconsistent as bad } from '../wire/protocol.ts';
import type { SendOutcome, SenderOptions, TargetList } from './session-options.ts';
import type { KnownVersion } from './known.ts';
import { MatchTokens } from './match-tokens.ts';

/** Runs the sender's side of Phases 1–3 for `target` (whose bytes `source` reads); against a
 *  known basis (`opts.known`) its variant, `KnownBasisSender`. */
export async function sendTarget(conn: Conn, algo: number, target: TargetList, source: Source, opts: SenderOptions = {}): Promise<SendOutcome> {
  const sender = opts.known ? new KnownBasisSender(conn, algo, target, source, opts, opts.known) : new Sender(conn, algo, target, source, opts);
  return sender.run();
}

/**
 * The sender's states, in order:
 *   LISTING  Phase 1: the Checksum List goes out a part at a time as the file is chunked
 *   LISTED   every chunk is listed and Checksums End is sent; strong hashes may still be due
 *   HASHED   every part is taken: what is left is Verdicts and Delta Bytes
 */
const LISTING = 'listing';
const LISTED = 'listed';
const HASHED = 'hashed';
type SenderState = typeof LISTING | typeof LISTED | typeof HASHED;

/** Against a known basis, the chunks hashed so far wait to be listed until those that no run
 *  covers hold this many bytes, or the list ends: a small edit's list, runs, Verdict and Delta
 *  Bytes then go in one frame with the last Verdict (docs/protocol.md §4 "What an 8-byte edit
 *  costs"), while a large change still streams, a slice at a time. */
const KNOWN_HOLD_BYTES = 256 << 10;

/** A Match Tokens frontier still this long (ms) no longer holds the list back (`ahead`). */
const FRONTIER_STILL_MS = 100;

class Sender implements Judged {
  protected readonly H: number;
  protected readonly list: ChecksumList;
  /** per chunk: 1 once the receiver has it (a confirmed token, a split chunk, resumed) */
  held = new Uint8Array(0);
  protected state: SenderState = LISTING;
  /** the matching is final for the whole list (Tokens End; against a known basis, every
   *  chunk matched) */
  protected tokensEnded = false;
  protected readonly tokens = new MatchTokens();
  /** the matching is final below this chunk, and when it last moved (performance.now()) */
  protected frontier = 0;
  private frontierMoved = -Infinity;
  /** chunks the receiver kept from an interrupted session (Tokens End) */
  private resumeFrom = 0;
  private resumed = false;
  private readonly table: Refiner;
  /** chunks below this are judged (a Verdict sent) */
  judgedTo = 0;
  /** Phase 3's Delta Bytes of what is judged */
  private readonly delta: DeltaSender;
  /** the first token not judged yet */
  private nextToken = 0;
  /** sent with the last Verdict */
  private root: Uint8Array | null = null;
  private failedTokens = 0;
  private readonly splitThreshold: number;
  private readonly source: Source;
  /** the list's parts: the next one is asked for ahead and taken when it is there */
  private readonly parts: AsyncIterator<ListPart>;
  private asked: Promise<void> | null = null;
  private got: IteratorResult<ListPart> | null = null;
  private failure: unknown = null;
  private wake: (() => void) | null = null;

  constructor(
    protected conn: Conn,
    private algo: number,
    private target: TargetList,
    source: Source,
    protected opts: SenderOptions,
  ) {
    this.H = hashLength(algo);
    this.list = new ChecksumList(this.H, opts.reserve);
    this.table = opts.basisChecksums ?? new BasisChecksumTable(algo);
    this.splitThreshold = opts.splitThreshold ?? SPLIT_THRESHOLD;
    this.source = source;
    this.delta = new DeltaSender(conn, this.list, source, this.table, opts.deltaMessageBytes ?? DELTA_MESSAGE_BYTES, opts.deltaMessageBytes ?? DELTA_RUN_BYTES, this);
    this.parts = target.parts[Symbol.asyncIterator]();
  }

  async run(): Promise<SendOutcome> {
    const { signal } = this.opts;
    signal?.throwIfAborted();
    // a cancel wakes the loop wherever it waits (for room, Match Tokens or a part)
    signal?.addEventListener('abort', this.signal);
    const receiverRead = this.readReceiver();
    receiverRead.catch((e) => this.fail(e));
    // what the loop sends between two waits goes out as one frame (docs/protocol.md §1): an
    // edit's list, runs, Verdict and Delta Bytes pay for one frame header, not one each
    this.conn.cork();
    try {
      await this.loop();
      this.conn.uncork();
      await receiverRead;
    } finally {
      signal?.removeEventListener('abort', this.signal);
      this.conn.uncork();
      // stops the chunking and frees its buffers (after a read still running, if one is)
      if (this.state !== HASHED) void this.parts.return?.(undefined)?.catch(() => {});
      this.delta.close(); // every read into its buffer was awaited
    }
    this.opts.onPhase?.('result');
    return this.finish(await this.conn.expect(Msg.Result));
  }

  private signal = () => {
    const w = this.wake;
    this.wake = null;
    w?.();
  };
  private fail(e: unknown) {
    this.failure ??= e;
    this.signal();
  }
  /** Waits for a signal (a part, Match Tokens), or at most `ms` (room in the socket), after
   *  sending what is batched. */
  private async idle(ms?: number): Promise<void> {
    this.conn.uncork();
    await new Promise<void>((r) => {
      this.wake = r;
      if (ms) setTimeout(this.signal, ms);
    });
    this.conn.cork();
  }

  // -------------------------------------------------------------------------------------------
  // The main loop

  private async loop(): Promise<void> {
    for (;;) {
      if (this.failure) throw this.failure;
      if (this.tokensEnded && !this.resumed) this.resume();
      const due = this.delta.due();
      // a cancel stops the push short of its last message; once all went out (the root's
      // Verdict, no Delta Bytes due) it ends as the server answers
      if (this.opts.signal?.aborted && (due || !this.root)) throw this.opts.signal.reason;
      // 1. Delta Bytes, while the socket takes them
      if (due && this.conn.hasRoom()) {
        await this.delta.send();
        continue;
      }
      if (!due && this.root) return;
      // 2. a Verdict for the next part declared final and hashed
      if (!due) {
        const end = this.verdictEnd();
        if (end !== null) {
          await this.judge(end);
          continue;
        }
      }
      // 3. the next part of the Checksum List, or of its strong hashes (unless the list is
      // far enough ahead, `ahead`)
      const held = this.ahead(due);
      if (this.state !== HASHED && !held) {
        const r = this.got;
        this.got = null;
        // (no await between finding no part and idling: a part that comes meanwhile signals
        // no one)
        if (r || (this.state === LISTING && this.list.size >= this.target.size)) await this.takePart(r);
        if ((this.state as SenderState) !== HASHED) this.askNext();
        if (!r) await this.idle(due ? 2 : undefined);
        continue;
      }
      // 4. wait for room in the socket (that room never comes once it has closed), or for
      // Match Tokens
      if (due && this.conn.ended) throw this.conn.ended;
      await this.idle(due ? 2 : held ? FRONTIER_STILL_MS : undefined);
    }
  }

  /**
   * Whether the list is far enough ahead that, from a source that keeps the bytes it read last
   * (`holds`: the page's File), taking its next part (and reading the file on) would let bytes
   * go before the Delta reads that need them (each then a round trip to the browser): while
   * the file is still read (LISTING), the Delta Bytes lately held runs to read for refining
   * (`DeltaSender.readsBehind`: not where every changed stretch is long, sent unread), and Delta
   * Bytes more than
   * PASS_LEAD behind the list wait for room in the socket (they always go out), or while the
   * Match Tokens trail it by more than PASS_LEAD and still move (a frontier still for
   * FRONTIER_STILL_MS may wait for more of the list: a long run or gap; the hold then ends),
   * where a run the source no longer holds would cost time (`DeltaSender.missCosts`).
   */
  private ahead(due: boolean): boolean {
    if (!this.source.holds || this.state !== LISTING || !this.delta.readsBehind()) return false;
    const { size, offsets } = this.list;
    // (a source that keeps nothing, as one whose pass cannot stream, is not held for)
    if (!size || !this.source.holds(size - 1, 1)) return false;
    if (due && size - this.delta.sentOffset() > PASS_LEAD) return true;
    if (!this.delta.missCosts()) return false;
    return size - offsets[this.frontier] > PASS_LEAD && performance.now() - this.frontierMoved < FRONTIER_STILL_MS;
  }

  /** The receiver kept chunks below `resumeFrom` from an interrupted session (no Verdict was
   *  sent: every Tokens upTo was 0). */
  private resume(): void {
    this.resumed = true;
    this.held.fill(1, 0, this.resumeFrom);
    this.judgedTo = Math.max(this.judgedTo, this.resumeFrom);
  }

  private confirmed(k: number): boolean {
    const t = this.tokens;
    return (t.ok[k] ??= equalBytes(runHash(this.algo, this.list.hashes, t.first[k], t.count[k]), t.hash[k]));
  }
  /** A failed token is split when it is large (`splitThreshold`) and its Split Hashes fit in
   *  one message (MAX_SPLIT_CHUNKS); else it is resent whole. */
  private splittable(k: number): boolean {
    const t = this.tokens;
    return t.count[k] > 1 && t.count[k] <= MAX_SPLIT_CHUNKS && this.list.offsets[t.end(k)] - this.list.offsets[t.first[k]] >= this.splitThreshold;
  }

  /**
   * Where the next Verdict ends, or null for none now: the part declared final and hashed, up
   * to the start of a token that goes on beyond it. The whole list declared final before Tokens
   * End waits: the last Verdict, with the root, comes once Tokens End is in; so does a large
   * failed token, split after Tokens End.
   */
  private verdictEnd(): number | null {
    const { tokens: t, list } = this;
    let end = Math.min(this.frontier, list.hashed);
    for (let k = this.nextToken; k < t.length && t.first[k] < end; k++) if (t.end(k) > end) end = t.first[k];
    const wholeBeforeEnd = !this.tokensEnded && this.state !== LISTING && end === list.count;
    if (!this.tokensEnded) for (let k = this.nextToken; k < t.length && t.first[k] < end; k++) if (this.splittable(k) && !this.confirmed(k)) end = t.first[k];
    if ((end > this.judgedTo && !wholeBeforeEnd) || (this.tokensEnded && !this.root && end === list.count)) return end;
    return null;
  }

  /**
   * Takes a part of the list and lists its chunks (`listPart`); ends the list once its chunks
   * cover the file (`covered`), before the last hashes are in. `r` null: no part is in.
   */
  private async takePart(r: IteratorResult<ListPart> | null): Promise<void> {
    const { list } = this;
    if (r?.done) {
      if (list.hashed !== list.count) throw new Error(`strong hashes for ${list.hashed} of ${list.count} chunks`);
    } else if (r) {
      const p = r.value;
      list.append(p.lengths, p.fastfps, p.hashes);
      if (this.held.length < list.capacity) this.held = grown(this.held, list.capacity);
      await this.listPart(list.count - p.lengths.length);
    }
    if (this.state === LISTING && this.covered(r)) {
      if (list.size !== this.target.size) throw new Error('the file changed size while syncing');
      await this.endList();
      this.state = LISTED;
      await this.sendListEnd();
      this.opts.onPhase?.('tokens');
    }
    if (r?.done) this.enterHashed();
  }

  /** Lists the chunks appended from `from` on: as Checksums, not waiting for the send buffer
   *  to drain (they are small, and the Match Tokens depend on them). */
  protected async listPart(from: number): Promise<void> {
    await this.sendChecksums(from, this.list.count);
  }

  /** Whether the list is whole once part `r` is taken: its chunks cover the file. */
  protected covered(r: IteratorResult<ListPart> | null): boolean {
    return this.list.size >= this.target.size || !!r?.done;
  }

  /** Lists what is left before Checksums End: nothing (the chunks went out with their parts). */
  protected async endList(): Promise<void> {}

  /** Says the list is whole: Checksums End. */
  protected async sendListEnd(): Promise<void> {
    await this.conn.send({ type: Msg.ChecksumsEnd, count: this.list.count, size: this.target.size }, { wait: false });
  }

  /** Every part is taken. */
  protected enterHashed(): void {
    this.state = HASHED;
  }

  protected async sendChecksums(from: number, to: number): Promise<void> {
    const { list } = this;
    for (let i = from; i < to; i += LIST_BATCH) {
      const j = Math.min(to, i + LIST_BATCH);
      await this.conn.send({ type: Msg.Checksums, fastfps: list.fastfps.subarray(i, j), lengths: list.lengths.subarray(i, j) }, { wait: false });
    }
  }

  /** Asks for the next part, once the one before is taken (taking it may hash the chunks of
   *  the one before: chunkParts). */
  private askNext(): void {
    this.asked ??= this.parts.next().then(
      (x) => {
        this.got = x;
        this.asked = null;
        this.signal();
      },
      (e) => this.fail(e),
    );
  }

  // -------------------------------------------------------------------------------------------
  // Phase 2: the receiver's messages, read by their own strand, one handler per message

  protected async readReceiver(): Promise<void> {
    await this.opts.beforeTokens?.();
    for (;;) {
      const m = await this.conn.expect(Msg.Tokens, Msg.TokensEnd, Msg.BasisChecksums);
      switch (m.type) {
        case Msg.BasisChecksums:
          this.onBasisChecksums(m);
          break;
        case Msg.Tokens:
          this.onTokens(m);
          break;
        case Msg.TokensEnd:
          this.onTokensEnd(m);
          this.opts.onPhase?.('delta');
          return;
      }
    }
  }

  private onBasisChecksums(m: BasisChecksums): void {
    this.table.add(m);
  }

  /** Match Tokens, final below `upTo`. upTo 0: nothing final yet (a receiver that waits for
   *  the whole list sends its tokens so, and Tokens End makes them final); otherwise the
   *  tokens end at or below upTo. */
  private onTokens(m: Tokens): void {
    const { tokens: t, H, frontier } = this;
    const n = this.list.count;
    if ((m.upTo < frontier || m.upTo > n) && !(m.upTo === 0 && frontier === 0)) throw bad(`Match Tokens up to chunk ${m.upTo} go back from ${frontier} or beyond the ${n} chunks sent`);
    for (let k = 0; k < m.first.length; k++) {
      const first = m.first[k];
      const count = m.count[k];
      if (count === 0 || first < Math.max(t.lastEnd(), frontier) || first + count > n) {
        throw bad(`token ${t.length} [${first}, +${count}) is empty, overlaps, lies below ${frontier} or beyond the ${n} chunks sent`);
      }
      t.push(first, count, m.hashes.subarray(k * H, (k + 1) * H));
    }
    const lastEnd = t.lastEnd();
    if (m.upTo > 0 && lastEnd > m.upTo) throw bad(`Match Tokens up to chunk ${m.upTo} hold a token ending at ${lastEnd}`);
    if (m.upTo > this.frontier) this.frontierMoved = performance.now();
    this.frontier = m.upTo;
    this.signal();
  }

  private onTokensEnd(m: TokensEnd): void {
    const { tokens: t } = this;
    const n = this.list.count;
    if (this.state === LISTING) throw bad('Tokens End before the Checksum List ended');
    if (m.count !== t.length) throw bad(`Tokens End says ${m.count} tokens, received ${t.length}`);
    if (m.resumeFrom > n || (m.resumeFrom > 0 && (this.frontier > 0 || (t.length && t.first[0] < m.resumeFrom)))) {
      throw bad(`resume from chunk ${m.resumeFrom} overlaps the tokens or exceeds ${n} chunks`);
    }
    this.resumeFrom = m.resumeFrom;
    this.frontier = n;
    this.tokensEnded = true;
    this.signal();
  }

  // -------------------------------------------------------------------------------------------
  // Phase 3: the Verdicts (the Delta Bytes below them are delta-sender.ts's)

  /**
   * Confirms each token below `end` by its run hash (splitting large failed ones, a round trip
   * that comes after Tokens End, so that one strand reads at a time) and sends the Verdict up
   * to `end`. The last Verdict carries the root.
   */
  private async judge(end: number): Promise<void> {
    const { tokens: t, list } = this;
    const from = this.nextToken;
    let te = from;
    while (te < t.length && t.end(te) <= end) te++;
    const failed: Failed[] = [];
    const toSplit: number[] = [];
    for (let k = from; k < te; k++) {
      if (this.confirmed(k)) this.held.fill(1, t.first[k], t.end(k));
      else if (this.splittable(k)) toSplit.push(k);
      else failed.push({ token: k, bitmap: null });
    }
    this.nextToken = te;
    if (toSplit.length) {
      failed.push(...(await this.split(toSplit)));
      failed.sort((a, b) => a.token - b.token);
    }
    this.failedTokens += failed.length;
    if (this.tokensEnded && end === list.count) this.root = runHash(this.algo, list.hashes, 0, list.count);
    await this.conn.send({ type: Msg.Verdict, upTo: end, root: this.root, failed });
    this.judgedTo = end;
  }

  /** Asks for the chunk hashes of failed tokens (Split Request) and marks the chunks that
   *  match; returns their verdicts. */
  private async split(toSplit: number[]): Promise<Failed[]> {
    const { tokens: t, list, H } = this;
    const failed: Failed[] = [];
    await this.conn.send({ type: Msg.SplitRequest, tokens: Uint32Array.from(toSplit) });
    for (const s of toSplit) {
      const m = await this.conn.expect(Msg.SplitHashes);
      if (m.token !== s || m.hashes.length !== t.count[s] * H) throw bad(`Split Hashes for token ${m.token} do not answer the request`);
      const bitmap = new Uint8Array(Math.ceil(t.count[s] / 8));
      for (let j = 0; j < t.count[s]; j++) {
        const i = t.first[s] + j;
        if (equalBytes(list.hashes.subarray(i * H, (i + 1) * H), m.hashes.subarray(j * H, (j + 1) * H))) {
          bitmap[j >> 3] |= 1 << (j & 7);
          this.held[i] = 1;
        }
      }
      failed.push({ token: s, bitmap });
    }
    return failed;
  }

  private finish(result: Result): SendOutcome {
    const { list, target } = this;
    const { literalBytes, refinedBytes } = this.delta;
    // (the Result carries the first ROOT_PREFIX bytes of the root the receiver verified the
    // rebuilt file against: the one the last Verdict gave it whole)
    if (!equalBytes(result.root, this.root!.subarray(0, ROOT_PREFIX))) {
      throw new ProtocolError(ErrorCode.VerifyFailed, 'the receiver reports a different file than the one sent');
    }
    result = { ...result, root: this.root! };
    const resumedBytes = list.offsets[this.resumeFrom];
    return {
      result,
      matchedBytes: target.size - literalBytes - resumedBytes,
      refinedBytes,
      literalBytes,
      resumedBytes,
      chunks: list.count,
      tokens: this.tokens.length,
      failedTokens: this.failedTokens,
      lengths: list.lengths.subarray(0, list.count),
      hashes: list.hashes.subarray(0, list.count * this.H),
    };
  }
}

/**
 * The sender against a known basis (Hello's `known`; docs/protocol.md §3, "A known basis"): it
 * finds its chunks in the basis' index itself as their hashes come (`KnownMatcher`) and sends
 * those Match Tokens as Copies among the Checksums, each part before the Verdict that judges
 * it. The receiver sends no Match Tokens, no Basis Checksums and no Tokens End: the list ends
 * once every chunk is hashed and matched, and the matching is final with it.
 */
class KnownBasisSender extends Sender {
  private readonly matcher: KnownMatcher;
  /** the chunks listed (as Checksums or Copies) */
  private listedTo = 0;
  /** the Match Tokens listed as Copies */
  private tokensListed = 0;

  constructor(conn: Conn, algo: number, target: TargetList, source: Source, opts: SenderOptions, known: KnownVersion) {
    super(conn, algo, target, source, opts);
    this.matcher = new KnownMatcher(known, this.H);
  }

  /** Matches the chunks hashed so far and lists those matched for good, once the chunks among
   *  them that no run covers hold KNOWN_HOLD_BYTES (`listKnown`); the Verdicts judge what is
   *  listed. */
  protected override async listPart(): Promise<void> {
    const { matcher, list } = this;
    this.tokens.pushOwn(matcher.feed(list, list.hashed));
    if (this.lacking(matcher.frontier) >= KNOWN_HOLD_BYTES) await this.listKnown(matcher.frontier);
    this.frontier = this.listedTo;
  }

  /** Bytes of the chunks in [listedTo, upTo) that no run covers. */
  private lacking(upTo: number): number {
    const { tokens: t, list } = this;
    const { offsets } = list;
    let at = this.listedTo;
    let bytes = 0;
    for (let k = this.tokensListed; k < t.length && t.first[k] < upTo; k++) {
      bytes += offsets[t.first[k]] - offsets[at];
      at = t.end(k);
    }
    return bytes + Math.max(0, offsets[upTo] - offsets[at]);
  }

  /** Every chunk is hashed and matched (the parts are done). */
  protected override covered(r: IteratorResult<ListPart> | null): boolean {
    return !!r?.done;
  }

  /** Every chunk is hashed and fed by now: the last run closes. */
  protected override async endList(): Promise<void> {
    this.tokens.pushOwn(this.matcher.end());
    await this.listKnown(this.list.count);
  }

  /** No Checksums End: the last Verdict, which comes once every chunk is listed, ends the list
   *  (docs/protocol.md §3 "A known basis"). */
  protected override async sendListEnd(): Promise<void> {}

  protected override enterHashed(): void {
    super.enterHashed();
    if (!this.tokensEnded) {
      this.frontier = this.list.count;
      this.tokensEnded = true;
    }
  }

  /** No Match Tokens come, and no Ready (`beforeTokens`: none on a push against a known
   *  version). */
  protected override async readReceiver(): Promise<void> {
    await this.opts.beforeTokens?.();
  }

  /**
   * Lists the chunks below `upTo` (hashed, and matched for good): each
   * run of them found in the basis as a Copies run, the receiver taking their lengths and
   * FastFps from the basis index, with the chunks before it that no run covers; the chunks
   * after the last run as Checksums.
   */
  private async listKnown(upTo: number): Promise<void> {
    const { tokens: t, list } = this;
    const next = () => (this.tokensListed < t.length && t.first[this.tokensListed] < upTo ? t.first[this.tokensListed] : -1);
    while (next() >= 0) {
      // a long stretch without runs goes as Checksums, in batches
      if (next() - this.listedTo >= LIST_BATCH) {
        await this.sendChecksums(this.listedTo, next());
        this.listedTo = next();
      }
      const from = this.listedTo;
      const listed: number[] = [];
      const count: number[] = [];
      const basisFirst: number[] = [];
      while (next() >= 0 && next() - from < LIST_BATCH && listed.length < LIST_BATCH) {
        const k = this.tokensListed++;
        listed.push(t.first[k] - this.listedTo);
        count.push(t.count[k]);
        basisFirst.push(t.basisFirst[k]);
        this.listedTo = t.end(k);
      }
      const chunks: number[] = [];
      for (let k = 0, at = from; k < listed.length; at += listed[k] + count[k], k++) for (let i = at; i < at + listed[k]; i++) chunks.push(i);
      const fastfps = Uint32Array.from(chunks, (i) => list.fastfps[i]);
      const lengths = Uint32Array.from(chunks, (i) => list.lengths[i]);
      await this.conn.send({ type: Msg.Copies, listed: Uint32Array.from(listed), fastfps, lengths, count: Uint32Array.from(count), basisFirst: Uint32Array.from(basisFirst) }, { wait: false });
    }
    if (this.listedTo < upTo) {
      await this.sendChecksums(this.listedTo, upTo);
      this.listedTo = upTo;
    }
  }
}
