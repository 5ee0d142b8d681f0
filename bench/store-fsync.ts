/**
 * The store's fsyncs per small file (issue 45; docs/store.md §1 "Local directory", §4 "Commits
 * at once"): the first `dsync sync` of a folder of --files small files (1–13 KB of random bytes,
 * 10 folders of 10 subfolders) to a fresh `dsync serve` child over a local-directory store, then
 * `dsync mv` of one top folder (a tenth of the files). Per step: the server's fsync and
 * fdatasync calls, counted by `strace -f -y -e trace=fsync,fdatasync -p PID` (attached for
 * that step only) and attributed by what they made durable (a file or a directory, under
 * data/, index/, a file head, a folder catalog, a journal mark, other); and the CLI's wall time
 * of the same step on --reps fresh servers without strace (ptrace slows every call). Counts
 * are exact; on a shared machine the seconds are noise around them.
 * `--peers SCALE`: bench/peers' seeded tree instead (bench/peers/data.ts, seed 45: its small
 * files in nested folders and its three binaries, bench/results/peers-profile.md's run at 0.2),
 * and its folder rename step.
 * Usage (from the repository root; strace installed):
 *   node --import tsx bench/store-fsync.ts [--files 1000 | --peers 0.2] [--reps 3] [--walls-only] [--out store-fsync] [--label TEXT]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServe } from '../harness/child.ts';
import { runDsync as run, arg, log, machine, median, table, writeResults } from './lib/common.ts';
import { RENAMED_FROM, RENAMED_TO, buildTree } from './peers/data.ts';

const peers = process.argv.includes('--peers') ? Number(arg('--peers', '0.2')) : 0;
let files = Number(arg('--files', '1000'));
let moved = files / 10;
const reps = Number(arg('--reps', '3'));
const out = arg('--out', 'store-fsync');
const label = arg('--label', 'this tree');
/** no traced run: the walls alone (to interleave trees run by run) */
const wallsOnly = process.argv.includes('--walls-only');

/** What an fsync made durable, from strace -y's path of its descriptor. */
function kind(p: string, store: string): string {
  const rel = p.startsWith(store + '/') ? p.slice(store.length + 1) : p === store ? '' : '?';
  const dir = !/\/@tmp-[0-9a-f]+$/.test(rel);
  const what = rel.startsWith('data/') ? 'segment' : rel.startsWith('index/') ? 'index' : rel.startsWith('journal') ? 'mark' : /^ns\/[^/]+\/files(\/|$)/.test(rel) ? 'file head' : /^ns\/[^/]+\/folders(\/|$)/.test(rel) ? 'catalog' : 'other';
  return `${what} ${dir ? 'dir' : 'file'}`;
}

/** Runs `step` with strace attached to `pid`: the fsyncs it made, by kind. */
async function traced(pid: number, store: string, work: string, step: () => Promise<void>): Promise<Record<string, number>> {
  const file = path.join(work, `strace-${Date.now()}.txt`);
  const st: ChildProcess = spawn('strace', ['-f', '-y', '-T', '-e', 'trace=fsync,fdatasync', '-o', file, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
  // attached once strace says so for the main thread
  await new Promise<void>((ok, fail) => {
    let err = '';
    st.stderr!.on('data', (d) => {
      err += d;
      if (err.includes('attached')) ok();
    });
    st.once('exit', (c) => fail(new Error(`strace exited with ${c}: ${err}`)));
  });
  await new Promise((r) => setTimeout(r, 500)); // every thread attached
  await step();
  const exited = new Promise((r) => st.once('exit', r));
  st.kill('SIGINT');
  await exited;
  const counts: Record<string, number> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /(?:fsync|fdatasync)\(\d+<([^>]*)>/.exec(line);
    if (!m) continue;
    const k = kind(m[1], store);
    counts[k] = (counts[k] ?? 0) + 1;
    counts.total = (counts.total ?? 0) + 1;
    // -T: the time the call took (a call strace saw resume in another line is counted there)
    const t = /<(\d+\.\d+)>$/.exec(line);
    if (t) counts.seconds = (counts.seconds ?? 0) + Number(t[1]);
  }
  return counts;
}

interface Run {
  first: { ms: number; fsyncs?: Record<string, number> };
  move: { ms: number; fsyncs?: Record<string, number> };
}

async function once(r: number, withStrace: boolean): Promise<Run> {
  const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-fsync-'));
  const store = path.join(work, 'store');
  // --max-load 0: a loaded machine's admission would answer busy (bench/results/peers-profile.md)
  const server = await startServe(['--store', store, '--max-load', '0']);
  const pid = server.child.pid!;
  try {
    const dir = path.join(work, 'proj');
    if (peers) {
      const tree = buildTree(dir, 45, peers);
      files = tree.small.length + tree.binaries.length;
      moved = tree.small.filter((f) => f.startsWith(RENAMED_FROM + '/')).length;
    } else {
      let seed = 45_2026 + r;
      const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
      for (let i = 0; i < files; i++) {
        const f = path.join(dir, `d${i % 10}`, `s${Math.floor(i / 10) % 10}`, `f${String(i).padStart(5, '0')}.bin`);
        mkdirSync(path.dirname(f), { recursive: true });
        const b = Buffer.alloc(1024 + Math.floor(rnd() * 12 * 1024));
        for (let k = 0; k < b.length; k++) b[k] = (rnd() * 256) | 0;
        writeFileSync(f, b);
      }
    }
    const env = { DSYNC_CACHE_DIR: path.join(work, 'cache') };
    const step = async (args: string[]) => {
      const res = await run(args, env);
      if (res.code !== 0) throw new Error(`dsync ${args.join(' ')}: ${res.out.slice(-2000)}`);
      return res.ms;
    };
    const measure = async (args: string[]) => {
      let ms = 0;
      const fsyncs = withStrace ? await traced(pid, store, work, async () => void (ms = await step(args))) : undefined;
      if (!withStrace) ms = await step(args);
      return { ms, fsyncs };
    };
    const first = await measure(['sync', dir, '--remote', 'tree', '--json', '-s', server.url]);
    const move = await measure(peers ? ['mv', `tree/${RENAMED_FROM}/`, `tree/${RENAMED_TO}/`, '-s', server.url] : ['mv', 'tree/d0/', 'tree/moved/', '-s', server.url]);
    log(`${withStrace ? 'traced' : 'rep ' + r}: first sync ${(first.ms / 1000).toFixed(1)} s${first.fsyncs ? ` (${first.fsyncs.total} fsyncs)` : ''}, folder move ${(move.ms / 1000).toFixed(1)} s${move.fsyncs ? ` (${move.fsyncs.total} fsyncs)` : ''}`);
    return { first, move };
  } finally {
    await server.kill();
    if (!process.env.KEEP_BENCH) rmSync(work, { recursive: true, force: true });
    else log(`kept ${work}`);
  }
}

const traceRun = wallsOnly ? null : await once(0, true);
const runs: Run[] = [];
for (let r = 0; r < reps; r++) runs.push(await once(r, false));

const kinds = traceRun ? [...new Set([...Object.keys(traceRun.first.fsyncs!), ...Object.keys(traceRun.move.fsyncs!)])].filter((k) => k !== 'total' && k !== 'seconds').sort() : [];
const fs = (x: Record<string, number>, k: string) => x[k] ?? 0;
const what = peers
  ? `The first \`dsync sync\` of bench/peers' tree at scale ${peers} (seed 45: ${files} files, its binaries among them) to a fresh
\`dsync serve --max-load 0\` over a local directory (ext4 here), then \`dsync mv tree/${RENAMED_FROM}/ tree/${RENAMED_TO}/\` (${moved} files).`
  : `The first \`dsync sync\` of ${files} files of 1–13 KB (random bytes; 10 folders of 10
subfolders) to a fresh \`dsync serve --max-load 0\` over a local directory (ext4 here), then
\`dsync mv tree/d0/ tree/moved/\` (${moved} files).`;
const body = `
${label}. ${what}

${
  traceRun
    ? `fsync and fdatasync calls of the server, one traced run (strace attached for each step; "s in fsync": the
time the calls took, summed over the threads that waited in them, under ptrace):

${table(
  ['step', 'fsyncs', 'per file', 's in fsync', ...kinds],
  [
    ['first sync', traceRun.first.fsyncs!.total, (traceRun.first.fsyncs!.total / files).toFixed(2), fs(traceRun.first.fsyncs!, 'seconds').toFixed(1), ...kinds.map((k) => fs(traceRun.first.fsyncs!, k))],
    ['folder move', traceRun.move.fsyncs!.total, (traceRun.move.fsyncs!.total / moved).toFixed(2), fs(traceRun.move.fsyncs!, 'seconds').toFixed(1), ...kinds.map((k) => fs(traceRun.move.fsyncs!, k))],
  ],
)}`
    : '(--walls-only: no traced run)'
}

Wall time of the CLI, ${reps} runs without strace on fresh servers (median; runs):

${table(
  ['step', 'median', 'runs'],
  [
    ['first sync', `${(median(runs.map((x) => x.first.ms)) / 1000).toFixed(1)} s`, runs.map((x) => (x.first.ms / 1000).toFixed(1)).join(', ')],
    ['folder move', `${(median(runs.map((x) => x.move.ms)) / 1000).toFixed(1)} s`, runs.map((x) => (x.move.ms / 1000).toFixed(1)).join(', ')],
  ],
)}
`;
writeResults(out, `The store's fsyncs: ${files} small files' first sync and a folder move (${label})`, machine(), body, { files, reps, traced: traceRun, runs }, '- note: 2 cores shared with other sessions\' builds and tests (see loadavg): the counts are exact, the seconds noisy.');
