// A server in a child process (so it can be SIGKILLed and its memory measured).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const root = new URL('../..', import.meta.url).pathname;

export interface Child {
  child: ChildProcess;
  url: string;
  wsUrl: string;
  /** resident and peak resident memory of the server process, bytes */
  memory(): { rss: number; peak: number };
  kill(): Promise<void>;
}

/** Resident and peak resident memory of a process, bytes (Linux: /proc/PID/status). */
export function processMemory(pid: number): { rss: number; peak: number } {
  const st = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(st)![1]) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

/** Calls `onLog` with each JSON line a server process writes to its stdout, parsed. */
export function onLogLines(child: ChildProcess, onLog: (e: Record<string, unknown>) => void): void {
  let rest = '';
  child.stdout!.on('data', (d) => {
    const lines = (rest + d).split('\n');
    rest = lines.pop()!;
    for (const l of lines) if (l.startsWith('{')) onLog(JSON.parse(l));
  });
}

/** `onLog`: each line the server logs (JSON, one per event), parsed. */
export async function startChild(data: string, flags: string[] = [], onLog?: (e: Record<string, unknown>) => void): Promise<Child> {
  const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'serve', '--port', '0', '--host', '127.0.0.1', '--data', data, ...flags], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
  });
  if (onLog) onLogLines(child, onLog);
  else child.stdout!.resume();
  return {
    child,
    url,
    wsUrl: url.replace('http', 'ws') + '/sync',
    memory: () => processMemory(child.pid!),
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}
