// An outage of the store is an error, never an empty folder (docs/store.md §11, docs/sync.md):
// the real CLI (`dsync sync`, and `dsync sync --watch`) on a 5-file folder with a subfolder,
// against a real server on a real MinIO or a local directory. MinIO killed (SIGKILL) or frozen
// (SIGSTOP) under a running --watch, a catalog object overwritten with garbage through the S3
// API, a local catalog file replaced by a directory or by garbage: no file is deleted on the
// device or on the server, a pass that cannot list says why, and once the store is back the
// folder is as it was.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { loadConfig } from '../../server/src/config.ts';
import { type RunningServer, startServer } from '../../server/src/server.ts';
import { catalogKey } from '../../server/src/store/catalog.ts';
import { encodeName } from '../../server/src/store/keys.ts';
import { DSYNC, dsync, jsonLines } from './run.ts';

const FILES: Record<string, string> = {
  'a.txt': 'alpha\n',
  'b.txt': 'bravo\n',
  'c.txt': 'charlie\n',
  'sub/d.txt': 'delta\n',
  'sub/e.txt': 'echo\n',
};

/** One device: a folder `proj` holding FILES, a cache directory of its own. */
function device(url: string) {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-outage-'));
  const dir = path.join(root, 'proj');
  const env = { DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_SERVER: url };
  const write = (p: string, body: string) => {
    mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
    writeFileSync(path.join(dir, p), body);
  };
  for (const [p, body] of Object.entries(FILES)) write(p, body);
  return {
    dir,
    env,
    write,
    sync: () => dsync(['sync', dir, '--device', 'dev0'], { env }),
    /** every file of the folder and its bytes */
    tree() {
      const out: Record<string, string> = {};
      const walk = (rel: string) => {
        for (const e of readdirSync(path.join(dir, rel), { withFileTypes: true })) {
          const p = rel ? `${rel}/${e.name}` : e.name;
          if (e.isDirectory()) walk(p);
          else out[p] = readFileSync(path.join(dir, p), 'utf8');
        }
      };
      walk('');
      return out;
    },
    done: () => rmSync(root, { recursive: true, force: true }),
  };
}
type Device = ReturnType<typeof device>;

/** Every file FILES names is on the device with its bytes. */
function allThere(d: Device, extra: Record<string, string> = {}) {
  const t = d.tree();
  for (const [p, body] of Object.entries({ ...FILES, ...extra })) assert.equal(t[p], body, `${p} on the device`);
}

/** The names and latest versions the server lists under proj/ (every catalog read, or throws). */
async function serverFiles(s: RunningServer): Promise<Record<string, number>> {
  const store = await s.storeOf('local');
  return Object.fromEntries((await store.list('proj')).map((f) => [f.name.slice('proj/'.length), f.latest]));
}
const ONE_EACH = Object.fromEntries(Object.keys(FILES).map((p) => [p, 1]));

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = jsonLines(r.stdout);
  assert.equal(lines.at(-1).pass.agreed, true, r.stdout);
  return lines;
};

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 120_000) {
  const t0 = Date.now();
  while (!(await cond())) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `dsync sync DIR --watch` as a child: its JSON lines and its stderr as they come. */
function watching(d: Device) {
  const child = spawn(process.execPath, [DSYNC, 'sync', d.dir, '--watch', '--device', 'dev0'], { env: { ...process.env, ...d.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: any[] = [];
  let buf = '';
  child.stdout.on('data', (x) => {
    buf += x;
    for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) lines.push(JSON.parse(buf.slice(0, i)));
  });
  let err = '';
  child.stderr.on('data', (x) => (err += x));
  return { child, lines, stderr: () => err };
}

const stopChild = async (c: ChildProcess) => {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((r) => c.once('exit', r));
  c.kill('SIGINT');
  await exited;
};

/** MinIO again on the same data directory, port and credentials, after it was killed. */
async function restartMinio(m: S3Server): Promise<S3Server> {
  const [bin, ...args] = m.process.spawnargs;
  const dir = path.dirname(args[1]);
  const child = spawn(bin, args, {
    stdio: 'ignore',
    env: { PATH: process.env.PATH, HOME: dir, MINIO_ROOT_USER: m.env.AWS_ACCESS_KEY_ID, MINIO_ROOT_PASSWORD: m.env.AWS_SECRET_ACCESS_KEY, MINIO_BROWSER: 'off', MINIO_UPDATE: 'off' },
  });
  await until('MinIO live again', () => fetch(`${m.endpoint}/minio/health/live`).then((r) => r.ok, () => false), 60_000);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    ...m,
    process: child,
    async stop() {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const STORE_TIMEOUT_MS = 3_000;

async function minioServer(minio: S3Server, bucket: string) {
  // the server reads the store's credentials from its environment, as `dsync serve` does
  Object.assign(process.env, minio.env);
  return startServer(loadConfig({ port: '0', host: '127.0.0.1', store: `s3://${bucket}/store`, 's3-endpoint': minio.endpoint, 'store-timeout-ms': String(STORE_TIMEOUT_MS) }, {}));
}

test('MinIO killed, then frozen, under `dsync sync --watch`: nothing is deleted, the passes report the error, and the folder is as before once MinIO is back', { timeout: 600_000 }, async () => {
  let minio = await startMinio();
  const s = await minioServer(minio, 'outage');
  const d = device(s.url);
  const w = watching(d);
  const failures = () => (w.stderr().match(/dsync sync: .*trying again/g) ?? []).length;
  try {
    await until('the first pass agreed and watching', () => w.lines.some((l) => l.watching) && w.lines.some((l) => l.pass?.agreed));
    assert.deepEqual(await serverFiles(s), ONE_EACH);

    // killed: every read of the store fails; a local save starts a pass, which cannot list
    minio.process.kill('SIGKILL');
    await new Promise((r) => minio.process.once('exit', r));
    const before = failures();
    d.write('while-killed.txt', 'saved while the store was dead\n');
    await until('a pass failing while MinIO is dead', () => failures() >= before + 2);
    assert.match(w.stderr(), /the store failed/);
    allThere(d, { 'while-killed.txt': 'saved while the store was dead\n' });

    minio = await restartMinio(minio);
    await until('the save made while MinIO was dead, on the server', async () => (await serverFiles(s).catch(() => ({}) as Record<string, number>))['while-killed.txt'] === 1);
    assert.deepEqual(await serverFiles(s), { ...ONE_EACH, 'while-killed.txt': 1 });
    allThere(d, { 'while-killed.txt': 'saved while the store was dead\n' });

    // frozen: every read hangs until the store timeout; a pass fails after it
    const before2 = failures();
    minio.process.kill('SIGSTOP');
    try {
      d.write('while-frozen.txt', 'saved while the store was frozen\n');
      await until('a pass failing while MinIO is frozen', () => failures() >= before2 + 2);
      assert.match(w.stderr(), /the store failed: the store did not answer within/);
      allThere(d, { 'while-killed.txt': 'saved while the store was dead\n', 'while-frozen.txt': 'saved while the store was frozen\n' });
    } finally {
      minio.process.kill('SIGCONT');
    }
    await until('the save made while MinIO was frozen, on the server', async () => (await serverFiles(s).catch(() => ({}) as Record<string, number>))['while-frozen.txt'] === 1);
    assert.deepEqual(await serverFiles(s), { ...ONE_EACH, 'while-killed.txt': 1, 'while-frozen.txt': 1 });
    allThere(d, { 'while-killed.txt': 'saved while the store was dead\n', 'while-frozen.txt': 'saved while the store was frozen\n' });
    // nothing went to the trash on either side
    assert.ok(!(await (await s.storeOf('local')).list('')).some((f) => f.name.startsWith('.dsync-trash/')));
    await stopChild(w.child);
  } finally {
    w.child.kill('SIGKILL');
    await s.close();
    await minio.stop();
    d.done();
  }
});

test('MinIO: a folder catalog overwritten with garbage through the S3 API is rebuilt, and nothing is deleted', { timeout: 300_000 }, async () => {
  const minio = await startMinio();
  const s = await minioServer(minio, 'damaged');
  const d = device(s.url);
  try {
    ok(await d.sync());
    assert.deepEqual(await serverFiles(s), ONE_EACH);
    // the catalogs of proj/ (which links sub/) and of proj/sub/ become garbage
    for (const folder of ['proj', 'proj/sub']) {
      const key = catalogKey('local', folder);
      const got = (await s.repo.backend.getHead(key))!;
      assert.ok(await s.repo.backend.putHead(key, Buffer.from('\u0000garbage, not a catalog'), got.tag));
    }
    d.write('after.txt', 'made after the damage\n');
    const lines = ok(await d.sync());
    assert.deepEqual(lines.filter((l) => l.op).map((l) => [l.op, l.path]), [['upload', 'after.txt']]);
    allThere(d, { 'after.txt': 'made after the damage\n' });
    assert.deepEqual(await serverFiles(s), { ...ONE_EACH, 'after.txt': 1 });
  } finally {
    await s.close();
    await minio.stop();
    d.done();
  }
});

test('MinIO: the reads of one folder catalog fail (the store answers 500): the pass fails and deletes nothing; once they read, all is as before', { timeout: 300_000 }, async () => {
  const minio = await startMinio();
  // a loopback proxy in front of MinIO that answers 500 to every read of proj/sub's catalog
  // while `failing` is set, and passes everything else on as it is
  let failing = false;
  const target = new URL(minio.endpoint);
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (failing && req.method === 'GET' && decodeURIComponent(req.url!).includes(`folders/${encodeName('proj/sub')}`)) {
        res.writeHead(500, { 'Content-Type': 'application/xml' });
        return void res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>');
      }
      // the Host header is passed on as it is: the request's signature covers it
      const up = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode!, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      up.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const s = await minioServer({ ...minio, endpoint: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` }, 'unreadable');
  const d = device(s.url);
  try {
    ok(await d.sync());
    failing = true;
    // a file made in sub/: its upload swaps sub/'s catalog, which the server, having read it
    // unchanged before, must now read again (a catalog unchanged since is not read): the run
    // after the upload (or its own second pass) cannot list the folder, fails, and does
    // nothing but that upload
    d.write('sub/during.txt', 'made while a catalog could not be read\n');
    let r = await d.sync();
    assert.ok(!jsonLines(r.stdout).some((l) => l.op && l.op !== 'upload'), r.stdout);
    if (r.code === 0) r = await d.sync();
    assert.notEqual(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stderr, /the store failed/);
    assert.ok(!jsonLines(r.stdout).some((l) => l.op && l.op !== 'upload'), r.stdout);
    allThere(d, { 'sub/during.txt': 'made while a catalog could not be read\n' });
    failing = false;
    ok(await d.sync());
    allThere(d, { 'sub/during.txt': 'made while a catalog could not be read\n' });
    assert.deepEqual(await serverFiles(s), { ...ONE_EACH, 'sub/during.txt': 1 });
  } finally {
    await s.close();
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
    await minio.stop();
    d.done();
  }
});

/** The file of the current generation of the catalog of `folder` in the local store under
 *  `data` (store/local.ts: a head is a directory `<key>@h` of numbered generations). */
function catalogFile(data: string, folder: string): string {
  const want = path.join('folders', encodeName(folder) + '@h');
  const find = (dir: string): string | null => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      const p = path.join(dir, e.name);
      if (p.endsWith(want)) return p;
      const got = find(p);
      if (got) return got;
    }
    return null;
  };
  const dir = find(data);
  assert.ok(dir, `no catalog of ${folder} under ${data}`);
  const [gen] = readdirSync(dir).filter((f) => /^[1-9][0-9]*$/.test(f)).map(Number).sort((a, b) => b - a);
  return path.join(dir, String(gen));
}

test('a local store with an unreadable catalog file: the pass fails and deletes nothing; with a damaged one it is rebuilt', { timeout: 300_000 }, async () => {
  const s: TestServer = await testServer();
  const d = device(s.url);
  try {
    ok(await d.sync());
    // unreadable (the tests run as root, so not by chmod): a directory where the file was
    const file = catalogFile(s.data, 'proj/sub');
    rmSync(file);
    mkdirSync(file);
    const r = await d.sync();
    assert.notEqual(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stderr, /the store failed: .*EISDIR/);
    allThere(d);
    assert.ok(existsSync(path.join(d.dir, 'sub')));
    // the heads are untouched: every file is there once the catalog reads again
    rmSync(file, { recursive: true });
    writeFileSync(file, 'garbage');
    ok(await d.sync());
    allThere(d);
    assert.deepEqual(await serverFiles(s), ONE_EACH);
  } finally {
    await s.stop();
    d.done();
  }
});

test('a listing page without the "complete" mark (an older server in an outage: an empty 200) is refused, and nothing is deleted', { timeout: 300_000 }, async () => {
  const s: TestServer = await testServer();
  // a loopback proxy in front of the real server that answers the listing as a server of an
  // earlier version did when a catalog read failed: 200, no files, no mark
  const proxy = createServer(async (req, res) => {
    if (req.url!.startsWith('/api/files?')) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      return void res.end(JSON.stringify({ files: [], folders: [], next: null }));
    }
    const up = await fetch(s.url + req.url, { method: req.method, headers: req.headers as Record<string, string> });
    res.writeHead(up.status, Object.fromEntries(up.headers));
    res.end(Buffer.from(await up.arrayBuffer()));
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const via = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  const d = device(s.url);
  try {
    ok(await d.sync());
    const r = await dsync(['sync', d.dir, '--device', 'dev0'], { env: { ...d.env, DSYNC_SERVER: via } });
    assert.notEqual(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stderr, /the server's listing is not whole/);
    assert.ok(!jsonLines(r.stdout).some((l) => l.op), r.stdout);
    allThere(d);
    assert.deepEqual(await serverFiles(s), ONE_EACH);
  } finally {
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
    await s.stop();
    d.done();
  }
});
