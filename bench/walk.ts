/**
 * The local walk of `dsync sync` (cli/walk.ts walkFolder): wall and CPU time of one walk of a
 * folder of --files small files in nested folders, the median of --reps walks. Every pass of
 * `dsync sync` (and of `--watch`, once per save) walks the whole folder.
 * Usage (from the repository root): node --import tsx bench/walk.ts [--files 5000] [--reps 15]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { walkFolder } from '../cli/walk.ts';
import { arg, log, machine, median, table, writeResults } from './lib/common.ts';

const files = Number(arg('--files', '5000'));
const reps = Number(arg('--reps', '15'));
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-bench-walk-'));
try {
  for (let i = 0; i < files; i++) {
    const d = path.join(dir, `d${i % 50}`, `s${i % 7}`);
    mkdirSync(d, { recursive: true });
    writeFileSync(path.join(d, `f${i}.txt`), `file ${i}\n`);
  }
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let r = 0; r < reps; r++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const w = await walkFolder(dir);
    wall.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
    if (w.files.size !== files) throw new Error(`walked ${w.files.size} files of ${files}`);
  }
  const row = [files, `${median(wall).toFixed(1)} ms`, `${median(cpu).toFixed(1)} ms`, `${Math.min(...wall).toFixed(1)} ms`];
  log(`${files} files: wall ${row[1]}, CPU ${row[2]} (median of ${reps})`);
  writeResults('walk', 'The local walk of `dsync sync`', machine(), table(['files', 'wall (median)', 'CPU (median)', 'wall (min)'], [row]), { files, reps, wall, cpu });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
