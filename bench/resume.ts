// Resume across processes (bench/results/resume.md): a `dsync push` of SIZE MiB of random bytes
// to a server on a loopback port is killed (SIGINT or SIGKILL) once half the file's bytes have
// passed a counting TCP pipe; the same push by a new process then sends what the server lacks.
// Prints the bytes each run sent. Usage:
//   node --import tsx bench/resume.ts [SIZE_MIB=500] [SIGINT|SIGKILL] [new|existing]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pushBytes, testServer } from '../harness/helpers.ts';
import { socketPipe } from '../harness/pipe.ts';
import { fastRandomBytes } from '../shared/src/testdata.ts';

const size = Number(process.argv[2] ?? 500) << 20;
const signal = (process.argv[3] ?? 'SIGINT') as NodeJS.Signals;
const existing = process.argv[4] === 'existing';
const logs: Record<string, unknown>[] = [];
const s = await testServer({}, (e) => void (e.op === 'push' && logs.push(e)));
const pipe = await socketPipe({ to: () => s.port });
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-bench-resume-'));
try {
  const file = path.join(dir, 'big.bin');
  writeFileSync(file, fastRandomBytes(5, size));
  if (existing) await pushBytes(s, 'big.bin', fastRandomBytes(6, 1 << 20));
  const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'known') };
  const run = () => spawn(process.execPath, [path.join(import.meta.dirname, '../bin/dsync.mjs'), 'push', file, '--server', pipe.wsUrl, '--force'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const first = run();
  const exited = new Promise((r) => first.on('close', r));
  await new Promise<void>((r) => {
    const t = setInterval(() => pipe.fromClient > size / 2 && (clearInterval(t), r()), 5);
  });
  first.kill(signal);
  await exited;
  const firstSent = pipe.fromClient;
  const second = run();
  await new Promise((r) => second.on('close', r));
  const sent = pipe.fromClient - firstSent;
  const pct = (n: number) => `${((100 * n) / size).toFixed(1)}%`;
  console.log(JSON.stringify({ sizeMiB: size >> 20, signal, existing, firstRunBytes: firstSent, firstRun: pct(firstSent), secondRunBytes: sent, secondRun: pct(sent), resumedChunks: logs[logs.length - 1]?.resumedChunks }));
} finally {
  pipe.close();
  await s.stop();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
