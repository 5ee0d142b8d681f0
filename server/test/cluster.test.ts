// `dsync serve --workers N` as a user runs it: a real process tree on a loopback port.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { get } from 'node:http';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { onLogLines } from './child.ts';

const root = new URL('../..', import.meta.url).pathname;

/** The pids of the live server processes whose parent is `pid` (not tsx's esbuild service). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const server = readFileSync(`/proc/${d}/cmdline`, 'utf8').includes('dsync.mjs');
      if (Number(fields[1]) === pid && fields[0] !== 'Z' && server) out.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 30_000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function serve(data: string, flags: string[]): { child: ChildProcess; url: Promise<string>; out: () => string; logs: Record<string, unknown>[] } {
  const child = spawn(process.execPath, [path.join(root, 'bin/dsync.mjs'), 'serve', '--port', '0', '--host', '127.0.0.1', '--data', data, ...flags], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const logs: Record<string, unknown>[] = [];
  child.stderr!.on('data', (d) => (out += d));
  child.stdout!.on('data', (d) => (out += d));
  onLogLines(child, (e) => logs.push(e));
  const url = new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', () => {
      const m = /dsync server on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
  });
  return { child, url, out: () => out, logs };
}

/** GET /api/health on a new connection each time (a kept-alive one would stay with one worker). */
const healthy = (url: string) =>
  new Promise<boolean>((resolve) => {
    const req = get(`${url}/api/health`, { agent: false, timeout: 5000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
  });

test('--workers 2: two servers on one port; a dead worker is replaced; SIGTERM stops them all', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = serve(data, ['--workers', '2']);
  try {
    const url = await s.url;
    const primary = s.child.pid!;
    assert.equal(s.out().match(/dsync server on/g)!.length, 1, 'one banner, from the primary');
    assert.match(s.out(), /\(2 workers\)/);
    const workers = childrenOf(primary);
    assert.equal(workers.length, 2, `two worker processes: ${workers}`);
    for (let i = 0; i < 6; i++) assert.ok(await healthy(url));

    // One worker dies: once the primary has seen it, the other serves every connection, and the
    // primary starts a new worker.
    process.kill(workers[0], 'SIGKILL');
    await until('the primary to see the death', () => s.logs.some((e) => e.event === 'worker-exit'));
    for (let i = 0; i < 6; i++) assert.ok(await healthy(url), 'the surviving worker serves');
    await until('a replacement worker', () => childrenOf(primary).filter((p) => p !== workers[0]).length === 2);
    const exit = s.logs.find((e) => e.event === 'worker-exit');
    assert.equal(exit?.pid, workers[0]);
    assert.equal(exit?.signal, 'SIGKILL');

    const now = childrenOf(primary);
    const code = new Promise((r) => s.child.once('exit', (c) => r(c)));
    s.child.kill('SIGTERM');
    assert.equal(await code, 0);
    await until('every worker to exit', () => now.every((p) => !alive(p)), 15_000);
    assert.equal(await healthy(url), false);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});

test('--workers: the workers exit when their primary is SIGKILLed; a bad count is refused', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = serve(data, ['--workers', '2']);
  try {
    await s.url;
    const workers = childrenOf(s.child.pid!);
    assert.equal(workers.length, 2);
    s.child.kill('SIGKILL');
    await until('orphaned workers to exit', () => workers.every((p) => !alive(p)), 15_000);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
  for (const bad of ['1.5', 'two', '-1']) {
    const b = serve(data, ['--workers', bad]);
    await assert.rejects(b.url, /workers/);
  }
});
