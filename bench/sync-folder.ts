/**
 * `dsync sync` (docs/sync.md) measured as a user runs it, against a real `dsync serve` child
 * through a counting TCP proxy (bytes both ways, HTTP requests, WebSocket upgrades):
 *   1. latency: `dsync sync --watch` on two devices; a save on one, timed until the other's
 *      file holds the new bytes (polled every 5 ms), --saves times: median and p99;
 *   2. a folder of --files small files: the first `dsync sync` (uploading them all), then a
 *      pass with nothing changed: wall time of the CLI process, requests, bytes on the wire, and
 *      how many files it read (it must read none: size and mtime match the state).
 * Usage (from the repository root):
 *   node --import tsx bench/sync-folder.ts [--saves 20] [--files 10000] [--reps 3]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServe } from '../harness/child.ts';
import { runDsync as run, arg, log, machine, table, writeResults } from './lib/common.ts';
import { countingProxy } from './lib/proxy.ts';
import { watchLatency } from './lib/watch-latency.ts';

const saves = Number(arg('--saves', '20'));
const files = Number(arg('--files', '10000'));
const reps = Number(arg('--reps', '3'));

const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-sync-'));
const server = await startServe(['--data', path.join(work, 'store')]);
const px = await countingProxy({ host: '127.0.0.1', port: Number(new URL(server.url).port) });
try {
  // ---- 1. latency with --watch on both sides ----
  const dev = (i: number) => ({ dir: path.join(work, `dev${i}`, 'proj'), env: { DSYNC_CACHE_DIR: path.join(work, `dev${i}`, 'cache'), DSYNC_SERVER: px.url } });
  const [a, b] = [dev(0), dev(1)];
  for (const d of [a, b]) mkdirSync(d.dir, { recursive: true });
  const latency = await watchLatency({ ...a, name: 'dev0' }, { ...b, name: 'dev1' }, saves);
  const lat = latency.ms;

  // ---- 2. a folder of many small files ----
  const c = dev(2);
  for (let i = 0; i < files; i++) {
    const f = path.join(c.dir, `d${String(i % 100).padStart(2, '0')}`, `f${String(i).padStart(5, '0')}.txt`);
    if (i < 100) mkdirSync(path.dirname(f), { recursive: true });
    writeFileSync(f, `file ${i}\n`.repeat(1 + (i % 50)));
  }
  px.reset();
  const first = await run(['sync', c.dir, '--remote', 'many', '--json'], c.env);
  if (first.code !== 0) throw new Error(first.out.slice(-2000));
  const firstCounts = { ...px.counts };
  log(`first sync: ${(first.ms / 1000).toFixed(1)} s`);
  // past the racy window (RACY_MS): the state's mtimes are trusted from now on
  await new Promise((r) => setTimeout(r, 2500));
  await run(['sync', c.dir, '--remote', 'many', '--json'], c.env);
  const still: { ms: number; up: number; down: number; requests: number; upgrades: number; hashed: number }[] = [];
  for (let r = 0; r < reps; r++) {
    px.reset();
    const res = await run(['sync', c.dir, '--remote', 'many', '--json'], c.env);
    if (res.code !== 0) throw new Error(res.out);
    const pass = JSON.parse(res.out.trim().split('\n').at(-1)!).pass;
    still.push({ ms: res.ms, ...px.counts, hashed: pass.hashed });
    log(`nothing changed: ${res.ms.toFixed(0)} ms, ${px.counts.requests} requests, ${px.counts.up + px.counts.down} bytes, ${pass.hashed} files read`);
  }
  const mid = still.sort((x, y) => x.ms - y.ms)[still.length >> 1];
  const startup = await run(['sync', '--help'], {});

  const md = `
### From a save to the other device (\`dsync sync --watch\` on both, one server)

A 1 KB file saved ${saves} times on device A (300 ms apart); the time until device B's copy holds
the new bytes (polled every 5 ms). Both CLIs and the server on this machine, through a local
TCP proxy.

| saves | median | p99 | min | max |
|---|---|---|---|---|
| ${saves} | ${latency.median.toFixed(0)} ms | ${latency.p99.toFixed(0)} ms | ${latency.min.toFixed(0)} ms | ${latency.max.toFixed(0)} ms |

The path: fs.watch fires on A, A waits SYNC_SETTLE_MS (200 ms) for the save to settle, its pass
pushes the file; the server's live event reaches B, whose pass pulls it.

### ${files} small files, nothing changed

${files} files of 7–400 bytes in 100 folders. One \`dsync sync\` process per run (its wall time
includes Node's start and loading the CLI: \`dsync sync --help\` alone takes ${startup.ms.toFixed(0)} ms here).

${table(
  ['run', 'time', 'HTTP requests', 'WebSocket sessions', 'bytes on the wire (up + down)', 'files read'],
  [
    ['first sync (uploads all)', `${(first.ms / 1000).toFixed(1)} s`, firstCounts.requests, firstCounts.upgrades, `${firstCounts.up} + ${firstCounts.down}`, files],
    [`nothing changed (median of ${reps})`, `${mid.ms.toFixed(0)} ms`, mid.requests, mid.upgrades, `${mid.up} + ${mid.down}`, mid.hashed],
  ],
)}

Nothing changed costs one listing of the server folder (GET /api/files?recursive=1, 5000 files a
page) and a stat of every local file; no file is read (size and mtime match the state file) and no
sync session opens.
`;
  writeResults('sync', '`dsync sync`: latency with --watch, and a pass over 10 000 unchanged files', machine(), md, { latencyMs: lat, files, first: { ms: first.ms, ...firstCounts }, unchanged: still });
} finally {
  await px.close();
  await server.kill();
  rmSync(work, { recursive: true, force: true });
}
