// A server in a child process (harness: shared by the tests and bench/hostile/probe.ts): the
// real `dsync serve` (bin/dsync.mjs) on a loopback port, so that a test can SIGKILL it, read its
// log lines and measure its memory (/proc/PID/status).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { onLogLines, serveEnv } from './serve-process.ts';

const root = new URL('..', import.meta.url).pathname;

export interface Child {
  child: ChildProcess;
  /** the line that announced the server */
  banner: string;
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

/** SIGKILLs a child process, if it still runs, and waits until it has exited. */
export async function killHard(child: ChildProcess): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }
}

/** `onLog`: each line the server logs (JSON, one per event), parsed. */
export function startChild(data: string, flags: string[] = [], onLog?: (e: Record<string, unknown>) => void): Promise<Child> {
  return startServe(['--data', data, ...flags], { onLog });
}

/** A `dsync serve` child's banner line and URL, once it prints it on stdout; rejected with its
 *  output (and `more()`, its stderr where that is piped) if it exits first. */
export function bannerOf(child: ChildProcess, more: () => string = () => ''): Promise<[string, string]> {
  return new Promise<[string, string]>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /dsync server on (http:\/\/[\d.]+:\d+)[^\n]*\n/.exec(out);
      if (m) resolve([m[0].trim(), m[1]]);
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}${more()}`)));
  });
}

/** `dsync serve --port 0 --host 127.0.0.1 ARGS`, resolved once it prints its banner; rejected
 *  with its output if it exits first. Its stderr is passed on to this process' stderr. */
export async function startServe(args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; onLog?: (e: Record<string, unknown>) => void; nodeArgs?: string[] } = {}): Promise<Child> {
  const { onLog } = opts;
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), path.join(root, 'bin/dsync.mjs'), 'serve', '--port', '0', '--host', '127.0.0.1', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: serveEnv(opts.env),
    cwd: opts.cwd,
  });
  let err = '';
  child.stderr!.on('data', (d) => {
    process.stderr.write(d);
    err = (err + d).slice(-4000);
  });
  const [banner, url] = await bannerOf(child, () => err);
  if (onLog) onLogLines(child, onLog);
  else child.stdout!.resume();
  return {
    child,
    banner,
    url,
    wsUrl: url.replace('http', 'ws') + '/sync',
    memory: () => processMemory(child.pid!),
    kill: () => killHard(child),
  };
}

