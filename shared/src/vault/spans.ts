/**
 * Span-parallel chunking of a push (docs/vaults.md, "Chunk workers"): the file is cut into
 * spans of SPAN_BYTES, and each span is read, cut with the keyed chunker and given its keyed
 * ids by a chunk worker, which then seals the chunks the vault lacks. The chunks are exactly
 * the serial chunker's: a worker cuts its span as if a chunk started at the span's first byte
 * and goes on SPAN_OVERLAP bytes into the next span, keeping only the chunks it saw whole (at
 * least `max` bytes after their start, or the file's end: what FastCDC looks at). FastCDC
 * restarts at every cut, so once a cut of one span's list is a cut of the next's, every later
 * cut of the next is the serial chunker's; `joinLists` takes each list up to the first cut the
 * next one shares, and a list that shares none is cut again from the last true cut (as slowly
 * as serial chunking, and as right). The ids are computed from the very chunks joined, so a
 * device that cuts serially (a file of up to a span) names the same chunks (and the version's
 * root, over the ids, is the same). The workers are the page's Web Workers
 * (client/src/vault-chunk-worker.ts) or the CLI's worker threads (spans-node.ts).
 */
import { SpanCutter } from '../../../wasm/pkg/dsync_wasm.js';
import type { Source } from '../chunking/chunk-index.ts';
import { CONTENT_PARAMS, keyedChunks, openVerified } from './chunks.ts';
import { ID_BYTES, Kind, type SealCode, VaultError, sealOverhead } from './format.ts';
import { type ContentCipher, type SealedChunks, type VaultKeys, sealContent, sealedParts, webCipher } from './keys.ts';

/** A span's bytes: a worker reads, cuts and hashes this much at once. */
export const SPAN_BYTES = 16 << 20;
/** How far a worker reads into the next span, for its cuts to meet the next list's: well past
 *  the largest chunk (64 KiB), so a few dozen chunks on ordinary bytes. */
export const SPAN_OVERLAP = 1 << 20;
/** Spans requested ahead of the one being joined, per worker. */
const AHEAD_PER_WORKER = 2;

/** What a chunk worker holds of an open vault: the chunking and id keys, and the content key to
 *  seal with (a non-extractable CryptoKey; the metadata key stays with the vault). */
export type ChunkKeys = Pick<VaultKeys, 'id' | 'idBytes' | 'gear' | 'chunkId' | 'stream' | 'content'>;
/** A worker's keys of an open vault's (only these: not its metadata key). */
export const chunkKeys = ({ id, idBytes, gear, chunkId, stream, content }: ChunkKeys): ChunkKeys => ({ id, idBytes, gear, chunkId, stream, content });

/** A list of consecutive chunks starting at `from`: only those the worker saw whole. */
export interface CutList {
  from: number;
  lengths: Uint32Array;
}

/** A worker's cut of [from, to): the keyed chunks and their ids. */
export type SpanCut = CutList & { ids: Uint8Array };

export type SpanRequest<F> =
  | { op: 'keys'; keys: ChunkKeys }
  /** reads [from, to) of `file` (`final`: to is the file's end), cuts it, and holds the bytes
   *  for `seal` until `drop` */
  | { op: 'cut'; span: number; file: F; from: number; to: number; final: boolean }
  /** seals the chunks of span `span` at these offsets (from its `from`), lengths and ids, their
   *  ciphertexts into `room` (handed over, and back with the answer) */
  | { op: 'seal'; span: number; offsets: Uint32Array; lengths: Uint32Array; ids: Uint8Array; room?: Uint8Array }
  | { op: 'drop'; span: number }
  /** opens the content chunks at `at` (lengths, ids, seals) of `bytes` (a range of a pack),
   *  each checked against its id */
  | { op: 'open'; bytes: Uint8Array; at: Uint32Array; lengths: Uint32Array; ids: Uint8Array; seals: Uint8Array };

/** A seal's answer: the sealed chunks (keys.ts `SealedChunks`); an open's: the plaintexts one
 *  after another, or why a chunk was refused (a VaultError's words). */
export type SpanReply = SpanCut | SealedChunks | Uint8Array | { refused: string } | null;

/** The buffers of `arrays` that are wholly theirs, each once (a cipher's output of a few bytes
 *  may lie in a pool shared with others: that is copied, not handed over). */
const ownBuffers = (arrays: ArrayBufferView[]): ArrayBuffer[] => [...new Set(arrays.filter((a) => a.byteOffset === 0 && a.byteLength === a.buffer.byteLength).map((a) => a.buffer as ArrayBuffer))];

/** What a request to a chunk worker hands over rather than copies (the page's and the CLI's
 *  workers): a pull's range of a pack, a seal's room. */
export function requestTransfer<F>(m: SpanRequest<F>): ArrayBuffer[] {
  if (m.op === 'open') return ownBuffers([m.bytes]);
  return m.op === 'seal' && m.room ? ownBuffers([m.room]) : [];
}

/** What a chunk worker's answer hands over rather than copies: its arrays' buffers (a seal's
 *  runs lie in its room, handed back so). */
export function replyTransfer(r: SpanReply): ArrayBuffer[] {
  if (!r || 'refused' in r) return [];
  if (r instanceof Uint8Array) return ownBuffers([r]);
  return ownBuffers('heads' in r ? [r.heads, ...r.runs] : [r.lengths, r.ids]);
}

/** The keyed chunking of `bytes`, the file's bytes from some offset on, as if a chunk started
 *  at its first byte, and the chunks' ids; `final`: they reach the file's end (every chunk is
 *  then whole), else only the chunks followed by at least `max` bytes are kept. One copy of the
 *  bytes into wasm memory serves the chunking and the hashing (`SpanCutter`). */
export function cutSpan(k: Pick<ChunkKeys, 'gear' | 'chunkId'>, bytes: Uint8Array, from: number, final: boolean): SpanCut {
  const c = CONTENT_PARAMS;
  const cutter = new SpanCutter(Uint32Array.of(c.min, c.avg, c.max, c.op, c.every), k.gear, k.chunkId);
  try {
    cutter.cut(bytes, final);
    return { from, lengths: cutter.keyed_lengths(), ids: cutter.ids() };
  } finally {
    cutter.free();
  }
}

/** A chunk worker's side: answers requests one at a time, in order, but for a seal or an open,
 *  which goes before the cuts waiting (a span's seal is asked for only once its cut was
 *  answered, and the thread that waits for it packs and uploads meanwhile, where behind the
 *  spans cut ahead it waited idle: bench/results/vault-cli.md). `read(file, from, to)`
 *  gives the file's bytes (the page: a slice of the picked File), and `release` is handed them
 *  back once the span is dropped (nothing here holds them then); `cipher` seals a span's
 *  chunks (one call, keys.ts `sealContent`) and opens them (default: WebCrypto's); an opened
 *  chunk is checked against its id (`openVerified`). */
export function serveSpans<F>(ready: Promise<unknown>, read: (file: F, from: number, to: number) => Promise<Uint8Array>, cipher: ContentCipher = webCipher, release?: (bytes: Uint8Array) => void): (m: SpanRequest<F>) => Promise<SpanReply> {
  let keys: ChunkKeys | null = null;
  const held = new Map<number, Uint8Array>();
  const one = async (m: SpanRequest<F>): Promise<SpanReply> => {
    if (m.op === 'keys') {
      keys = m.keys;
      return null;
    }
    if (m.op === 'drop') {
      const bytes = held.get(m.span);
      held.delete(m.span);
      if (bytes) release?.(bytes);
      return null;
    }
    if (!keys) throw new Error('a chunk worker was given no keys');
    if (m.op === 'open') {
      let total = 0;
      m.lengths.forEach((l, i) => (total += l - sealOverhead(m.seals[i] as SealCode)));
      const out = new Uint8Array(total);
      let at = 0;
      try {
        await Promise.all(
          Array.from(m.lengths, async (l, i) => {
            const into = at;
            at += l - sealOverhead(m.seals[i] as SealCode);
            out.set(await openVerified(keys!, Kind.Content, m.ids.subarray(i * ID_BYTES, (i + 1) * ID_BYTES), m.seals[i] as SealCode, m.bytes.subarray(m.at[i], m.at[i] + l), cipher), into);
          }),
        );
      } catch (e) {
        if (e instanceof VaultError) return { refused: e.message };
        throw e;
      }
      return out;
    }
    if (m.op === 'cut') {
      const bytes = await read(m.file, m.from, m.to);
      if (bytes.length !== m.to - m.from) throw new Error(`the file ended at ${m.from + bytes.length} bytes, before ${m.to}`);
      held.set(m.span, bytes);
      return cutSpan(keys, bytes, m.from, m.final);
    }
    const bytes = held.get(m.span);
    if (!bytes) throw new Error(`a chunk worker holds no span ${m.span}`);
    const ids = Array.from(m.lengths, (_, i) => m.ids.subarray(i * ID_BYTES, (i + 1) * ID_BYTES));
    return sealContent(cipher, keys, ids, Array.from(m.lengths, (l, i) => bytes.subarray(m.offsets[i], m.offsets[i] + l)), m.room);
  };
  const waiting: { m: SpanRequest<F>; resolve: (r: SpanReply) => void; reject: (e: unknown) => void }[] = [];
  let running = false;
  const next = async () => {
    if (running) return;
    running = true;
    while (waiting.length) {
      const urgent = waiting.findIndex((w) => w.m.op === 'seal' || w.m.op === 'open');
      const [w] = waiting.splice(Math.max(0, urgent), 1);
      await ready.then(() => one(w.m)).then(w.resolve, w.reject);
    }
    running = false;
  };
  return (m) =>
    new Promise<SpanReply>((resolve, reject) => {
      waiting.push({ m, resolve, reject });
      void next();
    });
}

/** One chunk worker as the coordinator sees it (a Web Worker, or `serveSpans` in the same
 *  thread). Requests are answered in the order they are made, but for seals and opens, which go
 *  before the cuts waiting. */
export interface SpanWorker<F> {
  request(m: SpanRequest<F>): Promise<SpanReply>;
}

/** Where `joinLists` is: the list whose chunks are being taken, its next chunk and where that
 *  starts in the file (a cut of the serial chunking). */
export interface JoinAt<L extends CutList> {
  list: L;
  next: number;
  pos: number;
}

/**
 * Takes the chunks of `at.list` from `at.next` on, handing each to `take`, up to the first
 * cut at or after `list.from` that is also a cut of `list`: the chunks before it are the
 * serial chunker's (by induction: `at` is), and from it on so are `list`'s. Answers where to go
 * on in `list`, or null when `at.list` ran out first (no shared cut: `at` is then past its
 * last chunk, at a true cut, from which `list`'s bytes must be cut again).
 */
export function joinLists<L extends CutList, N extends CutList>(at: JoinAt<L>, list: N, take: (l: L, i: number, pos: number) => void): JoinAt<N> | null {
  const cuts = new Map<number, number>();
  let p = list.from;
  for (let i = 0; i <= list.lengths.length; i++) {
    cuts.set(p, i);
    p += list.lengths[i] ?? 0;
  }
  for (;;) {
    const i = at.pos >= list.from ? cuts.get(at.pos) : undefined;
    if (i !== undefined) return { list, next: i, pos: at.pos };
    if (at.next >= at.list.lengths.length) return null;
    take(at.list, at.next, at.pos);
    at.pos += at.list.lengths[at.next];
    at.next++;
  }
}

/** A batch of a file's chunks, in order, whose bytes one worker holds: their offsets, lengths
 *  and ids, and how to seal those of them the vault lacks. */
export interface CutBatch {
  offsets: number[];
  lengths: number[];
  ids: Uint8Array[];
  /** the sealed chunks at these indexes of the batch, in that order, each as its parts (keys.ts
   *  `sealedParts`) */
  seal(which: number[]): Promise<Uint8Array[][]>;
  /** tells that the sealed chunks were copied where they go (packs.ts `place`): their bytes
   *  may be written over by a later seal */
  placed(): void;
}

/** A file's chunks as a push takes them, in batches, each sealed (or not) before the next is
 *  asked for. */
export interface FileCut {
  batches: AsyncGenerator<CutBatch>;
}

/** A file's chunks cut on this thread (a small file's, in the CLI and the page), and sealed here. */
export function serialChunks(k: VaultKeys, source: Source): FileCut {
  async function* batches(): AsyncGenerator<CutBatch> {
    for await (const chunks of keyedChunks(k, source)) {
      yield {
        offsets: chunks.map((c) => c.offset),
        lengths: chunks.map((c) => c.bytes.length),
        ids: chunks.map((c) => c.id),
        seal: async (which) => sealedParts(await sealContent(webCipher, k, which.map((i) => chunks[i].id), which.map((i) => chunks[i].bytes)), which.map((i) => chunks[i].bytes.length)),
        placed: () => {},
      };
    }
  }
  return { batches: batches() };
}

/**
 * A file's chunks cut by `workers` in spans (see the module's comment), in order, in batches.
 * Each batch must be sealed (or not) before the next is asked for. `onCut` sees how far the
 * chunks reach.
 */
export function spanChunks<F>(workers: SpanWorker<F>[], file: F, size: number, o: { span?: number; overlap?: number; onCut?: (end: number) => void } = {}): FileCut & { settled(): Promise<void> } {
  const spanBytes = o.span ?? SPAN_BYTES;
  const overlap = o.overlap ?? SPAN_OVERLAP;
  const count = Math.max(1, Math.ceil(size / spanBytes));
  type Keyed = SpanCut & { span: number; worker: number };
  let nextSpan = 0;
  let nextWorker = 0;
  /** every span requested with its worker, until dropped */
  const live = new Map<number, number>();
  /** the reads of `file` under way (`settled`) */
  const reading = new Set<Promise<SpanReply>>();
  const cut = (from: number, to: number): Promise<Keyed> => {
    const span = nextSpan++;
    const worker = nextWorker++ % workers.length;
    live.set(span, worker);
    const r = workers[worker].request({ op: 'cut', span, file, from, to, final: to === size });
    reading.add(r);
    const done = () => void reading.delete(r);
    r.then(done, done);
    return r.then((c) => ({ ...(c as SpanCut), span, worker }));
  };
  const ends = (i: number) => ({ from: i * spanBytes, to: Math.min(size, (i + 1) * spanBytes + overlap) });
  /** rooms that seals wrote into and whose chunks were placed, for the next seals (a seal's
   *  room is handed to its worker and back) */
  const rooms: Uint8Array[] = [];
  const ROOMS_KEPT = 2 * workers.length;
  const sealRoom = (bytes: number) => {
    const i = rooms.findIndex((r) => r.length >= bytes);
    return i < 0 ? new Uint8Array(Math.max(bytes, spanBytes + overlap)) : rooms.splice(i, 1)[0];
  };
  async function* batches(): AsyncGenerator<CutBatch> {
    const ahead = AHEAD_PER_WORKER * workers.length;
    const pending: Promise<Keyed>[] = [];
    let requested = 0;
    const fill = () => {
      while (requested < count && pending.length < ahead) {
        const { from, to } = ends(requested++);
        const p = cut(from, to);
        p.catch(() => {}); // (awaited in turn)
        pending.push(p);
      }
    };
    fill();
    let keyedAt: JoinAt<Keyed> | null = null;
    let batch: { list: Keyed; offsets: number[]; lengths: number[]; ids: Uint8Array[] } | null = null;
    const out: CutBatch[] = [];
    const flush = () => {
      if (!batch || !batch.offsets.length) return;
      const b = batch;
      let room: Uint8Array | undefined;
      out.push({
        offsets: b.offsets,
        lengths: b.lengths,
        ids: b.ids,
        seal: async (which) => {
          if (!which.length) return [];
          const ids = new Uint8Array(which.length * ID_BYTES);
          which.forEach((w, i) => ids.set(b.ids[w], i * ID_BYTES));
          const lengths = which.map((w) => b.lengths[w]);
          const sealed = (await workers[b.list.worker].request({
            op: 'seal',
            span: b.list.span,
            offsets: Uint32Array.from(which, (w) => b.offsets[w] - b.list.from),
            lengths: Uint32Array.from(lengths),
            ids,
            room: sealRoom(lengths.reduce((n, l) => n + l, 0)),
          })) as SealedChunks;
          // (the room came back with the runs that lie in it)
          room = new Uint8Array(sealed.runs[0].buffer);
          return sealedParts(sealed, lengths);
        },
        placed: () => {
          if (room && rooms.length < ROOMS_KEPT) rooms.push(room);
          room = undefined;
        },
      });
      batch = { list: b.list, offsets: [], lengths: [], ids: [] };
    };
    const takeKeyed = (l: Keyed, i: number, pos: number) => {
      if (!batch || batch.list !== l) {
        flush();
        batch = { list: l, offsets: [], lengths: [], ids: [] };
      }
      batch.offsets.push(pos);
      batch.lengths.push(l.lengths[i]);
      batch.ids.push(l.ids.subarray(i * ID_BYTES, (i + 1) * ID_BYTES));
    };
    /** lists done with: their bytes dropped once their batches are sealed (a worker answers in
     *  order, and a batch is sealed before the next is asked for) */
    const drop = (l: { span: number; worker: number }) => {
      live.delete(l.span);
      void workers[l.worker].request({ op: 'drop', span: l.span }).catch(() => {});
    };
    const finished: Keyed[] = [];
    try {
      for (let i = 0; i < count; i++) {
        let keyed = await pending.shift()!;
        fill();
        const { to } = ends(i);
        if (!keyedAt) keyedAt = { list: keyed, next: 0, pos: 0 };
        else {
          const from = keyedAt.list;
          let joined: JoinAt<Keyed> | null = joinLists(keyedAt, keyed, takeKeyed);
          if (!joined) {
            // no cut shared: cut again from the last true cut (its bytes kept for sealing)
            drop(keyed);
            keyed = await cut(keyedAt.pos, to);
            joined = { list: keyed, next: 0, pos: keyedAt.pos };
          }
          keyedAt = joined;
          flush();
          finished.push(from);
        }
        yield* out.splice(0);
        finished.splice(0).forEach(drop);
        o.onCut?.(keyedAt!.pos);
      }
      // the last list reaches the file's end: all of it
      if (keyedAt) {
        while (keyedAt.next < keyedAt.list.lengths.length) {
          takeKeyed(keyedAt.list, keyedAt.next, keyedAt.pos);
          keyedAt.pos += keyedAt.list.lengths[keyedAt.next++];
        }
        flush();
        yield* out.splice(0);
        drop(keyedAt.list);
        o.onCut?.(keyedAt.pos);
      }
    } finally {
      // a push that failed or stopped: every span still held (or still being cut) dropped
      for (const [span, worker] of [...live]) drop({ span, worker });
    }
  }
  return {
    batches: batches(),
    // a push that failed leaves cuts under way: the caller closes `file` only after them
    settled: async () => void (await Promise.allSettled([...reading])),
  };
}

/** Opens content chunks of a pack's range elsewhere (a pull's): the plaintexts of `chunks` (where
 *  each starts in `bytes`, its sealed length, its id), each opened and checked against its id as
 *  `openVerified` does (a refusal is a VaultError). `bytes` is handed over: not to be used again. */
export type RangeOpener = (bytes: Uint8Array, chunks: { at: number; length: number; id: Uint8Array; seal: SealCode }[]) => Promise<Uint8Array[]>;

/** A RangeOpener over chunk workers, each range to the next worker in turn. */
export function openInWorkers<F>(workers: SpanWorker<F>[]): RangeOpener {
  let next = 0;
  return async (bytes, chunks) => {
    const ids = new Uint8Array(chunks.length * ID_BYTES);
    chunks.forEach((c, i) => ids.set(c.id, i * ID_BYTES));
    const lengths = Uint32Array.from(chunks, (c) => c.length);
    const seals = Uint8Array.from(chunks, (c) => c.seal);
    const got = await workers[next++ % workers.length].request({ op: 'open', bytes, at: Uint32Array.from(chunks, (c) => c.at), lengths, ids, seals });
    if (got && 'refused' in got) throw new VaultError(got.refused);
    const plain = got as Uint8Array;
    let at = 0;
    return chunks.map((c) => plain.subarray(at, (at += c.length - sealOverhead(c.seal))));
  };
}
