/**
 * A folder renamed on one device, synced by `dsync sync` as a user runs it (docs/sync.md,
 * "Renames"): a real `dsync serve` child, two devices, through a counting TCP proxy
 * (bench/lib/proxy.ts). A folder of --files small files in ten subfolders is synced to both
 * devices, renamed on device A, then `dsync sync` on A (which sends the rename) and on B (which
 * renames here): wall time of each CLI process, HTTP requests, move requests, bytes on the wire.
 * --reps renames one after another (src → r1 → r2 …), each measured; the median is reported.
 * --label names the run (e.g. "before" on the code before a change): the results go to
 * bench/results/folder-rename-LABEL.md/.json.
 * Usage (from the repository root):
 *   node --import tsx bench/folder-rename.ts [--files 1000] [--reps 3] [--label after]
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServe } from '../harness/child.ts';
import { runDsync as run, arg, log, machine, median, table, writeResults } from './lib/common.ts';
import { countingProxy } from './lib/proxy.ts';

const files = Number(arg('--files', '1000'));
const reps = Number(arg('--reps', '3'));
const label = arg('--label', 'after');

/** Every file under `dir` and its bytes (relative '/' paths). */
function treeOf(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string) => {
    for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(p);
      else out.set(p, readFileSync(path.join(dir, p), 'latin1'));
    }
  };
  walk('');
  return out;
}

const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-rename-'));
const server = await startServe(['--data', path.join(work, 'store')]);
const px = await countingProxy({ host: '127.0.0.1', port: Number(new URL(server.url).port) });
try {
  const dev = (i: number) => ({ dir: path.join(work, `dev${i}`, 'proj'), env: { DSYNC_CACHE_DIR: path.join(work, `dev${i}`, 'cache'), DSYNC_SERVER: px.url } });
  const [a, b] = [dev(0), dev(1)];
  const sync = async (d: ReturnType<typeof dev>, name: string) => {
    const r = await run(['sync', d.dir, '--remote', 'proj', '--device', name, '--json'], d.env);
    if (r.code !== 0) throw new Error(r.out.slice(-3000));
    return r;
  };
  for (let i = 0; i < files; i++) {
    const f = path.join(a.dir, 'src', `d${i % 10}`, `f${String(i).padStart(5, '0')}.txt`);
    if (i < 10) mkdirSync(path.dirname(f), { recursive: true });
    writeFileSync(f, `file ${i}\n`.repeat(1 + (i % 50)));
  }
  mkdirSync(b.dir, { recursive: true });
  await sync(a, 'a');
  await sync(b, 'b');
  const rows: { ms: number; requests: number; moves: number; bytes: number; passes: number }[][] = [];
  let name = 'src';
  for (let r = 0; r < reps; r++) {
    const next = `r${r + 1}`;
    renameSync(path.join(a.dir, name), path.join(a.dir, next));
    name = next;
    const one: (typeof rows)[number] = [];
    for (const [d, n] of [[a, 'a'], [b, 'b']] as const) {
      px.reset();
      const res = await sync(d, n);
      const passes = JSON.parse(res.out.trim().split('\n').at(-1)!).passes ?? 0;
      one.push({ ms: res.ms, requests: px.counts.requests, moves: px.counts.routes['POST /api/files/move'] ?? 0, bytes: px.counts.up + px.counts.down, passes });
      log(`rename ${r + 1}, device ${n}: ${(res.ms / 1000).toFixed(1)} s, ${px.counts.requests} requests (${px.counts.routes['POST /api/files/move'] ?? 0} moves), ${px.counts.up + px.counts.down} bytes`);
    }
    const ta = treeOf(a.dir);
    const tb = treeOf(b.dir);
    if (ta.size !== files || tb.size !== files || [...ta].some(([p, x]) => tb.get(p) !== x) || ![...ta.keys()].every((p) => p.startsWith(name + '/'))) throw new Error(`rename ${r + 1}: the devices differ`);
    rows.push(one);
  }
  const mid = (i: 0 | 1, k: 'ms' | 'requests' | 'moves' | 'bytes') => median(rows.map((x) => x[i][k]));
  const md = `
A folder of ${files} small files (7–400 bytes, ten subfolders) synced to two devices, renamed on
device A; then \`dsync sync\` on A (it sends the rename to the server) and on B (it renames its
copy). One CLI process each, through a local TCP proxy; ${reps} renames one after another,
the median of each figure. Code: ${label} (git ${machine().git_head}). Both devices end byte-equal
(checked after every rename).

${table(
  ['device', 'wall time', 'HTTP requests', 'POST /api/files/move', 'bytes on the wire'],
  [
    ['A (renamed here)', `${(mid(0, 'ms') / 1000).toFixed(2)} s`, mid(0, 'requests'), mid(0, 'moves'), mid(0, 'bytes')],
    ['B (renamed on the server)', `${(mid(1, 'ms') / 1000).toFixed(2)} s`, mid(1, 'requests'), mid(1, 'moves'), mid(1, 'bytes')],
  ],
)}
`;
  writeResults(`folder-rename-${label}`, `A folder of ${files} files renamed: \`dsync sync\` on both devices (${label})`, machine(), md, { files, reps, label, rows });
} finally {
  px.server.close();
  await server.kill();
  rmSync(work, { recursive: true, force: true });
}
