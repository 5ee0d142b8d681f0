/**
 * What bench/peers measures of a process: a client command's wall time, CPU (user + sys of it
 * and every child it waited for) and max RSS through /usr/bin/time; a daemon's CPU as the delta
 * of /proc/PID/stat (its own and its reaped children's ticks) and its max RSS as the largest
 * VmHWM of its process tree, sampled; and whether two folders hold the same files (`diff -r`)
 * with the same mtimes.
 */
import { spawn, spawnSync } from 'node:child_process';
import { lstatSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const TICK = 100; // USER_HZ: clock ticks a second in /proc/PID/stat (100 on Linux)

export interface Run {
  wallMs: number;
  cpuMs: number;
  maxRss: number;
  out: string;
}

/** How long one client command may run before it is killed and its step fails (a hung tool is
 *  reported, not waited for): generous, a first sync of the full tree takes minutes here. */
export const COMMAND_TIMEOUT_MS = 3_600_000;

/** The process groups of the commands running now. */
const running = new Set<number>();

/** Kills every command runTimed has running (the bench is being stopped). */
export function killRunning(): void {
  for (const pgid of running) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** Runs `cmd args` under /usr/bin/time in a process group of its own; rejects with its output
 *  when it exits non-zero, or kills the group and rejects after `timeoutMs`. */
export function runTimed(cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; okCodes?: number[]; timeoutMs?: number } = {}): Promise<Run> {
  const stats = path.join(tmpdir(), `peers-time-${process.pid}-${Math.random().toString(36).slice(2)}`);
  const t0 = performance.now();
  return new Promise((ok, fail) => {
    const c = spawn('/usr/bin/time', ['-o', stats, '-f', '%U %S %M', cmd, ...args], {
      env: { ...process.env, ...opts.env },
      cwd: opts.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    if (c.pid) running.add(c.pid);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-c.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }, opts.timeoutMs ?? COMMAND_TIMEOUT_MS);
    let out = '';
    c.stdout.on('data', (d) => (out = (out + d).slice(-200_000)));
    c.stderr.on('data', (d) => (out = (out + d).slice(-200_000)));
    c.on('error', fail);
    c.on('close', (code) => {
      clearTimeout(timer);
      running.delete(c.pid!);
      const wallMs = performance.now() - t0;
      let text = '';
      try {
        text = readFileSync(stats, 'utf8');
      } catch {
        /* no stats: the command did not start */
      }
      rmSync(stats, { force: true });
      // /usr/bin/time writes "Command exited with non-zero status N" first when it fails
      const m = /([\d.]+) ([\d.]+) (\d+)\s*$/.exec(text);
      if (timedOut || !(opts.okCodes ?? [0]).includes(code ?? -1) || !m) {
        const why = timedOut ? `was killed after ${opts.timeoutMs ?? COMMAND_TIMEOUT_MS} ms` : `exited with ${code}`;
        fail(new Error(`${cmd} ${args.join(' ')} ${why}:\n${out.slice(-3000)}`));
        return;
      }
      ok({ wallMs, cpuMs: (Number(m[1]) + Number(m[2])) * 1000, maxRss: Number(m[3]) * 1024, out });
    });
  });
}

/** CPU of a process so far, ms: its own user + sys ticks and those of the children it reaped. */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields 14..17 of stat(5) are at 11..14 here (the first two fields precede the split)
    return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / TICK;
  } catch {
    return 0;
  }
}

/** The children of every thread of `pid` (a Go program forks from any thread). */
function children(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
      try {
        return readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
}

function hwm(pid: number): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** The largest peak RSS (VmHWM) in a process tree, sampled every `everyMs` while it runs:
 *  a short-lived child (an rsync daemon's per-connection fork) is seen if it lives past one
 *  sample. `cpuMs` adds the ticks of children still running to the root's. */
export class Daemon {
  peak = 0;
  private timer: NodeJS.Timeout;
  constructor(
    readonly pid: number,
    everyMs = 50,
  ) {
    this.timer = setInterval(() => this.sample(), everyMs);
    this.timer.unref();
  }
  private tree(): number[] {
    const all = [this.pid];
    for (let i = 0; i < all.length; i++) all.push(...children(all[i]));
    return all;
  }
  sample(): void {
    for (const p of this.tree()) this.peak = Math.max(this.peak, hwm(p));
  }
  /** how many processes run under the root */
  descendants(): number {
    return this.tree().length - 1;
  }
  cpuMs(): number {
    const [root, ...rest] = this.tree();
    return processCpuMs(root) + rest.reduce((s, p) => s + processCpuMs(p), 0);
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

export interface Check {
  /** `diff -r` found no difference but folders with no files in them */
  same: boolean;
  /** folders on one side only that hold no file (a tool that does not sync empty folders
   *  leaves the old one of a renamed folder behind) */
  emptyFolders: number;
  diff: string;
  files: number;
  /** files of A whose copy on B has an mtime within 1 s of A's */
  mtimesKept: number;
}

/** `diff -r` of A and B (without the tools' own folders) and their regular files' mtimes. */
export function compare(a: string, b: string, exclude: string[]): Check {
  const r = spawnSync('diff', ['-r', '-q', ...exclude.flatMap((x) => ['-x', x]), a, b], { encoding: 'utf8', maxBuffer: 64 << 20 });
  // "Only in DIR: NAME" of a folder without files is an empty folder left behind, not a file lost
  const hasFiles = (p: string): boolean => readdirSync(p, { withFileTypes: true }).some((e) => e.isFile() || (e.isDirectory() && hasFiles(path.join(p, e.name))));
  let emptyFolders = 0;
  const lines = `${r.stdout}${r.stderr}`
    .trim()
    .split('\n')
    .filter((l) => {
      const m = /^Only in (.*): (.*)$/.exec(l);
      const p = m && path.join(m[1], m[2]);
      if (p && lstatSync(p).isDirectory() && !hasFiles(p)) return (emptyFolders++, false);
      return l !== '';
    });
  let files = 0;
  let mtimesKept = 0;
  const walk = (rel: string) => {
    for (const e of readdirSync(path.join(a, rel), { withFileTypes: true })) {
      if (exclude.some((x) => (x.endsWith('*') ? e.name.startsWith(x.slice(0, -1)) : e.name === x))) continue;
      const p = path.join(rel, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile()) {
        files++;
        try {
          if (Math.abs(lstatSync(path.join(a, p)).mtimeMs - lstatSync(path.join(b, p)).mtimeMs) <= 1000) mtimesKept++;
        } catch {
          /* missing on B: diff says so */
        }
      }
    }
  };
  walk('');
  return { same: r.status !== 2 && lines.length === 0, emptyFolders, diff: lines.slice(0, 10).join('\n'), files, mtimesKept };
}

/** Waits until `cond()` is true, polling every `everyMs`; throws `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, timeoutMs: number, everyMs = 100): Promise<void> {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
