/** Reading what a `dsync serve` child process logs (JSON, one event per line), for the tests and
 *  the benchmark that start servers as child processes. */
import type { ChildProcess } from 'node:child_process';

/** Calls `onLog` with each JSON line a server process writes to its stdout, parsed. */
export function onLogLines(child: ChildProcess, onLog: (e: Record<string, unknown>) => void): void {
  let rest = '';
  child.stdout!.on('data', (d) => {
    const lines = (rest + d).split('\n');
    rest = lines.pop()!;
    for (const l of lines) if (l.startsWith('{')) onLog(JSON.parse(l));
  });
}
