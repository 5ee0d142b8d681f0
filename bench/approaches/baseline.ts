/**
 * What the baselines (webr2sync+, dedup, full) share: their message layer (bench/eval/wire.ts)
 * over one WebSocket to bench/eval/baseline-server.ts — Hello, the approach's own upload, End,
 * Result — and, for the two that send a list, the Have bitmap and the literal units it asks for.
 */
import type WebSocket from 'ws';
import type { Source } from '../../shared/src/chunking/chunk-index.ts';
import { StrongHasher } from '../../shared/src/chunking/wasm.ts';
import { MsgConn, T, json, literalFrame, parseJson } from '../eval/wire.ts';
import type { Prepared, Report } from './approach.ts';
import { socketBytes } from './dsync.ts';

/** Whole-file hash the baselines verify with (BLAKE3, computed in wasm on both sides). */
export const FILE_ALGO = 3;
/** Bytes per read while hashing a Source: a multiple of the webr2sync+ block. */
const SLICE = 64 << 20;

export const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** Reads the whole source in slices, handing each to `each`, and returns its FILE_ALGO hash. */
export async function hashWhole(source: Source, each?: (b: Uint8Array) => void): Promise<Uint8Array> {
  const h = new StrongHasher(FILE_ALGO);
  for (let off = 0; off < source.size; off += SLICE) {
    const b = await source.read(off, Math.min(SLICE, source.size - off));
    each?.(b);
    h.update(b);
  }
  const root = h.digest();
  h.free();
  return root;
}

/** One baseline sync: Hello, the approach's `upload` (returns the literal bytes it sent), End,
 *  and the server's Result. */
export async function baselineSession(p: Prepared, ws: WebSocket, name: string, upload: (c: MsgConn) => Promise<number>): Promise<Omit<Report, 'connectMs'>> {
  const t0 = performance.now();
  const wire0 = socketBytes(ws);
  const c = new MsgConn(ws);
  try {
    const root = p.index ? p.index.root : p.root!;
    await c.send(json(T.Hello, { approach: p.approach, name, size: p.size, root: hex(root) }));
    const literal = await upload(c);
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

/** After the list: ListEnd, the server's Have bitmap, and every unit i (bytes [off[i],
 *  off[i+1])) it does not have, as Literal frames. Returns the bytes sent. */
export async function sendMissing(c: MsgConn, source: Source, off: Float64Array): Promise<number> {
  await c.send(Uint8Array.of(T.ListEnd));
  const have = await c.recv(T.Have);
  return sendLiterals(c, source, off, (i) => (have[1 + (i >> 3)] & (1 << (i & 7))) !== 0);
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

/** Server side: the list frames of `type` until ListEnd. */
export async function readList(c: MsgConn, type: number): Promise<Uint8Array[]> {
  const frames: Uint8Array[] = [];
  for (;;) {
    const f = await c.recv(type, T.ListEnd);
    if (f[0] === T.ListEnd) return frames;
    frames.push(f);
  }
}
