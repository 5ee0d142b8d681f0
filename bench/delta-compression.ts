/**
 * Compression of Delta Bytes: what the Delta messages of a push weigh with no compression, with
 * permessage-deflate as `ws` does it (one raw deflate context per session, a sync flush per
 * message, messages under the client's 1 KiB threshold sent as they are), and with zstd -3
 * (one context per session: the session's Delta messages compressed as one stream; and one
 * frame per message), on the benchmark's 10 MB pairs and real series, for another device and
 * for a kept basis (the CLI). zstd is the `zstd` command (setup.sh bench installs it); what a
 * library or wasm build of the same level writes is the same size.
 *
 *   node --import tsx bench/delta-compression.ts [--out bench/results/delta-compression.md]
 *
 * Needs the datasets (`npm run bench` builds them into bench/tmp/datasets).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { constants, createDeflateRaw } from 'node:zlib';
import WebSocket from 'ws';
import '../shared/src/chunking/wasm.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { MemoryKnown } from '../shared/src/session/known.ts';
import { Msg } from '../shared/src/wire/protocol.ts';
import { push } from '../shared/src/session/delta-client.ts';
import { loadConfig } from '../server/src/config.ts';
import { startServer } from '../server/src/server.ts';

const here = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const data = path.join(here, 'bench/tmp/datasets');
const outAt = process.argv.indexOf('--out');
const out = outAt > 0 ? process.argv[outAt + 1] : null;
/** ws's client-side default: smaller messages go uncompressed */
const THRESHOLD = 1024;

/** The Delta frames a push of `target` sends after a push of `basis` (kept: the client kept
 *  the basis's bytes; else another device). */
async function deltaFrames(url: string, name: string, basis: Uint8Array, target: Uint8Array, kept: boolean): Promise<Uint8Array[]> {
  const frames: Uint8Array[] = [];
  let on = false;
  class Spy extends WebSocket {
    send(d: any, ...a: any[]) {
      const b = d instanceof Uint8Array ? d : new Uint8Array(d);
      if (on && b[0] === Msg.Delta) frames.push(b.slice());
      return (super.send as any)(d, ...a);
    }
  }
  const known = kept ? new MemoryKnown(1 << 30, undefined, true) : undefined;
  await push(bufferSource(basis), { url, name, WebSocket: Spy as any, known });
  on = true;
  await push(bufferSource(target), { url, name, WebSocket: Spy as any, known });
  return frames;
}

/** permessage-deflate as ws sends it: one context, a sync flush per message (whose 4-byte tail
 *  is not sent), messages under the threshold raw. */
async function deflated(frames: Uint8Array[]): Promise<number> {
  const z = createDeflateRaw({ windowBits: 15 });
  let got = 0;
  z.on('data', (b: Buffer) => (got += b.length));
  let total = 0;
  for (const f of frames) {
    if (f.length < THRESHOLD) {
      total += f.length;
      continue;
    }
    const before = got;
    z.write(f);
    await new Promise<void>((r) => z.flush(constants.Z_SYNC_FLUSH, () => r()));
    total += got - before - 4;
  }
  z.close();
  return total;
}

function zstd(files: string[], args: string[]): number {
  return execFileSync('zstd', ['-q', '-c', ...args, ...files], { maxBuffer: 1 << 30 }).length;
}

const pairs: { section: string; pair: string; basis: string; target: string }[] = [];
for (const kind of ['cut', 'insert', 'inverse']) {
  for (const size of [2048, 16384, 131072, 1048576]) pairs.push({ section: 'synthetic', pair: `${kind}-${size}`, basis: path.join(data, 'mixed-10MB.bin'), target: path.join(data, `mixed-10MB.${kind}-${size}.bin`) });
}
for (const s of readdirSync(path.join(data, 'series'))) {
  const files = readdirSync(path.join(data, 'series', s)).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  for (let k = 1; k < files.length; k++) pairs.push({ section: 'real', pair: `${s} ${files[k - 1]}→${files[k]}`, basis: path.join(data, 'series', s, files[k - 1]), target: path.join(data, 'series', s, files[k]) });
}

const dir = mkdtempSync(path.join(tmpdir(), 'dsync-bench-'));
const cfg = loadConfig({ port: '0', host: '127.0.0.1', data: path.join(dir, 'store') }, {});
const server = await startServer(cfg, () => {});
const url = server.url.replace('http', 'ws') + '/sync';
const rows: string[] = [];
const sums: Record<string, number[]> = {};
try {
  let n = 0;
  for (const p of pairs) {
    const basis = new Uint8Array(readFileSync(p.basis));
    const target = new Uint8Array(readFileSync(p.target));
    for (const kept of [false, true]) {
      const frames = await deltaFrames(url, `p${n++}`, basis, target, kept);
      const files = frames.map((f, i) => {
        const file = path.join(dir, `f${String(i).padStart(5, '0')}`);
        writeFileSync(file, f);
        return file;
      });
      const raw = frames.reduce((a, f) => a + f.length, 0);
      const t0 = performance.now();
      const d = await deflated(frames);
      const deflateMs = performance.now() - t0;
      const zs = files.length ? zstd(files, ['-3']) : 0; // one frame per message
      const cat = path.join(dir, 'cat');
      writeFileSync(cat, Buffer.concat(frames));
      const zc = files.length ? zstd([cat], ['-3']) : 0; // one context per session
      for (const f of [...files, cat]) rmSync(f, { force: true });
      const mode = kept ? 'kept basis' : 'another device';
      const kb = (x: number) => (x / 1024).toFixed(1);
      rows.push(`| ${p.section} | ${p.pair} | ${mode} | ${frames.length} | ${kb(raw)} | ${kb(d)} | ${kb(zs)} | ${kb(zc)} | ${(zc / d).toFixed(2)}× | ${deflateMs.toFixed(0)} |`);
      (sums[mode] ??= [0, 0, 0, 0]).forEach((_, i, a) => (a[i] += [raw, d, zs, zc][i]));
      console.log(rows[rows.length - 1]);
    }
  }
} finally {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}
const doc = [
  '# Compression of Delta Bytes: none, permessage-deflate, zstd -3',
  '',
  `- **Command:** \`node --import tsx bench/delta-compression.ts${out ? ` --out ${out}` : ''}\` (${new Date().toISOString()})`,
  '- The Delta messages (after the protocol\'s framing, before the WebSocket\'s) of one push per pair and mode, in KB: *none* as they are; *deflate* as `ws` sends them with permessage-deflate (one context per session, a sync flush per message, messages under 1 KiB raw); *zstd/msg*: `zstd -3`, one frame per message; *zstd/session*: `zstd -3` of all the session\'s Delta messages as one stream (what one zstd context per session would send, at best). *deflate ms*: the client\'s zlib time for them.',
  '',
  '| section | pair | mode | messages | none | deflate | zstd/msg | zstd/session | zstd/session ÷ deflate | deflate ms |',
  '|---|---|---|---:|---:|---:|---:|---:|---:|---:|',
  ...rows,
  '',
  ...Object.entries(sums).map(([m, [raw, d, zs, zc]]) => `- All pairs, ${m}: none ${(raw / 1024).toFixed(0)} KB, deflate ${(d / 1024).toFixed(0)} KB, zstd/msg ${(zs / 1024).toFixed(0)} KB, zstd/session ${(zc / 1024).toFixed(0)} KB (${((1 - zc / d) * 100).toFixed(1)}% less than deflate).`),
  '',
];
if (out) writeFileSync(out, doc.join('\n'));
else console.log(doc.join('\n'));
