// `dsync serve --workers N` as a user runs it: a real process tree on a loopback port.
import assert from 'node:assert/strict';
import { get } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { workersOf } from '../../harness/serve-process.ts';
import { startServe } from '../../harness/child.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { textBytes } from '../../harness/testdata.ts';
import { until } from '../../harness/wait.ts';
import { routeOf } from '../../shared/src/transport/route.ts';
import { routeOfHead } from '../src/cluster.ts';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

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
    // (a silent connection is given up after a generous time: a loaded machine answers late)
    const req = get(`${url}/api/health`, { agent: false, timeout: 60_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
  });

test('--workers 2: two servers on one port; a dead worker is replaced; SIGTERM stops them all', { timeout: 300_000 }, async () => {
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
    await until('every worker to exit', () => now.every((p) => !alive(p)), 60_000);
    assert.equal(await healthy(url), false);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});

test('--workers: the workers exit when their primary is SIGKILLed; a bad count or a worker that cannot start ends the command', { timeout: 300_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = await serve(data, ['--workers', '2']);
  try {
    const workers = workersOf(s.child.pid!);
    assert.equal(workers.length, 2);
    s.child.kill('SIGKILL');
    await until('orphaned workers to exit', () => workers.every((p) => !alive(p)), 60_000);

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

/** Names whose routing hints are even and odd: with 2 workers, each is one worker's. */
const byParity = (parity: number, n: number) => {
  const out: string[] = [];
  for (let i = 0; out.length < n; i++) if (parseInt(routeOf(`docs/file-${i}.txt`), 16) % 2 === parity) out.push(`docs/file-${i}.txt`);
  return out;
};

/** Each push's serving worker, from the log lines (`worker`: its pid), in order. */
const servedBy = (logs: Record<string, unknown>[], name: string, op = 'push') => logs.filter((e) => e.op === op && e.name === name && e.version !== undefined).map((e) => e.worker as number);

/** Writes `parts` to a new connection, `gapMs` apart (then ends its side, with `end`), and
 *  resolves to all it reads until the server closes it (or rejects after `ms`). */
function raw(url: string, parts: (string | Buffer)[], gapMs = 0, ms = 60_000, end = false): Promise<{ text: string; ms: number }> {
  const { hostname, port } = new URL(url);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const c = connect(Number(port), hostname);
    let got = '';
    const timer = setTimeout(() => {
      c.destroy();
      reject(new Error(`no close within ${ms} ms; read: ${JSON.stringify(got.slice(0, 200))}`));
    }, ms);
    c.on('data', (d) => (got += d.toString('latin1')));
    c.on('error', () => {});
    c.on('close', () => {
      clearTimeout(timer);
      resolve({ text: got, ms: performance.now() - t0 });
    });
    c.on('connect', async () => {
      for (const p of parts) {
        if (c.destroyed) return;
        c.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
      if (end) c.end();
    });
  });
}

test('the request line: a /sync upgrade with a hint routes by it; anything else does not; an unfinished line is undefined', () => {
  const line = (s: string) => routeOfHead(Buffer.from(s, 'latin1'));
  assert.equal(line('GET /sync?route=00000007 HTTP/1.1\r\nHost: x\r\n'), 7);
  assert.equal(line('GET /sync?client=dsync&route=ff&deflate=0 HTTP/1.1\r\n'), 255);
  assert.equal(line('GET /sync?route=0000000a HTTP/1.1\n'), 10, 'a bare LF ends the line as well');
  assert.equal(line('GET /sync?route=00000007 HTTP/1.1'), undefined, 'not yet a whole line');
  for (const other of [
    'GET /sync HTTP/1.1\r\n',
    'GET /sync?route= HTTP/1.1\r\n',
    'GET /sync?route=xyz HTTP/1.1\r\n',
    'GET /sync?route=123456789 HTTP/1.1\r\n', // longer than a hint
    'GET /sync?route=-1 HTTP/1.1\r\n',
    'GET /api/files?route=00000007 HTTP/1.1\r\n',
    'GET /syncx?route=00000007 HTTP/1.1\r\n',
    'POST /sync?route=00000007 HTTP/1.1\r\n',
    'GET /sync?route=00000007 HTTP/1.0\r\n',
    'GET  /sync?route=00000007 HTTP/1.1\r\n',
    '\x00\x01\xff garbage\r\n',
    '\r\n',
  ])
    assert.equal(line(other), null, JSON.stringify(other));
});

test('--workers 2: one file\'s pushes and pulls land on one worker, different files on both; REST, the page and bodies that come late pass through the primary', { timeout: 300_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = await serve(data, ['--workers', '2']);
  try {
    const workers = workersOf(s.child.pid!);
    const [even, odd] = [byParity(0, 2), byParity(1, 2)];
    for (let round = 0; round < 4; round++) {
      for (const name of [...even, ...odd]) await pushBytes(s, name, textBytes(round * 100 + name.length, 20_000 + round));
    }
    await pullBytes(s, even[0], null);
    await until('the log lines', () => servedBy(s.logs, odd[1]).length === 4 && servedBy(s.logs, even[0], 'pull').length === 1);
    const home = new Map<string, number>();
    for (const name of [...even, ...odd]) {
      const by = servedBy(s.logs, name);
      assert.equal(by.length, 4);
      assert.equal(new Set(by).size, 1, `every push of ${name} on one worker: ${by}`);
      assert.ok(workers.includes(by[0]), `${by[0]} is one of the workers ${workers}`);
      home.set(name, by[0]);
    }
    assert.equal(home.get(even[0]), home.get(even[1]), 'files with even hints share a worker');
    assert.equal(home.get(odd[0]), home.get(odd[1]), 'files with odd hints share a worker');
    assert.notEqual(home.get(even[0]), home.get(odd[0]), 'even and odd hints: different workers');
    assert.deepEqual(servedBy(s.logs, even[0], 'pull'), [home.get(even[0])], 'a pull goes where its file\'s pushes went');

    // REST and the page, each on a new connection, round-robin
    for (let i = 0; i < 4; i++) {
      const list = await fetch(`${s.url}/api/files?prefix=docs/`, { headers: { connection: 'close' } });
      assert.equal(list.status, 200);
      assert.equal(((await list.json()) as { files: unknown[] }).files.length, 4);
      const page = await fetch(`${s.url}/`, { headers: { connection: 'close' } });
      assert.equal(page.status, 200);
      assert.match(page.headers.get('content-type') ?? '', /text\/html/);
      await page.text();
    }
    // A request whose line, headers and body come in pieces far apart: the primary reads the
    // line only; the worker reads the rest.
    const body = JSON.stringify({ name: 'late/' });
    const host = new URL(s.url).host;
    const late = await raw(s.url, ['POST /api/fold', `ers HTTP/1.1\r\nHost: ${host}\r\n`, `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`, body.slice(0, 5), body.slice(5)], 150);
    assert.match(late.text, /^HTTP\/1\.1 200 /);
    assert.match(late.text, /"folder":"late\/"/);
    // ...and in pieces close together: a byte the primary read after it chose a worker would
    // be lost (the body cut short: 400, or no answer)
    const answers: string[] = [];
    for (let i = 0; i < 60; i++) {
      const b = JSON.stringify({ name: `quick-${i}/` });
      const r = await raw(s.url, [`POST /api/folders HTTP/1.1\r\n`, `Host: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\nConnection: close\r\n\r\n`, b], i % 3).catch((e: Error) => ({ text: e.message }));
      answers.push(r.text.split('\r\n')[0]);
    }
    assert.deepEqual(answers.filter((a) => a !== 'HTTP/1.1 200 OK'), [], 'every request read whole');
    const folders = (await (await fetch(`${s.url}/api/files?prefix=`)).json()) as { folders: string[] };
    assert.ok(folders.folders.includes('late/'), `${folders.folders}`);
    assert.ok(folders.folders.includes('quick-59/'), `${folders.folders}`);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});

test('--workers 2: a garbage, oversized or slow request line is closed; the other connections go on', { timeout: 300_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const HEAD_MS = 1500;
  // what a loaded machine may add to the head deadline (timers fire late, the worker's turn waits)
  const SLACK_MS = 30_000;
  const s = await serve(data, ['--workers', '2', '--head-timeout-ms', String(HEAD_MS)]);
  try {
    // slow: part of a line, then nothing; meanwhile the server serves as before
    const slow = raw(s.url, ['GET /sync?rou'], 0, 2 * SLACK_MS);
    const slowSync = raw(s.url, ['GET /sync?route=00000001 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n'], 0, 2 * SLACK_MS);
    const name = byParity(0, 1)[0];
    for (let i = 0; i < 3; i++) {
      await pushBytes(s, name, textBytes(i, 10_000));
      assert.ok(await healthy(s.url));
    }
    const [a, b] = await Promise.all([slow, slowSync]);
    assert.equal(a.text, '', 'the primary closes a line that does not come, unanswered');
    // a deadline: not (much) before it, and not never
    assert.ok(a.ms >= HEAD_MS - 100 && a.ms < HEAD_MS + SLACK_MS, `closed after ${a.ms} ms`);
    assert.match(b.text, /^(HTTP\/1\.1 408 |$)/, 'and a head that does not end: the worker times it out');
    assert.ok(b.ms >= HEAD_MS - 100 && b.ms < HEAD_MS + SLACK_MS, `closed after ${b.ms} ms`);

    // oversized: no line end within the head limit (16 KiB)
    const big = await raw(s.url, ['GET /sync?route=' + 'a'.repeat(20_000)]);
    assert.match(big.text, /^HTTP\/1\.1 431 /);
    // garbage: no HTTP at all; a worker's parser answers 400
    const junk = await raw(s.url, [Buffer.from([0, 1, 2, 255, 13, 10, 13, 10])]);
    assert.match(junk.text, /^HTTP\/1\.1 400 /);
    // a hint on a request that is not a WebSocket upgrade is routed and refused as one
    const noUpgrade = await raw(s.url, [`GET /sync?route=00000001 HTTP/1.1\r\nHost: ${new URL(s.url).host}\r\nConnection: close\r\n\r\n`]);
    assert.match(noUpgrade.text, /^HTTP\/1\.1 (400|404|426) /);

    // a whole request with the client's end of the connection right behind it, which may come
    // before the socket reaches its worker: answered, or dropped unanswered (Node's HTTP server
    // drops a request whose client ended before its answer), never a worker lost
    for (let i = 0; i < 20; i++) {
      const ended = await raw(s.url, [`GET /api/health HTTP/1.1\r\nHost: ${new URL(s.url).host}\r\n\r\n`], 0, 60_000, true);
      assert.match(ended.text, /^(HTTP\/1\.1 200 [^]*"ok":true[^]*)?$/);
    }

    await pushBytes(s, name, textBytes(9, 10_000));
    assert.deepEqual(new Set(servedBy(s.logs, name)).size, 1, 'the file stays on its worker');
    assert.equal(s.logs.filter((e) => e.event === 'worker-exit').length, 0, 'no worker died of it');
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});

test('--workers 2: a killed worker\'s files go to the live one, and to its replacement once it serves', { timeout: 300_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-cluster-'));
  const s = await serve(data, ['--workers', '2']);
  try {
    const primary = s.child.pid!;
    const [mine, theirs] = [byParity(0, 1)[0], byParity(1, 1)[0]];
    await pushBytes(s, mine, textBytes(1, 10_000));
    await pushBytes(s, theirs, textBytes(2, 10_000));
    await until('the log lines', () => servedBy(s.logs, theirs).length === 1);
    const [victim] = servedBy(s.logs, mine);
    const [survivor] = servedBy(s.logs, theirs);
    assert.notEqual(victim, survivor);
    process.kill(victim, 'SIGKILL');
    await until('the primary to see the death', () => s.logs.some((e) => e.event === 'worker-exit'));
    // the replacement takes a while to start: until it serves, the survivor takes every file
    await pushBytes(s, mine, textBytes(3, 10_000));
    await until('the log line', () => servedBy(s.logs, mine).length === 2);
    assert.equal(servedBy(s.logs, mine)[1], survivor);
    await until('a replacement worker', () => workersOf(primary).filter((p) => p !== victim).length === 2);
    const replacement = workersOf(primary).find((p) => p !== survivor)!;
    // once it serves, the file's pushes are its (the survivor's until then)
    let v = 4;
    await until('the file to move to the replacement', async () => {
      await pushBytes(s, mine, textBytes(v++, 10_000));
      return servedBy(s.logs, mine).at(-1) === replacement;
    });
    await pushBytes(s, mine, textBytes(v++, 10_000));
    await pushBytes(s, theirs, textBytes(v++, 10_000));
    await until('the log lines', () => servedBy(s.logs, theirs).length === 2);
    assert.equal(servedBy(s.logs, mine).at(-1), replacement);
    assert.deepEqual(servedBy(s.logs, theirs), [survivor, survivor]);
  } finally {
    s.child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});
