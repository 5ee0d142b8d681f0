/**
 * Many small commits at once (docs/store.md §4, "Commits at once"): the first `dsync sync` of a
 * folder of --files small files (2–12 KB, in 10 folders) to a real `dsync serve` child over a
 * local-directory store. Measured: the CLI's wall time, the server's CPU time (user + system,
 * /proc/PID/stat) per file, the WebSocket upgrades the pass opened (a counting TCP proxy), and
 * the catalog swaps the store made (the local backend keeps one generation number per head
 * swap: a folder catalog's generation is how many times it was swapped). --reps runs, each on a
 * fresh server and store; the median is reported. `--s3`: the store is a bucket of a local
 * MinIO (harness/minio.ts) instead, whose CPU time per file is reported too (catalog swaps are
 * not counted there).
 * Usage (from the repository root):
 *   node --import tsx bench/group-commit.ts [--files 1000] [--reps 3] [--s3] [--out group-commit]
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { type Socket, connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServe } from '../harness/child.ts';
import { runDsync as run, arg, log, machine, median, table, writeResults } from './lib/common.ts';

const files = Number(arg('--files', '1000'));
const reps = Number(arg('--reps', '3'));
const out = arg('--out', 'group-commit');
const label = arg('--label', 'this tree');
const s3 = process.argv.includes('--s3');
const TICK_MS = 10; // USER_HZ 100: /proc/PID/stat counts CPU time in 10 ms ticks

/** User + system CPU time of a process so far, ms. */
function cpuMs(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** A TCP proxy counting WebSocket upgrades. */
function proxy(port: number): Promise<{ url: string; upgrades: () => number; close: () => void }> {
  let upgrades = 0;
  const server = createServer((client: Socket) => {
    const upstream = connect(port, '127.0.0.1');
    let first = true;
    client.on('data', (d) => {
      if (first && /\r\nupgrade: websocket\r\n/i.test(d.toString('latin1'))) upgrades++;
      first = false;
      upstream.write(d);
    });
    upstream.on('data', (d) => client.write(d));
    const end = () => (client.destroy(), upstream.destroy());
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, upgrades: () => upgrades, close: () => server.close() })));
}

/** Catalog swaps: the generation of every folder catalog head, summed. */
function catalogSwaps(store: string): number {
  let n = 0;
  const walk = (dir: string) => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, d.name);
      if (d.isDirectory() && d.name.endsWith('@h')) n += Math.max(0, ...readdirSync(p).filter((g) => /^[1-9][0-9]*$/.test(g)).map(Number));
      else if (d.isDirectory()) walk(p);
    }
  };
  for (const ns of readdirSync(path.join(store, 'ns'))) walk(path.join(store, 'ns', ns, 'folders'));
  return n;
}

const rows: { wallMs: number; cpuMsPerFile: number; s3CpuMsPerFile?: number; upgrades: number; catalogSwaps: number | null }[] = [];
const { startMinio } = await import('../harness/minio.ts');
const minio = s3 ? await startMinio() : null;
for (let r = 0; r < reps; r++) {
  const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-group-'));
  const store = path.join(work, 'store');
  const server = minio
    ? await startServe(['--store', `s3://group${r}-${Date.now()}/store`, '--s3-endpoint', minio.endpoint], { env: { ...process.env, ...minio.env } })
    : await startServe(['--store', store]);
  const px = await proxy(Number(new URL(server.url).port));
  try {
    const dir = path.join(work, 'proj');
    let seed = 20261129 + r;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    for (let i = 0; i < files; i++) {
      const f = path.join(dir, `d${i % 10}`, `f${String(i).padStart(5, '0')}.bin`);
      if (i < 10) mkdirSync(path.dirname(f), { recursive: true });
      const b = Buffer.alloc(2048 + Math.floor(rnd() * 10240));
      for (let k = 0; k < b.length; k++) b[k] = (rnd() * 256) | 0;
      writeFileSync(f, b);
    }
    const cpu0 = cpuMs(server.child.pid!);
    const s3cpu0 = minio ? cpuMs(minio.process.pid!) : 0;
    const res = await run(['sync', dir, '--remote', 'many', '--json', '-s', px.url], { DSYNC_CACHE_DIR: path.join(work, 'cache') });
    if (res.code !== 0) throw new Error(res.out.slice(-2000));
    const cpu = cpuMs(server.child.pid!) - cpu0;
    const row = { wallMs: res.ms, cpuMsPerFile: cpu / files, ...(minio && { s3CpuMsPerFile: (cpuMs(minio.process.pid!) - s3cpu0) / files }), upgrades: px.upgrades(), catalogSwaps: minio ? null : catalogSwaps(store) };
    rows.push(row);
    log(`rep ${r}: ${(res.ms / 1000).toFixed(1)} s, server CPU ${row.cpuMsPerFile.toFixed(2)} ms/file${minio ? `, MinIO CPU ${row.s3CpuMsPerFile!.toFixed(2)} ms/file` : ''}, ${row.upgrades} upgrades, ${row.catalogSwaps ?? '–'} catalog swaps`);
  } finally {
    px.close();
    await server.kill();
    rmSync(work, { recursive: true, force: true });
  }
}
await minio?.stop();

const med = (k: keyof (typeof rows)[0]) => median(rows.map((x) => Number(x[k] ?? NaN)));
const body = `
The first \`dsync sync\` of ${files} files of 2–12 KB (random bytes, 10 folders) to a fresh
\`dsync serve\` (${s3 ? 'a MinIO bucket' : 'a local directory'}) through a TCP proxy counting WebSocket upgrades;
${reps} runs on fresh servers, medians (${label}).

${table(
  ['CLI wall', 'server CPU per file', 'MinIO CPU per file', 'WebSocket upgrades', 'catalog swaps'],
  [[`${(med('wallMs') / 1000).toFixed(1)} s`, `${med('cpuMsPerFile').toFixed(2)} ms`, s3 ? `${med('s3CpuMsPerFile').toFixed(2)} ms` : '–', med('upgrades'), s3 ? '–' : med('catalogSwaps')]],
)}

Runs: ${rows.map((x) => `${(x.wallMs / 1000).toFixed(1)} s / ${x.cpuMsPerFile.toFixed(2)} ms${s3 ? ` / ${x.s3CpuMsPerFile!.toFixed(2)} ms` : ''} / ${x.upgrades} / ${x.catalogSwaps ?? '–'}`).join('; ')}.
`;
writeResults(out, `${files} small files, first sync: commits at once (${label})`, machine(), body, { files, reps, rows });
