/**
 * Processes the evaluation runs: the servers (Dsync's CLI and the baselines' server) as child
 * processes pinned to a core with taskset, toxiproxy for network shaping, an rsync daemon, and
 * readings of a process' CPU time and memory from /proc.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { onLogLines, workersOf } from '../../harness/serve-process.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const log = (...xs: unknown[]) => console.error('[eval]', ...xs);
const hasTaskset = (() => {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/** Runs `cmd args` pinned to `cpu` (a taskset list like "0"), or unpinned if cpu is null. */
export function spawnPinned(cpu: string | null, cmd: string, args: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): ChildProcess {
  const [c, a] = cpu !== null && hasTaskset ? ['taskset', ['-c', cpu, cmd, ...args]] : [cmd, args];
  return spawn(c, a, { cwd: opts.cwd ?? ROOT, env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Waits for a line matching `re` on the child's stdout. */
function waitLine(child: ChildProcess, re: RegExp, what: string): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let buf = '';
    let err = '';
    child.stderr!.on('data', (d) => (err = (err + d).slice(-4000)));
    child.stdout!.on('data', (d) => {
      buf += d;
      const m = buf.match(re);
      if (m) resolve(m);
    });
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before it was ready: ${err}`)));
  });
}

export interface ServerProc {
  pid: number;
  /** ws://127.0.0.1:PORT (Dsync adds /sync) */
  url: string;
  port: number;
  stop(): Promise<void>;
}

function stopper(child: ChildProcess) {
  return () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
      setTimeout(() => child.exitCode === null && child.kill('SIGKILL'), 3000).unref();
    });
}

/** Dsync's server (`dsync serve`), paper-exact or not, in its own process; `onLog`: each JSON
 *  line it logs (one per event), parsed. `store`: an s3:// store instead of the `data`
 *  directory; `workers`: `--workers N` (N processes on one port). */
export async function startDsync(opts: {
  data: string;
  paperExact: boolean;
  cpu: string | null;
  deflate?: boolean;
  env?: NodeJS.ProcessEnv;
  nodeArgs?: string[];
  onLog?: (e: Record<string, unknown>) => void;
  store?: { url: string; endpoint: string };
  workers?: number;
}): Promise<ServerProc> {
  const where = opts.store ? ['--store', opts.store.url, '--s3-endpoint', opts.store.endpoint] : ['--data', opts.data];
  const args = [...(opts.nodeArgs ?? []), 'bin/dsync.mjs', 'serve', '--host', '127.0.0.1', '--port', '0', ...where];
  if (opts.workers !== undefined) args.push('--workers', String(opts.workers));
  if (opts.paperExact) args.push('--paper-exact');
  if (opts.deflate === false) args.push('--no-deflate');
  const child = spawnPinned(opts.cpu, process.execPath, args, { env: opts.env });
  const m = await waitLine(child, /dsync server on http:\/\/[^:]+:(\d+)/, 'dsync serve');
  if (opts.onLog) onLogLines(child, opts.onLog);
  return { pid: child.pid!, port: Number(m[1]), url: `ws://127.0.0.1:${m[1]}`, stop: stopper(child) };
}

/** The baselines' server (bench/eval/baseline-server.ts) in its own process. */
export async function startBaselines(opts: { data: string; cpu: string | null; deflate?: boolean; nodeArgs?: string[] }): Promise<ServerProc> {
  const args = [...(opts.nodeArgs ?? []), '--import', 'tsx', 'bench/eval/baseline-server.ts', '--port', '0', '--data', opts.data];
  if (opts.deflate === false) args.push('--no-deflate');
  const child = spawnPinned(opts.cpu, process.execPath, args);
  const m = await waitLine(child, /baseline server on ws:\/\/[^:]+:(\d+)/, 'baseline server');
  return { pid: child.pid!, port: Number(m[1]), url: `ws://127.0.0.1:${m[1]}`, stop: stopper(child) };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Network shaping: toxiproxy (latency and bandwidth toxics on both directions of a TCP proxy)

export interface Shaping {
  /** megabits per second each way (0: unlimited) */
  mbps: number;
  /** round-trip time added, split equally between the two directions */
  rttMs: number;
}
export const describeShaping = (s: Shaping | null) =>
  s ? `toxiproxy v2.12.0: bandwidth ${s.mbps >= 1000 ? s.mbps / 1000 + ' Gbps' : s.mbps + ' Mbps'} each way, latency ${s.rttMs / 2} ms each way (RTT ${s.rttMs} ms)` : 'none (loopback)';

export const TOXIPROXY = process.env.TOXIPROXY ?? join(homedir(), 'go/bin/server');

export class Toxiproxy {
  private constructor(
    private child: ChildProcess,
    private api: string,
  ) {}
  static async start(cpu: string | null = null): Promise<Toxiproxy> {
    if (!existsSync(TOXIPROXY)) throw new Error(`toxiproxy not found at ${TOXIPROXY}: run scripts/bench.sh (it installs it) or set TOXIPROXY`);
    const port = await freePort();
    const child = spawnPinned(cpu, TOXIPROXY, ['-host', '127.0.0.1', '-port', String(port)], { env: { LOG_LEVEL: 'error' } });
    const api = `http://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(`${api}/version`)).ok) break;
      } catch {
        if (i > 100) throw new Error('toxiproxy did not start');
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    return new Toxiproxy(child, api);
  }
  private async call(method: string, path: string, body?: unknown) {
    const r = await fetch(this.api + path, { method, body: body ? JSON.stringify(body) : undefined, headers: { 'content-type': 'application/json' } });
    if (!r.ok) throw new Error(`toxiproxy ${method} ${path}: ${r.status} ${await r.text()}`);
    return r.status === 204 ? null : r.json();
  }
  /** A proxy to 127.0.0.1:upstream with the shaping applied; returns its listen port. */
  async proxy(name: string, upstream: number, s: Shaping): Promise<number> {
    await this.call('DELETE', `/proxies/${name}`).catch(() => {});
    const p = await this.call('POST', '/proxies', { name, listen: '127.0.0.1:0', upstream: `127.0.0.1:${upstream}`, enabled: true });
    for (const stream of ['upstream', 'downstream']) {
      if (s.rttMs) await this.call('POST', `/proxies/${name}/toxics`, { name: `lat-${stream}`, type: 'latency', stream, toxicity: 1, attributes: { latency: s.rttMs / 2, jitter: 0 } });
      // the bandwidth toxic's rate is in KB/s of 1000 bytes
      if (s.mbps) await this.call('POST', `/proxies/${name}/toxics`, { name: `bw-${stream}`, type: 'bandwidth', stream, toxicity: 1, attributes: { rate: Math.round((s.mbps * 1e6) / 8 / 1000) } });
    }
    return Number(String(p.listen).split(':').pop());
  }
  get pid(): number {
    return this.child.pid!;
  }
  async stop() {
    await stopper(this.child)();
  }
}

// ---------------------------------------------------------------------------------------------
// rsync daemon (the outside reference)

export async function startRsyncd(dir: string, cpu: string | null): Promise<{ port: number; module: string; stop(): Promise<void> }> {
  mkdirSync(join(dir, 'files'), { recursive: true });
  const port = await freePort();
  const conf = join(dir, 'rsyncd.conf');
  writeFileSync(conf, `use chroot = no\nuid = 0\ngid = 0\npid file = ${join(dir, 'rsyncd.pid')}\n[m]\npath = ${join(dir, 'files')}\nread only = false\n`);
  const child = spawnPinned(cpu, 'rsync', ['--daemon', '--no-detach', `--config=${conf}`, `--port=${port}`, '--address=127.0.0.1']);
  for (let i = 0; ; i++) {
    try {
      execFileSync('rsync', [`rsync://127.0.0.1:${port}/`], { stdio: 'ignore' });
      break;
    } catch {
      if (i > 100) throw new Error('rsync daemon did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { port, module: join(dir, 'files'), stop: stopper(child) };
}

// ---------------------------------------------------------------------------------------------
// /proc readings

const TICK = 100; // USER_HZ on Linux
/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / TICK;
}
/** Resident memory of a process, in bytes. */
export function rssBytes(pid: number): number {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) * 1024 : 0;
}

/** CPU seconds of a server and its live workers, plus those of workers that have exited
 *  (the cutime and cstime of the primary). */
export function serverCpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  let s = (Number(rest[11]) + Number(rest[12]) + Number(rest[13]) + Number(rest[14])) / TICK;
  for (const w of workersOf(pid)) {
    try {
      s += cpuSeconds(w);
    } catch {
      // exited between the listing and the reading
    }
  }
  return s;
}
/** Resident memory of a server and its workers, in bytes. */
export function serverRssBytes(pid: number): number {
  return [pid, ...workersOf(pid)].reduce((sum, p) => sum + rssBytes(p), 0);
}
