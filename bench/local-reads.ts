// Ranged reads of one segment on the local directory backend (server/src/store/local.ts
// `getStamped`), as a refinement listing makes them: 32 KiB at random offsets, 8 at once.
// Prints wall and CPU time per read.
//   node --import tsx bench/local-reads.ts [--reads N]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { localBackend } from '../server/src/store/local.ts';

const { values } = parseArgs({ options: { reads: { type: 'string', default: '20000' } } });
const N = Number(values.reads);
const root = mkdtempSync(path.join(tmpdir(), 'dsync-local-reads-'));
try {
  const b = localBackend(root);
  const size = 64 << 20;
  await b.putIfAbsent('segment', new Uint8Array(size).fill(3));
  let started = 0;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (started++ < N) await b.getStamped('segment', { offset: Math.floor(Math.random() * (size - 32768)), length: 32768 });
    }),
  );
  const cpu = process.cpuUsage(c0);
  const wall = performance.now() - t0;
  console.log(`${N} reads of 32 KiB, 8 at once: ${wall.toFixed(0)} ms wall (${((wall * 1000) / N).toFixed(1)} µs per read), ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU (${((cpu.user + cpu.system) / N).toFixed(1)} µs per read)`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
