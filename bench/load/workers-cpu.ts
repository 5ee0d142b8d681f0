/**
 * Where `--workers 2` spends more CPU per sync than one process: the same syncs, one at a time
 * (a 2 KB insert into the 10 MB mixed file and back), against `dsync serve` with one process,
 * with two workers on cores 0-1, and with two workers both on core 0; CPU per sync of each
 * process (the primary and each worker, from /proc) after a warm-up, and with `--strace` the
 * system calls per sync of all of them together (strace -c, attached after the warm-up: its
 * own cost makes that run's CPU figures meaningless).
 *
 *   node --import tsx bench/load/workers-cpu.ts [--syncs 40] [--strace] [--interleave]
 *
 * `--interleave`: instead, two workers and one process, both on core 0, one after the other
 * twice, so that a machine whose load drifts over the run weighs on both alike.
 *
 * The client runs in this process: pin it away from the server (taskset -c 1).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { buildDatasets, editPath } from '../datasets/build.ts';
import { prepare, syncPrepared } from '../eval/clients.ts';
import { ROOT, cpuSeconds, startDsync } from '../eval/procs.ts';

const argv = process.argv.slice(2);
const syncs = Number(argv.includes('--syncs') ? argv[argv.indexOf('--syncs') + 1] : '40');
const trace = argv.includes('--strace');
const interleave = argv.includes('--interleave');
const ds = await buildDatasets({ large: false });
const pb = await prepare('dsync', bufferSource(new Uint8Array(readFileSync(ds.mixed))));
const pt = await prepare('dsync', bufferSource(new Uint8Array(readFileSync(editPath('insert', 2048)))));
const work = join(ROOT, 'bench/tmp/workers-cpu');

const children = (pid: number) => {
  try {
    return execFileSync('pgrep', ['-P', String(pid)]).toString().trim().split('\n').filter(Boolean).map(Number);
  } catch {
    return []; // none: one process
  }
};

const one = ['one process, core 0', 1, '0'] as const;
const twoOnOne = ['2 workers, both on core 0', 2, '0'] as const;
const runs = interleave ? [twoOnOne, one, twoOnOne, one] : [one, ['2 workers, cores 0-1', 2, '0-1'] as const, twoOnOne];
for (const [label, workers, cpu] of runs) {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const srv = await startDsync({ data: join(work, 'data'), paperExact: false, cpu, ...(workers > 1 && { workers }) });
  try {
    await syncPrepared(pb, srv.url, 'f', false);
    // warm-up: every worker has seen the file and compiled its hot code
    for (let i = 0; i < 8; i++) {
      await syncPrepared(pt, srv.url, 'f', false);
      await syncPrepared(pb, srv.url, 'f', false);
    }
    const pids = [srv.pid, ...children(srv.pid)];
    const st = trace ? spawn('strace', ['-c', '-f', '-o', join(work, 'strace.txt'), ...pids.flatMap((p) => ['-p', String(p)])], { stdio: 'ignore' }) : null;
    if (st) await new Promise((r) => setTimeout(r, 1000));
    const c0 = pids.map(cpuSeconds);
    for (let i = 0; i < syncs; i++) {
      await syncPrepared(pt, srv.url, 'f', false);
      await syncPrepared(pb, srv.url, 'f', false);
    }
    const per = pids.map((p, i) => ((cpuSeconds(p) - c0[i]) * 1000) / (2 * syncs));
    const sum = per.reduce((a, b) => a + b, 0);
    console.log(`${label}: ${sum.toFixed(1)} ms CPU per sync${workers > 1 ? ` (primary ${per[0].toFixed(1)}, workers ${per.slice(1).map((x) => x.toFixed(1)).join(' + ')})` : ''}${st ? ' (under strace)' : ''}`);
    if (st) {
      st.kill('SIGINT');
      await new Promise((r) => st.on('exit', r));
      const rows = readFileSync(join(work, 'strace.txt'), 'utf8').split('\n').filter((l) => /^\s*[\d.]+\s+[\d.]+\s+\d+\s+\d+/.test(l));
      const calls = rows.map((l) => l.trim().split(/\s+/)).map((f) => [f[f.length - 1], Number(f[3]) / (2 * syncs)] as const);
      console.log('  system calls per sync: ' + calls.filter(([, n]) => n >= 1).map(([k, n]) => `${k} ${n.toFixed(1)}`).join(', '));
    }
  } finally {
    await srv.stop();
  }
}
rmSync(work, { recursive: true, force: true });
