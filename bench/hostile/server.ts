// A server started as the README's quick start starts one (`scripts/start.sh`: the set-up,
// then `dsync serve`), on a free loopback port and a temporary data directory: what the
// bench/hostile scripts run against.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { processMemory } from '../../harness/child.ts';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

export interface Server {
  url: string;
  wsUrl: string;
  child: ChildProcess;
  /** its data directory */
  data: string;
  memory(): { rss: number; peak: number };
  stop(): Promise<void>;
}

/** `scripts/start.sh --port P --data DIR …flags`, optionally on a tmpfs of `tmpfs` bytes. */
export async function start(flags: string[], tmpfs?: number, root = new URL('../..', import.meta.url).pathname): Promise<Server> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-probe-'));
  const port = await freePort();
  const args = ['--port', String(port), '--data', data, ...flags];
  const child = tmpfs
    ? spawn('unshare', ['-rm', 'sh', '-c', `mount -t tmpfs -o size=${tmpfs} tmpfs "$0" && exec scripts/start.sh "$@"`, data, ...args], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] })
    : spawn('scripts/start.sh', args, { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  for (let t = 0; ; t++) {
    if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode}`);
    if (await fetch(`${url}/api/health`).then((r) => r.ok, () => false)) break;
    if (t > 600) throw new Error('the server did not start in 120 s');
    await sleep(200);
  }
  return {
    url,
    wsUrl: `ws://127.0.0.1:${port}/sync`,
    child,
    data,
    memory: () => processMemory(child.pid!),
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([exited, sleep(3000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(data, { recursive: true, force: true });
    },
  };
}


/** The printed checklist of a probe: each check a line, PASS or FAIL (null: a note), kept for
 *  the results file; `failures()` counts the FAILs. */
export function checklist() {
  const lines: string[] = [];
  let failures = 0;
  const say = (ok: boolean | null, what: string) => {
    if (ok === false) failures++;
    const line = `${ok === null ? '    ' : ok ? 'PASS' : 'FAIL'}  ${what}`;
    lines.push(line);
    console.log(line);
  };
  return { lines, say, failures: () => failures };
}

