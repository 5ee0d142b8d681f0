/** A `dsync serve` child process as the tests and the benchmark see it: what it logs (JSON, one
 *  event per line) and, with --workers, its worker processes. */
import type { ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

/** Calls `onLog` with each JSON line a server process writes to its stdout, parsed. */
export function onLogLines(child: ChildProcess, onLog: (e: Record<string, unknown>) => void): void {
  let rest = '';
  child.stdout!.on('data', (d) => {
    const lines = (rest + d).split('\n');
    rest = lines.pop()!;
    for (const l of lines) if (l.startsWith('{')) onLog(JSON.parse(l));
  });
}

/** The `dsync serve` processes whose parent is `pid`: the workers of `--workers N`
 *  (server/src/cluster.ts), not tsx's esbuild service. */
export function workersOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) === pid && state !== 'Z' && readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('dsync.mjs')) out.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
