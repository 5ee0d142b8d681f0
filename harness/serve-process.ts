/** A `dsync serve` child process as the tests and the benchmark see it: what it logs (JSON, one
 *  event per line) and, with --workers, its worker processes. */
import type { ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

/** The store timeout (`--store-timeout-ms`) of the servers tests start: the default (20 s) is a
 *  deadline for a frozen store, and a local directory's put waited 20 s for a disk shared with
 *  a loaded test run (load 19); a test of the deadline sets its own. */
export const TEST_STORE_TIMEOUT_MS = 120_000;

/** The environment of a test's `dsync serve` child: `env` (default: this process') with the
 *  tests' store timeout unless it names one. */
export const serveEnv = (env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv => ({ DSYNC_STORE_TIMEOUT_MS: String(TEST_STORE_TIMEOUT_MS), ...env });

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
