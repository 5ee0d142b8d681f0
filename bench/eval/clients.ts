/**
 * The client side of every approach, split into `prepare` (the client's own computation on
 * the target before it connects: chunking, hashing) and `syncPrepared` (the session over one
 * WebSocket), so the benchmark can time both and the load harness can precompute the first.
 * Dsync prepares nothing: it chunks and hashes inside the session, while its Delta Bytes go
 * out (unless the load harness precomputed its index). Reports use the
 * same fields as Dsync's SyncReport: time split into client / server / network, traffic per
 * protocol part before compression, and wire bytes (the socket's, after permessage-deflate).
 */
import WebSocket from 'ws';
import { type ChunkIndex, type Source, chunkSource, offsetsOf } from '../../shared/src/chunk-index.ts';
import { Conn, type Traffic, type WebSocketLike } from '../../shared/src/conn.ts';
import { DEFAULT_FINE, DEFAULT_PARAMS, hashLength } from '../../shared/src/protocol.ts';
import { type KnownVersion, MemoryKnown, fineIndex, knownKey } from '../../shared/src/known.ts';
import { planKnown, pushSession, remember } from '../../shared/src/sync-client.ts';
import { StrongHasher } from '../../shared/src/wasm.ts';
import { webr2sync_block_hashes } from '../lib/baselines.ts';
import { BLOCK, DEDUP_ALGO, FILE_ALGO } from './baseline-server.ts';
import { MsgConn, T, frame, json, literalFrame, parseJson, u32 } from './wire.ts';

export const APPROACHES = ['dsync', 'dsync-known', 'dsync-paper', 'webr2sync+', 'dedup', 'full'] as const;
export type Approach = (typeof APPROACHES)[number];
/** Dsync's approaches: the three phases (`dsync`), the product client re-pushing a file it
 *  pushed before (`dsync-known`: against the version it knows when little is new, one round
 *  trip, docs/protocol.md §3), and the paper-exact server (`dsync-paper`). */
export const isDsync = (a: Approach) => a === 'dsync' || a === 'dsync-known' || a === 'dsync-paper';
/** The strong hash Dsync uses: the product default (BLAKE3), and SHA-1 in the paper-exact run. */
export const dsyncAlgo = (a: Approach) => (a === 'dsync-paper' ? 1 : 3);
/** What `dsync-known` clients remember: the last version each pushed of each name (the bench
 *  runs one server per approach at a time, so the name is the key). */
let knownVersions = new MemoryKnown(1 << 30);
/** A new server (a new data directory) holds none of the versions remembered. */
export const forgetKnown = () => void (knownVersions = new MemoryKnown(1 << 30));

export interface Report {
  approach: Approach;
  size: number;
  timeMs: { client: number; server: number; network: number; total: number };
  /** opening the WebSocket (TCP + upgrade), before the sync: added to `total` on a cold sync,
   *  left out of it on a warm one */
  connectMs: number;
  traffic: Traffic & { wire: number };
  literalBytes: number;
  /** dsync: Match Tokens received; webr2sync+: weak lookups on the server */
  tokens?: number;
  lookups?: number;
}

export interface Prepared {
  approach: Approach;
  source: Source;
  size: number;
  /** wall and CPU milliseconds of the client's computation before the session */
  prepMs: number;
  prepCpuMs: number;
  /** dedup; dsync when its index was precomputed (load harness) */
  index?: ChunkIndex;
  /** dsync-known with a precomputed index: the finer cut it keeps after a push (load harness) */
  fine?: KnownVersion['fine'];
  triples?: Uint32Array;
  root?: Uint8Array;
}

/** Bytes per read while hashing a Source: a multiple of the webr2sync+ block. */
const SLICE = 64 << 20;
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const r1 = (x: number) => Math.round(x * 10) / 10;
const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/** The client's computation on the target, before any network traffic. `hashes`: for dsync,
 *  chunk and hash now instead of during the session (load harness). */
export async function prepare(approach: Approach, source: Source, { hashes = false } = {}): Promise<Prepared> {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const p: Prepared = { approach, source, size: source.size, prepMs: 0, prepCpuMs: 0 };
  if (isDsync(approach)) {
    if (hashes) p.index = await chunkSource(source, DEFAULT_PARAMS, dsyncAlgo(approach));
    if (hashes && approach === 'dsync-known') p.fine = await fineIndex(source, DEFAULT_FINE, dsyncAlgo(approach));
  } else if (approach === 'dedup') p.index = await chunkSource(source, DEFAULT_PARAMS, DEDUP_ALGO);
  else {
    // webr2sync+: Adler-32 + SipHash per 8 KB block; both: a whole-file hash to verify with.
    const h = new StrongHasher(FILE_ALGO);
    const parts: Uint32Array[] = [];
    for (let off = 0; off < source.size; off += SLICE) {
      const b = await source.read(off, Math.min(SLICE, source.size - off));
      if (approach === 'webr2sync+') parts.push(webr2sync_block_hashes(b, BLOCK));
      h.update(b);
    }
    p.root = h.digest();
    h.free();
    if (approach === 'webr2sync+') {
      p.triples = new Uint32Array(parts.reduce((s, x) => s + x.length, 0));
      let o = 0;
      for (const x of parts) (p.triples.set(x, o), (o += x.length));
    }
  }
  p.prepMs = performance.now() - t0;
  p.prepCpuMs = cpuMs(process.cpuUsage(c0));
  return p;
}

export function openWs(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { maxPayload: 64 << 20 }); // permessage-deflate on (ws default)
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}
const socketBytes = (ws: WebSocket) => {
  const s = (ws as unknown as { _socket: { bytesRead: number; bytesWritten: number } })._socket;
  return s.bytesRead + s.bytesWritten;
};

/**
 * One sync of a prepared target to `base` (ws://host:port; Dsync's path /sync is added).
 * `withPrep` adds the preparation to client and total time (benchmark), or leaves it out
 * (load harness, where it was done before the timed run). `warm`: the WebSocket is opened
 * before the sync starts, as a page holds its socket open (the paper's setting); its opening
 * is reported as `connectMs`, outside the sync's times. Cold, the opening is part of them.
 */
export async function syncPrepared(p: Prepared, base: string, name: string, withPrep = true, warm = false): Promise<Report> {
  const dsync = isDsync(p.approach);
  const c0 = process.cpuUsage();
  const tc = performance.now();
  const ws = await openWs(dsync ? base + '/sync' : base);
  const connectMs = performance.now() - tc;
  const r: Report = { ...(dsync ? await dsyncSession(p, ws, name) : await baselineSession(p, ws, name)), connectMs };
  if (!warm) r.timeMs.total += connectMs;
  // Client time is the client process' CPU time (all its threads: zlib, GC), so that waiting
  // on a full socket buffer does not count as client work; it is the only work this process
  // does during a benchmark sync.
  r.timeMs.client = cpuMs(process.cpuUsage(c0));
  if (withPrep) {
    r.timeMs.client += p.prepCpuMs;
    r.timeMs.total += p.prepMs;
  }
  const t = r.timeMs;
  t.network = Math.max(0, t.total - t.client - t.server);
  for (const k of Object.keys(t) as (keyof typeof t)[]) t[k] = r1(t[k]);
  r.connectMs = r1(r.connectMs);
  return r;
}

/** Dsync's push: the session of shared/src/sync-client.ts push() (`pushSession`), on an index
 *  precomputed or made as it goes, against the version this client pushed before for
 *  `dsync-known`. */
async function dsyncSession(p: Prepared, ws: WebSocket, name: string): Promise<Omit<Report, 'connectMs'>> {
  const t0 = performance.now();
  const wire0 = socketBytes(ws);
  const conn = new Conn(ws as unknown as WebSocketLike);
  const algo = dsyncAlgo(p.approach);
  try {
    const known = p.approach === 'dsync-known' ? knownVersions : null;
    const key = knownKey('bench', name);
    const { index, against } = known ? await planKnown(p.source, DEFAULT_PARAMS, algo, known.get(key), { index: p.index }) : { index: p.index, against: null };
    const out = await pushSession(conn, p.source, { name, params: DEFAULT_PARAMS, algo, index, against });
    const tEnd = performance.now();
    // after the Result, as push() does: outside the sync's time, inside the client's CPU time
    if (known) await remember(known, key, out, DEFAULT_PARAMS, algo, p.source, p.fine);
    return {
      approach: p.approach,
      size: p.size,
      timeMs: { client: 0 /* syncPrepared: CPU time */, server: out.result.micros / 1000, network: 0, total: tEnd - t0 },
      traffic: { ...conn.traffic, wire: socketBytes(ws) - wire0 },
      literalBytes: out.literalBytes,
      tokens: out.tokens,
    };
  } finally {
    conn.close(1000, 'done');
  }
}

/** Sends, as Literal frames of at most 1 MiB, every unit i (bytes [off[i], off[i+1])) that
 *  the server does not have, reading contiguous runs at once. */
async function sendLiterals(c: MsgConn, source: Source, off: Float64Array, have: (i: number) => boolean): Promise<number> {
  const n = off.length - 1;
  let sent = 0;
  let ix: number[] = [];
  let chunks: Uint8Array[] = [];
  let bytes = 0;
  const flush = async () => {
    if (ix.length) await c.send(literalFrame(ix, chunks));
    ix = [];
    chunks = [];
    bytes = 0;
  };
  for (let i = 0; i < n; ) {
    if (have(i)) {
      i++;
      continue;
    }
    let j = i + 1;
    while (j < n && !have(j) && off[j + 1] - off[i] <= 1 << 20) j++;
    const run = await source.read(off[i], off[j] - off[i]);
    for (let k = i; k < j; k++) {
      const b = run.subarray(off[k] - off[i], off[k + 1] - off[i]);
      if (bytes + b.length > 1 << 20) await flush();
      ix.push(k);
      chunks.push(b);
      bytes += b.length;
      sent += b.length;
    }
    i = j;
  }
  await flush();
  return sent;
}

async function baselineSession(p: Prepared, ws: WebSocket, name: string): Promise<Omit<Report, 'connectMs'>> {
  const t0 = performance.now();
  const wire0 = socketBytes(ws);
  const c = new MsgConn(ws);
  let literal = 0;
  try {
    const root = p.index ? p.index.root : p.root!;
    await c.send(json(T.Hello, { approach: p.approach, name, size: p.size, root: hex(root) }));
    if (p.approach === 'full') {
      for (let off = 0; off < p.size; off += 1 << 20) {
        const b = await p.source.read(off, Math.min(1 << 20, p.size - off));
        await c.send(frame(T.Data, b));
        literal += b.length;
      }
    } else {
      let n: number;
      let off: Float64Array;
      if (p.approach === 'webr2sync+') {
        const tr = p.triples!;
        n = tr.length / 3;
        for (let i = 0; i < n; i += 8192) await c.send(frame(T.Blocks, new Uint8Array(3), u32(tr.subarray(3 * i, 3 * Math.min(n, i + 8192)))));
        off = new Float64Array(n + 1);
        for (let i = 0; i <= n; i++) off[i] = Math.min(i * BLOCK, p.size);
      } else {
        const ix = p.index!;
        const H = hashLength(DEDUP_ALGO);
        n = ix.lengths.length;
        for (let i = 0; i < n; i += 8192) {
          const e = Math.min(n, i + 8192);
          await c.send(frame(T.Hashes, new Uint8Array(3), u32(Uint32Array.of(e - i)), u32(ix.lengths.subarray(i, e)), ix.hashes.subarray(i * H, e * H)));
        }
        off = offsetsOf(ix.lengths);
      }
      await c.send(Uint8Array.of(T.ListEnd));
      const have = await c.recv(T.Have);
      literal = await sendLiterals(c, p.source, off, (i) => (have[1 + (i >> 3)] & (1 << (i & 7))) !== 0);
    }
    await c.send(Uint8Array.of(T.End));
    const res = parseJson(await c.recv(T.Result));
    if (!res.ok) throw new Error(`${p.approach} server: ${res.error}`);
    if (res.size !== p.size) throw new Error(`${p.approach} server stored ${res.size} bytes, sent ${p.size}`);
    const tEnd = performance.now();
    return {
      approach: p.approach,
      size: p.size,
      timeMs: { client: 0 /* syncPrepared: CPU time */, server: res.serverMs, network: 0, total: tEnd - t0 },
      traffic: { ...c.traffic, wire: socketBytes(ws) - wire0 },
      literalBytes: literal,
      lookups: res.lookups,
    };
  } finally {
    ws.close(1000, 'done');
  }
}
