// Resume across processes (bench/results/resume.md): a `dsync push` of SIZE MiB of random bytes
// to a server on a loopback port is killed (SIGINT or SIGKILL), or its server is (`server`:
// SIGKILL of a `dsync serve` child, then started again on the same data), once half the file's
// bytes have passed a counting TCP pipe; the same push by a new process then sends what the
// server lacks. Prints the bytes each run sent. Usage:
//   node --import tsx bench/resume.ts [SIZE_MIB=500] [SIGINT|SIGKILL|server] [new|existing]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pushBytes, testServer } from '../harness/helpers.ts';
import { socketPipe } from '../harness/pipe.ts';
import { fastRandomBytes } from '../harness/testdata.ts';
import { TestServer } from '../e2e/server.ts';

const size = Number(process.argv[2] ?? 500) << 20;
const signal = process.argv[3] ?? 'SIGINT';
const existing = process.argv[4] === 'existing';
const logs: Record<string, unknown>[] = [];
const s = signal === 'server' ? null : await testServer({}, (e) => void (e.op === 'push' && logs.push(e)));
const child = signal === 'server' ? await new TestServer().start() : null;
const pipe = await socketPipe({ to: () => s?.port ?? Number(new URL(child!.url).port) });
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-bench-resume-'));
try {
  const file = path.join(dir, 'big.bin');
  writeFileSync(file, fastRandomBytes(5, size));
  if (existing) await pushBytes(pipe, 'big.bin', fastRandomBytes(6, 1 << 20));
  const env = { ...process.env, DSYNC_CACHE_DIR: path.join(dir, 'known') };
  const run = () => spawn(process.execPath, [path.join(import.meta.dirname, '../bin/dsync.mjs'), 'push', file, '--server', pipe.wsUrl, '--force', '--retries', '0'], { env, stdio: ['ignore', 'pipe', 'ignore'] });
  const first = run();
  const exited = new Promise((r) => first.on('close', r));
  await new Promise<void>((r) => {
    const t = setInterval(() => pipe.fromClient > size / 2 && (clearInterval(t), r()), 5);
  });
  if (child) await child.kill();
  else first.kill(signal as NodeJS.Signals);
  await exited;
  await child?.start();
  const firstSent = pipe.fromClient;
  const second = run();
  let out = '';
  second.stdout!.on('data', (d) => (out += d));
  await new Promise((r) => second.on('close', r));
  const sent = pipe.fromClient - firstSent;
  const pct = (n: number) => `${((100 * n) / size).toFixed(1)}%`;
  console.log(JSON.stringify({ sizeMiB: size >> 20, signal, existing, firstRunBytes: firstSent, firstRun: pct(firstSent), secondRunBytes: sent, secondRun: pct(sent), resumedChunks: logs[logs.length - 1]?.resumedChunks, matchedBytes: JSON.parse(out).matchedBytes }));
} finally {
  pipe.close();
  await s?.stop();
  await child?.stop();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
