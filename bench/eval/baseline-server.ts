/**
 * The baselines' server, for the benchmark only (the product server stays clean): one ws
 * endpoint, permessage-deflate on as in Dsync's server, files kept in a data directory (the
 * latest version of each name). Each approach (its `serve`, bench/approaches: webr2sync+,
 * dedup, full) does its real work, and the rebuilt file is verified before an atomic commit
 * (temporary file, fsync, rename), as Dsync's store does.
 *
 *   node --import tsx bench/eval/baseline-server.ts --port 0 --data DIR [--no-deflate]
 * prints "baseline server on ws://127.0.0.1:PORT".
 */
import { mkdirSync } from 'node:fs';
import { type FileHandle, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { WebSocketServer } from 'ws';
import { hex } from '../approaches/baseline.ts';
import { approachOf } from '../approaches/index.ts';
import { MsgConn, T, json, parseJson } from './wire.ts';
import { setHeapGrowth } from '../../shared/src/base/node-gc.ts';

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

async function session(c: MsgConn, dataDir: string) {
  const t0 = performance.now();
  const hello = parseJson(await c.recv(T.Hello));
  const dest = join(dataDir, encodeURIComponent(hello.name));
  const basis = await readBasis(dest);
  const out = await Rebuild.open(dest);
  try {
    const { root, ended, lookups } = await approachOf(hello.approach).serve!({ c, hello, basis, out });
    if (!ended) await c.recv(T.End);
    if (hex(root) !== hello.root) throw new Error('the rebuilt file does not match the client\'s hash; nothing stored');
    await out.commit();
    const size = (await stat(dest)).size;
    await c.send(json(T.Result, { ok: true, size, serverMs: performance.now() - t0 - c.waitedMs, lookups: lookups ?? 0 }));
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
    // the same permessage-deflate settings as Dsync's server (server/src/ws-upgrade.ts)
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
