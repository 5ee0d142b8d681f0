/**
 * From a save on one device to the other (bench/sync-folder.ts, bench/peers): `dsync sync
 * --watch` runs on two devices; a file is saved on the first --saves times (300 ms apart) and
 * each save is timed until the second device's copy holds the new bytes (polled every 5 ms).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, log } from './common.ts';

export interface Device {
  dir: string;
  env: NodeJS.ProcessEnv;
  /** `--device` name */
  name: string;
  /** extra `dsync sync` arguments (e.g. --remote) */
  args?: string[];
  /** node's own arguments (e.g. --cpu-prof) */
  nodeArgs?: string[];
}

export interface WatchLatency {
  ms: number[];
  median: number;
  p99: number;
  min: number;
  max: number;
}

/** The nearest-rank percentile `q` (0..1) of `xs`. */
export function percentile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}

export async function watchLatency(a: Device, b: Device, saves: number, file = 'doc.txt', timeoutMs = 120_000): Promise<WatchLatency> {
  const dsync = path.join(ROOT, 'bin/dsync.mjs');
  const children: ChildProcess[] = [];
  try {
    const watchers = [a, b].map((d) => {
      const c = spawn(process.execPath, [...(d.nodeArgs ?? []), dsync, 'sync', d.dir, ...(d.args ?? []), '--watch', '--json', '--device', d.name], {
        env: { ...process.env, ...d.env },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.push(c);
      let out = '';
      c.stdout!.on('data', (x) => (out += x));
      return () => out;
    });
    const t0 = performance.now();
    while (!watchers.every((w) => w().includes('"watching"'))) {
      if (performance.now() - t0 > 10 * timeoutMs) throw new Error('the watchers did not start');
      if (children.some((c) => c.exitCode !== null)) throw new Error(`a watcher exited: ${watchers.map((w) => w().slice(-500)).join('\n')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const ms: number[] = [];
    for (let i = 0; i < saves; i++) {
      const body = `save ${i} ${'x'.repeat(1000 + i)}\n`;
      const s0 = performance.now();
      writeFileSync(path.join(a.dir, file), body);
      const there = path.join(b.dir, file);
      while (!(existsSync(there) && readFileSync(there, 'utf8') === body)) {
        if (performance.now() - s0 > timeoutMs) throw new Error(`save ${i} did not arrive`);
        await new Promise((r) => setTimeout(r, 5));
      }
      ms.push(performance.now() - s0);
      log(`save ${i}: ${ms[i].toFixed(0)} ms`);
      await new Promise((r) => setTimeout(r, 300));
    }
    const sorted = [...ms].sort((x, y) => x - y);
    const mid = sorted.length >> 1;
    return { ms, median: sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2, p99: percentile(ms, 0.99), min: sorted[0], max: sorted.at(-1)! };
  } finally {
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((r) => {
            if (c.exitCode !== null || c.signalCode !== null) return r();
            c.once('exit', () => r());
            c.kill('SIGINT');
            setTimeout(() => c.kill('SIGKILL'), 15_000).unref();
          }),
      ),
    );
  }
}
