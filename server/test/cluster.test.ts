// `dsync serve --workers N` as a user runs it: a real process tree on a loopback port.
import assert from 'node:assert/strict';
import { get } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { workersOf } from '../../harness/serve-process.ts';
import { startServe } from '../../harness/child.ts';

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

async function serve(data: string, flags: string[]) {
  const logs: Record<string, unknown>[] = [];
  const s = await startServe(['--data', data, ...flags], { onLog: (e) => logs.push(e) });
  let later = '';
  s.child.stdout!.on('data', (d) => (later += d));
  return { ...s, logs, laterBanners: () => later.match(/dsync server on/g)?.length ?? 0 };
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

test('--workers 2: two servers on one port; a dead worker is replaced; SIGTERM stops them all', { timeout: 60_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = await serve(data, ['--workers', '2']);
  try {
    const url = s.url;
    const primary = s.child.pid!;
    assert.match(s.banner, /\(2 workers\)$/, 'the primary announces the server once all workers listen');
    const workers = workersOf(primary);
    assert.equal(workers.length, 2, `two worker processes: ${workers}`);
    for (let i = 0; i < 6; i++) assert.ok(await healthy(url));

    // One worker dies: once the primary has seen it, the other serves every connection, and the
    // primary starts a new worker.
    process.kill(workers[0], 'SIGKILL');
    await until('the primary to see the death', () => s.logs.some((e) => e.event === 'worker-exit'));
    for (let i = 0; i < 6; i++) assert.ok(await healthy(url), 'the surviving worker serves');
    await until('a replacement worker', () => workersOf(primary).filter((p) => p !== workers[0]).length === 2);
    const exit = s.logs.find((e) => e.event === 'worker-exit');
    assert.equal(exit?.pid, workers[0]);
    assert.equal(exit?.signal, 'SIGKILL');

    assert.equal(s.laterBanners(), 0, 'one banner: the workers print none');
    const now = workersOf(primary);
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

test('--workers: the workers exit when their primary is SIGKILLed; a bad count or a worker that cannot start ends the command', { timeout: 60_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = await serve(data, ['--workers', '2']);
  try {
    const workers = workersOf(s.child.pid!);
    assert.equal(workers.length, 2);
    s.child.kill('SIGKILL');
    await until('orphaned workers to exit', () => workers.every((p) => !alive(p)), 15_000);

    for (const bad of ['1.5', 'two', '-1']) {
      await assert.rejects(serve(data, [`--workers=${bad}`]), /--workers must be/);
    }
    // Workers that cannot start end the command with status 1 and their error, not a restart loop.
    await assert.rejects(serve(data, ['--workers', '2', '--users', path.join(data, 'missing.json')]), /exited with 1: .*missing\.json/s);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});
