/**
 * The baselines' server, for the benchmark only (the product server stays clean): one ws
 * endpoint, permessage-deflate on as in Dsync's server, files kept in a data directory (the
 * latest version of each name). Each approach does its real work and verifies the rebuilt
 * file before an atomic commit (temporary file, fsync, rename), as Dsync's store does:
 *
 *   webr2sync+  client: Adler-32 + SipHash of every fixed 8 KB block of the target;
 *               server: byte-by-byte rolling Adler-32 over the basis, confirmed by SipHash
 *               (wasm webr2sync_match), answers the matched blocks; client sends the rest.
 *   dedup       client: FastCDC chunks + a strong hash of every chunk; server: chunks and
 *               hashes the basis on every sync, matches by strong hash; client sends the rest.
 *   full        the whole file.
 *
 *   node --import tsx bench/eval/baseline-server.ts --port 0 --data DIR [--no-deflate]
 * prints "baseline server on ws://127.0.0.1:PORT".
 */
import { mkdirSync } from 'node:fs';
import { type FileHandle, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { WebSocketServer } from 'ws';
import { type ChunkIndex, bufferSource, chunkSource, offsetsOf, runHash } from '../../shared/src/chunk-index.ts';
import { DEFAULT_PARAMS, hashLength } from '../../shared/src/protocol.ts';
import { StrongHasher } from '../../shared/src/wasm.ts';
import { webr2sync_match } from '../lib/baselines.ts';
import { MsgConn, T, frame, json, parseJson, parseLiteral, u32At } from './wire.ts';
import { setHeapGrowth } from '../../shared/src/node-gc.ts';

/** WebR2sync+'s fixed block size (paper: 8 KB). */
export const BLOCK = 8192;
/** dedup's strong hash: BLAKE3, the same as Dsync's default, so the comparison isolates the protocol. */
export const DEDUP_ALGO = 3;
/** Whole-file hash the baselines verify with (BLAKE3, computed in wasm on both sides). */
export const FILE_ALGO = 3;

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

/** Writes the rebuilt target through a temporary file, hashing it; commits only if verified. */
class Rebuild {
  private buf = new Uint8Array(4 << 20);
  private n = 0;
  private constructor(
    private fh: FileHandle,
    private tmp: string,
    private dest: string,
  ) {}
  static async open(dest: string) {
    const tmp = `${dest}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
    return new Rebuild(await open(tmp, 'w'), tmp, dest);
  }
  async write(b: Uint8Array) {
    if (this.n + b.length > this.buf.length) await this.flush();
    if (b.length > this.buf.length) return void (await this.fh.write(b));
    this.buf.set(b, this.n);
    this.n += b.length;
  }
  private async flush() {
    if (this.n) await this.fh.write(this.buf.subarray(0, this.n));
    this.n = 0;
  }
  async commit() {
    await this.flush();
    await this.fh.sync();
    await this.fh.close();
    await rename(this.tmp, this.dest);
  }
  async abort() {
    await this.fh.close().catch(() => {});
    await unlink(this.tmp).catch(() => {});
  }
}

/** The basis, read whole: the rolling search needs it in one piece, and rebuilding then
 *  copies blocks from memory instead of one file read per 8 KB block. */
async function readBasis(path: string): Promise<Uint8Array | null> {
  try {
    const b = await readFile(path);
    return new Uint8Array(b.buffer, b.byteOffset, b.length);
  } catch {
    return null;
  }
}

/** Reads bitmaps' worth of u32 list frames until ListEnd. */
async function readList(c: MsgConn, type: number): Promise<Uint8Array[]> {
  const frames: Uint8Array[] = [];
  for (;;) {
    const f = await c.recv(type, T.ListEnd);
    if (f[0] === T.ListEnd) return frames;
    frames.push(f);
  }
}

async function session(c: MsgConn, dataDir: string) {
  const t0 = performance.now();
  const hello = parseJson(await c.recv(T.Hello));
  const dest = join(dataDir, encodeURIComponent(hello.name));
  const basis = await readBasis(dest);
  const out = await Rebuild.open(dest);
  try {
    let root: Uint8Array;
    let ended = false; // full reads End in its data loop
    if (hello.approach === 'full') {
      const h = new StrongHasher(FILE_ALGO);
      for (;;) {
        const f = await c.recv(T.Data, T.End);
        if (f[0] === T.End) {
          ended = true;
          break;
        }
        h.update(f.subarray(1));
        await out.write(f.subarray(1));
      }
      root = h.digest();
      h.free();
    } else if (hello.approach === 'webr2sync+') {
      const frames = await readList(c, T.Blocks);
      const triples = new Uint32Array(frames.reduce((s, f) => s + (f.length - 4) / 4, 0));
      let o = 0;
      for (const f of frames) {
        triples.set(u32At(f, 4, (f.length - 4) / 4), o);
        o += (f.length - 4) / 4;
      }
      const nBlocks = triples.length / 3;
      // Rolling search over the whole basis (in wasm, like the chunker).
      const from = new Float64Array(nBlocks).fill(-1);
      let lookups = 0;
      if (basis) {
        const pairs = webr2sync_match(basis, BLOCK, triples);
        lookups = pairs[pairs.length - 1];
        for (let k = 0; k + 1 < pairs.length; k += 2) if (from[pairs[k]] < 0) from[pairs[k]] = pairs[k + 1];
      }
      const have = new Uint8Array(Math.ceil(nBlocks / 8));
      for (let i = 0; i < nBlocks; i++) if (from[i] >= 0) have[i >> 3] |= 1 << (i & 7);
      await c.send(frame(T.Have, have));
      const h = new StrongHasher(FILE_ALGO);
      let lit: { indices: Uint32Array; chunks: Uint8Array[] } | null = null;
      let li = 0;
      for (let i = 0; i < nBlocks; i++) {
        const len = Math.min(BLOCK, hello.size - i * BLOCK);
        let b: Uint8Array;
        if (from[i] >= 0) b = basis!.subarray(from[i], from[i] + len);
        else {
          if (!lit || li === lit.indices.length) ((lit = parseLiteral(await c.recv(T.Literal))), (li = 0));
          if (lit.indices[li] !== i) throw new Error(`literal block ${lit.indices[li]} where ${i} was due`);
          b = lit.chunks[li++];
        }
        if (b.length !== len) throw new Error(`block ${i} has ${b.length} bytes, expected ${len}`);
        h.update(b);
        await out.write(b);
      }
      root = h.digest();
      h.free();
      hello.lookups = lookups;
    } else if (hello.approach === 'dedup') {
      const H = hashLength(DEDUP_ALGO);
      const frames = await readList(c, T.Hashes);
      const lengths: number[] = [];
      const hashes: Uint8Array[] = [];
      for (const f of frames) {
        const n = u32At(f, 4, 1)[0];
        const ls = u32At(f, 8, n);
        for (let k = 0; k < n; k++) {
          lengths.push(ls[k]);
          hashes.push(f.subarray(8 + 4 * n + k * H, 8 + 4 * n + (k + 1) * H));
        }
      }
      // The server chunks and strong-hashes its copy on every sync (no cached index).
      const where = new Map<string, number>();
      let bix: ChunkIndex | null = null;
      if (basis) {
        bix = await chunkSource(bufferSource(basis), DEFAULT_PARAMS, DEDUP_ALGO);
        const off = offsetsOf(bix.lengths);
        for (let j = 0; j < bix.lengths.length; j++) where.set(hex(bix.hashes.subarray(j * H, (j + 1) * H)), off[j]);
      }
      const from = lengths.map((_, i) => where.get(hex(hashes[i])) ?? -1);
      const have = new Uint8Array(1 + Math.ceil(lengths.length / 8));
      have[0] = T.Have;
      from.forEach((f, i) => f >= 0 && (have[1 + (i >> 3)] |= 1 << (i & 7)));
      await c.send(have);
      // Rebuild, hashing every chunk written; the root is the run hash over the chunk hashes.
      const written = new Uint8Array(lengths.length * H);
      let lit: { indices: Uint32Array; chunks: Uint8Array[] } | null = null;
      let li = 0;
      for (let i = 0; i < lengths.length; i++) {
        let b: Uint8Array;
        if (from[i] >= 0) b = basis!.subarray(from[i], from[i] + lengths[i]);
        else {
          if (!lit || li === lit.indices.length) ((lit = parseLiteral(await c.recv(T.Literal))), (li = 0));
          if (lit.indices[li] !== i) throw new Error(`literal chunk ${lit.indices[li]} where ${i} was due`);
          b = lit.chunks[li++];
        }
        if (b.length !== lengths[i]) throw new Error(`chunk ${i} has ${b.length} bytes, expected ${lengths[i]}`);
        const hh = new StrongHasher(DEDUP_ALGO);
        hh.update(b);
        written.set(hh.digest(), i * H);
        hh.free();
        await out.write(b);
      }
      root = runHash(DEDUP_ALGO, written, 0, lengths.length);
    } else throw new Error(`unknown approach ${hello.approach}`);
    if (!ended) await c.recv(T.End);
    if (hex(root) !== hello.root) throw new Error('the rebuilt file does not match the client\'s hash; nothing stored');
    await out.commit();
    const size = (await stat(dest)).size;
    await c.send(json(T.Result, { ok: true, size, serverMs: performance.now() - t0 - c.waitedMs, lookups: hello.lookups ?? 0 }));
  } catch (e) {
    await out.abort();
    await c.send(json(T.Result, { ok: false, error: (e as Error).message })).catch(() => {});
  }
}

export async function startBaselineServer(opts: { port: number; data: string; deflate: boolean }) {
  mkdirSync(opts.data, { recursive: true });
  const wss = new WebSocketServer({
    host: '127.0.0.1',
    port: opts.port,
    maxPayload: 64 << 20,
    // the same permessage-deflate settings as Dsync's server (server/src/server.ts)
    perMessageDeflate: opts.deflate ? { threshold: 256, serverMaxWindowBits: 15, concurrencyLimit: 4 } : false,
  });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  wss.on('connection', (ws) => {
    const c = new MsgConn(ws);
    void session(c, opts.data).finally(() => ws.close(1000, 'done'));
  });
  const port = (wss.address() as { port: number }).port;
  return { url: `ws://127.0.0.1:${port}`, port, close: () => new Promise<void>((r) => wss.close(() => r())) };
}

if (process.argv[1]?.endsWith('baseline-server.ts')) {
  setHeapGrowth(); // as `dsync serve` runs
  const arg = (n: string, d: string) => (process.argv.includes(n) ? process.argv[process.argv.indexOf(n) + 1] : d);
  const s = await startBaselineServer({ port: Number(arg('--port', '0')), data: arg('--data', 'bench/tmp/baseline-data'), deflate: !process.argv.includes('--no-deflate') });
  console.log(`baseline server on ${s.url}`);
  process.on('SIGTERM', () => process.exit(0)); // a clean exit, so --cpu-prof can write its profile
}
