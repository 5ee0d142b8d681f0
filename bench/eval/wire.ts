/**
 * The bench-only message layer of the baselines (webr2sync+, dedup, full): one binary frame
 * per message over `ws`, first byte the type. It counts traffic per protocol part the way
 * shared/src/transport/conn.ts does for Dsync (frame bytes before compression, both directions), so the
 * approaches' numbers compare directly.
 */
import type { WebSocket } from 'ws';

export const T = {
  /** client -> server: JSON {approach, name, size, root (hex)} */
  Hello: 1,
  /** webr2sync+ Phase 1: [adler, sip_lo, sip_hi] u32 triples of consecutive blocks */
  Blocks: 2,
  /** dedup Phase 1: u32 n, n chunk lengths (u32), n strong hashes */
  Hashes: 3,
  /** end of the Phase-1 list */
  ListEnd: 4,
  /** server -> client: bitmap of the blocks / chunks the server has (webr2sync+ matched
   *  blocks, dedup present chunks); the client sends the others */
  Have: 5,
  /** literal blocks / chunks: u32 n, n indices, n lengths, then the bytes */
  Literal: 6,
  /** full: raw file bytes in order */
  Data: 7,
  End: 8,
  /** server -> client: JSON {ok, serverMs, size, error?} */
  Result: 9,
} as const;

/** The same per-part accounting as Dsync's connection. */
export type { Traffic } from '../../shared/src/transport/conn.ts';
import type { Traffic } from '../../shared/src/transport/conn.ts';

const part = (t: number): keyof Omit<Traffic, 'total'> =>
  t === T.Blocks || t === T.Hashes || t === T.ListEnd ? 'checksumList' : t === T.Have ? 'matchTokens' : t === T.Literal || t === T.Data ? 'delta' : 'control';

export const frame = (type: number, ...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(1 + parts.reduce((s, p) => s + p.length, 0));
  out[0] = type;
  let o = 1;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};
export const json = (type: number, v: unknown) => frame(type, new TextEncoder().encode(JSON.stringify(v)));
export const parseJson = (f: Uint8Array) => JSON.parse(new TextDecoder().decode(f.subarray(1)));
export const u32 = (a: Uint32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
/** A Uint32Array view of (or, if unaligned, a copy of) `n` u32 at `off` of a frame. */
export function u32At(f: Uint8Array, off: number, n: number): Uint32Array {
  const o = f.byteOffset + off;
  if (o % 4 === 0) return new Uint32Array(f.buffer, o, n);
  return new Uint32Array(f.slice(off, off + 4 * n).buffer);
}

/** Literal frame: u32 n, indices, lengths, bytes (index-aligned so the header stays u32). */
export function literalFrame(indices: number[], chunks: Uint8Array[]): Uint8Array {
  const head = new Uint32Array(1 + 2 * indices.length);
  head[0] = indices.length;
  indices.forEach((ix, k) => {
    head[1 + k] = ix;
    head[1 + indices.length + k] = chunks[k].length;
  });
  return frame(T.Literal, new Uint8Array(3), u32(head), ...chunks);
}
export function parseLiteral(f: Uint8Array): { indices: Uint32Array; chunks: Uint8Array[] } {
  const n = u32At(f, 4, 1)[0];
  const indices = u32At(f, 8, n);
  const lengths = u32At(f, 8 + 4 * n, n);
  const chunks: Uint8Array[] = [];
  let o = 8 + 8 * n;
  for (let k = 0; k < n; k++) {
    chunks.push(f.subarray(o, o + lengths[k]));
    o += lengths[k];
  }
  return { indices, chunks };
}

/** A queue of received frames with backpressure-aware send and time spent waiting. */
export class MsgConn {
  readonly traffic: Traffic = { checksumList: 0, matchTokens: 0, basisChecksums: 0, delta: 0, control: 0, total: 0 };
  waitedMs = 0;
  private q: Uint8Array[] = [];
  private waiter: (() => void) | null = null;
  private closed: Error | null = null;

  constructor(readonly ws: WebSocket) {
    ws.binaryType = 'nodebuffer';
    ws.on('message', (d: Buffer, isBinary: boolean) => {
      if (!isBinary) return this.fail(new Error('text frame'));
      this.q.push(new Uint8Array(d.buffer, d.byteOffset, d.length));
      this.wake();
    });
    ws.on('close', (code: number) => this.fail(new Error(`connection closed (${code})`)));
    ws.on('error', (e: Error) => this.fail(e));
  }
  private wake() {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
  private fail(e: Error) {
    this.closed ??= e;
    this.wake();
  }
  async recv(...types: number[]): Promise<Uint8Array> {
    const t0 = performance.now();
    while (!this.q.length) {
      if (this.closed) throw this.closed;
      await new Promise<void>((r) => (this.waiter = r));
    }
    this.waitedMs += performance.now() - t0;
    const f = this.q.shift()!;
    this.traffic[part(f[0])] += f.length;
    this.traffic.total += f.length;
    if (types.length && !types.includes(f[0])) {
      throw new Error(f[0] === T.Result ? `remote error: ${parseJson(f).error}` : `unexpected message ${f[0]}, wanted ${types}`);
    }
    return f;
  }
  async send(f: Uint8Array): Promise<void> {
    while (this.ws.bufferedAmount > 4 << 20) {
      if (this.closed) throw this.closed;
      await new Promise((r) => setTimeout(r, 1));
    }
    if (this.closed) throw this.closed;
    this.traffic[part(f[0])] += f.length;
    this.traffic.total += f.length;
    // where permessage-deflate is on, only the file's bytes are compressed: Dsync's rule
    // (shared/src/transport/conn.ts), so every approach runs the same transport
    this.ws.send(f, { compress: part(f[0]) === 'delta' });
  }
}
