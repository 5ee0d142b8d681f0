/**
 * Where a server's time goes: starts the approach's server (pinned to core 0) under
 * --cpu-prof, syncs one target `--syncs` times over loopback (each followed by a sync back to
 * the basis, so every sync is the same delta), then prints the server's CPU per sync (from
 * /proc) and the functions with the most self time in the profile.
 *
 *   node --import tsx bench/eval/profile-server.ts --approach dsync [--basis F] [--target F] [--syncs 20] [--no-deflate] [--node-path DIR] [--workers N]
 *   (TOP=N prints N functions instead of 15)
 *
 * `--workers N` runs `dsync serve --workers N` (on cores 0..N-1): CPU is the sum over the
 * primary and its workers, and the profile the sum of every process' profile (per process
 * below it: what each spent).
 *
 * `--node-path DIR` runs the server with NODE_PATH=DIR, e.g. to try ws' optional `bufferutil`
 * addon installed outside the project (npm install --prefix bench/tmp/bu bufferutil).
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { isDsync } from '../approaches/index.ts';
import { prepare, syncPrepared } from './clients.ts';
import { ROOT, serverCpuSeconds, startBaselines, startDsync } from './procs.ts';

const argv = process.argv.slice(2);
const opt = (n: string, d: string) => (argv.includes(n) ? argv[argv.indexOf(n) + 1] : d);
const a = opt('--approach', 'dsync') as string;
const basis = opt('--basis', 'bench/tmp/datasets/mixed-10MB.bin');
const target = opt('--target', 'bench/tmp/datasets/mixed-10MB.insert-2048.bin');
const syncs = Number(opt('--syncs', '20'));
const deflate = !argv.includes('--no-deflate');
const nodePath = opt('--node-path', '');
const workers = Number(opt('--workers', '1'));
const work = join(ROOT, 'bench/tmp/profile');
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });

const src = async (p: string) => (statSync(p).size <= 256 << 20 ? bufferSource(new Uint8Array(readFileSync(p))) : fileSource(await open(p, 'r'), statSync(p).size));
const nodeArgs = ['--cpu-prof', `--cpu-prof-dir=${join(work, 'prof')}`];
const data = join(work, 'data');
const srv = isDsync(a) ? await startDsync({ data, paperExact: a === 'dsync-paper', cpu: workers > 1 ? `0-${workers - 1}` : '0', deflate, nodeArgs, env: nodePath ? { NODE_PATH: nodePath } : {}, ...(workers > 1 && { workers }) }) : await startBaselines({ data, cpu: '0', deflate, nodeArgs });
const pb = await prepare(a, await src(basis));
const pt = await prepare(a, await src(target));
await syncPrepared(pb, srv.url, 'f', false);
const c0 = serverCpuSeconds(srv.pid);
const server: number[] = [];
for (let i = 0; i < syncs; i++) {
  server.push((await syncPrepared(pt, srv.url, 'f', false)).timeMs.server);
  await syncPrepared(pb, srv.url, 'f', false);
}
const cpuPerSync = ((serverCpuSeconds(srv.pid) - c0) * 1000) / (2 * syncs);
await srv.stop();
server.sort((x, y) => x - y);
console.log(`${a}: ${basis} -> ${target}, ${syncs} syncs and as many back; server time median ${server[syncs >> 1]} ms; server CPU ${cpuPerSync.toFixed(1)} ms per sync (/proc)`);

// Self time per function over the whole profile (start-up included), and per sync: of every
// process' profile together (one with one process; the primary's and each worker's with --workers).
const dir = join(work, 'prof');
const self = new Map<string, number>();
for (const file of readdirSync(dir).map((f) => join(dir, f))) {
  const prof = JSON.parse(readFileSync(file, 'utf8'));
  const dt = new Map<number, number>();
  prof.samples.forEach((id: number, i: number) => dt.set(id, (dt.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0)));
  let busy = 0;
  for (const n of prof.nodes) {
    const f = n.callFrame;
    const k = `${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}`;
    self.set(k, (self.get(k) ?? 0) + (dt.get(n.id) ?? 0) / 1000);
    if (f.functionName !== '(idle)') busy += (dt.get(n.id) ?? 0) / 1000;
  }
  if (workers > 1) console.log(`${file.split('/').pop()}: ${(busy / (2 * syncs + 1)).toFixed(2)} ms per sync busy (start-up included)`);
}
console.log('self time, ms per sync (of 2 x syncs + 1):');
for (const [k, v] of [...self].filter(([k]) => !k.startsWith('(idle)')).sort((x, y) => y[1] - x[1]).slice(0, Number(process.env.TOP ?? 15))) {
  console.log(`${(v / (2 * syncs + 1)).toFixed(2).padStart(8)}  ${k}`);
}
rmSync(work, { recursive: true, force: true });
