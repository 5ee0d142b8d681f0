// A folder renamed on one device is one folder move on the server (docs/sync.md, "Renames"):
// the real CLI (`dsync sync`) on two devices against a real server, through a loopback proxy
// that counts the requests (and can run another device's step just before the move reaches
// the server). A folder of 300 files renamed: one move request, the other device ends with the
// new folder byte for byte, each file's history kept, nothing in the trash. And the folder move
// meeting another device's edit under it (the server refuses it whole, the files then move one
// by one and the edit stays), and a half-moved folder on the server (what a crash or a refusal
// midway leaves): both converge and nothing is deleted. The REST folder move's checks are tried
// with hostile bodies.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { type IncomingMessage, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { type TestServer, forwardUpgrades, testServer } from '../../harness/helpers.ts';
import { FOLDER_MOVE_FILES } from '../../shared/src/base/limits.ts';
import { type Action, type RemoteFile, folderMoves } from '../../shared/src/sync/plan.ts';
import { TRASH } from '../../shared/src/sync/remote.ts';
import { dsync, jsonLines } from './run.ts';
import { sha, treeOf } from './sync-world.ts';

/** A proxy in front of `s` that counts requests by "METHOD /path" (and the most of each open
 *  at once, from arrival to the answer's end) and runs `beforeMove` (once set) with the body of
 *  a POST /api/files/move before it forwards it. WebSocket upgrades are piped through as bytes. */
async function countingProxy(s: TestServer) {
  const up = new URL(s.url);
  const counts = new Map<string, number>();
  const open = new Map<string, number>();
  const most = new Map<string, number>();
  const moves: unknown[] = [];
  let beforeMove: ((body: any) => Promise<void>) | null = null;
  const body = (req: IncomingMessage) =>
    new Promise<Buffer>((ok, fail) => {
      const parts: Buffer[] = [];
      req.on('data', (c) => parts.push(c));
      req.on('end', () => ok(Buffer.concat(parts)));
      req.on('error', fail);
    });
  const server = createServer(async (req, res) => {
    const url = new URL(req.url!, 'http://x');
    const key = `${req.method} ${url.pathname}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
    open.set(key, (open.get(key) ?? 0) + 1);
    most.set(key, Math.max(most.get(key) ?? 0, open.get(key)!));
    res.on('close', () => open.set(key, open.get(key)! - 1));
    const bytes = await body(req);
    if (key === 'POST /api/files/move') {
      const parsed = JSON.parse(bytes.toString('utf8'));
      moves.push(parsed);
      const f = beforeMove;
      beforeMove = null;
      await f?.(parsed);
    }
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: { ...req.headers, host: up.host } }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    fwd.on('error', () => res.destroy());
    fwd.end(bytes);
  });
  forwardUpgrades(server, up);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    moves,
    count: (key: string) => counts.get(key) ?? 0,
    mostAtOnce: (key: string) => most.get(key) ?? 0,
    reset: () => (counts.clear(), most.clear(), (moves.length = 0)),
    onMove: (f: (body: any) => Promise<void>) => void (beforeMove = f),
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

interface Dev {
  dir: string;
  sync(...flags: string[]): ReturnType<typeof dsync>;
  write(p: string, body: string): void;
  read(p: string): string;
}

/** Two devices; `a` reaches the server through `via` (its sync state is per server URL). */
function devices(url: string, via = url, viaB = url) {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-folder-move-'));
  const dev = (name: string, url: string): Dev => {
    const dir = path.join(root, name, 'proj');
    mkdirSync(dir, { recursive: true });
    const at = (p: string) => path.join(dir, ...p.split('/'));
    return {
      dir,
      sync: (...flags) => dsync(['sync', dir, '--remote', 'proj', '--device', name, '--json', ...flags], { env: { DSYNC_CACHE_DIR: path.join(root, name, 'cache'), DSYNC_SERVER: url } }),
      write(p, body) {
        mkdirSync(path.dirname(at(p)), { recursive: true });
        writeFileSync(at(p), body);
      },
      read: (p) => readFileSync(at(p), 'utf8'),
    };
  };
  return { a: dev('a', via), b: dev('b', viaB), done: () => rmSync(root, { recursive: true, force: true }) };
}

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return jsonLines(r.stdout);
};

/** The folder of the tests: `n` files in `src/`, in ten subfolders, and one file beside it. */
function seed(d: Dev, n: number) {
  for (let i = 0; i < n; i++) d.write(`src/d${i % 10}/f${i}.txt`, `file ${i}\n`.repeat(1 + (i % 7)));
  d.write('top.txt', 'beside the folder\n');
}

/** What the server holds: every file's latest content under proj/, every content of any
 *  version anywhere, the number of versions of each file, and the files in the trash. */
async function server(s: TestServer) {
  const store = await s.storeOf('local');
  const latest = new Map<string, string>();
  const ever = new Set<string>();
  const versions = new Map<string, number>();
  const trash: string[] = [];
  for (const f of await store.list('')) {
    if (f.name.startsWith(TRASH + '/')) trash.push(f.name);
    const vs = await store.versionNumbers(f.name);
    for (const v of vs) ever.add(sha(await store.bytes(f.name, v)));
    if (f.name.startsWith('proj/')) {
      latest.set(f.name.slice('proj/'.length), sha(await store.bytes(f.name, f.latest)));
      versions.set(f.name.slice('proj/'.length), vs.length);
    }
  }
  return { latest, ever, versions, trash };
}

test('a folder of 300 files renamed on one device: one move request, the other device gets it whole, histories kept, nothing in the trash', { timeout: 600_000 }, async () => {
  const s = await testServer();
  const proxy = await countingProxy(s);
  const { a, b, done } = devices(s.url, proxy.url, proxy.url);
  try {
    seed(a, 300);
    ok(await a.sync());
    // a second version of some files: their history goes along with the rename
    for (let i = 0; i < 300; i += 50) a.write(`src/d${i % 10}/f${i}.txt`, `file ${i}, edited\n`);
    ok(await a.sync());
    ok(await b.sync());
    assert.deepEqual(treeOf(b.dir), treeOf(a.dir));

    const folderOnB = statSync(path.join(b.dir, 'src')).ino;
    renameSync(path.join(a.dir, 'src'), path.join(a.dir, 'lib'));
    proxy.reset();
    const lines = ok(await a.sync());
    // today's engine sent one POST /api/files/move per file (300)
    assert.equal(proxy.count('POST /api/files/move'), 1, JSON.stringify(Object.fromEntries(proxy.counts)));
    assert.deepEqual((proxy.moves[0] as any).from, 'proj/src/');
    assert.equal(lines.filter((l) => l.op === 'moveRemote' && !l.retry && !l.error).length, 300, JSON.stringify(lines.filter((l) => l.op).slice(0, 5)));
    assert.ok(!lines.some((l) => l.op === 'upload' || l.op === 'deleteRemote'), JSON.stringify(lines.filter((l) => l.op && l.op !== 'moveRemote')));

    proxy.reset();
    const lb = ok(await b.sync());
    assert.ok(!lb.some((l) => l.op === 'download'), 'a rename comes down as renames: ' + JSON.stringify(lb.filter((l) => l.op === 'download').slice(0, 3)));
    // b asks the roots of the 300 renamed files' versions to find the renames: a few at once
    // (one after another before: at most one open)
    assert.ok(proxy.count('GET /api/versions') >= 300, JSON.stringify(Object.fromEntries(proxy.counts)));
    assert.ok(proxy.mostAtOnce('GET /api/versions') > 1, `root lookups at once: ${proxy.mostAtOnce('GET /api/versions')}`);
    assert.equal(lb.filter((l) => l.op === 'moveLocal' && !l.retry && !l.error).length, 300);
    // b renamed its folder as one folder (the same folder on disk), not file by file
    assert.equal(statSync(path.join(b.dir, 'lib')).ino, folderOnB, 'b renamed the folder itself');
    assert.ok(!existsSync(path.join(b.dir, 'src')));
    const tree = treeOf(a.dir);
    assert.equal(tree.size, 301);
    assert.ok([...tree.keys()].every((p) => p === 'top.txt' || p.startsWith('lib/')));
    assert.deepEqual(treeOf(b.dir), tree);
    const there = await server(s);
    assert.deepEqual(there.latest, tree);
    assert.deepEqual(there.trash, []);
    for (let i = 0; i < 300; i++) assert.equal(there.versions.get(`lib/d${i % 10}/f${i}.txt`), i % 50 === 0 ? 2 : 1, `the history of f${i}`);
    // a pass after it finds nothing to do on either side
    assert.ok(!ok(await a.sync()).some((l) => l.op));
    assert.ok(!ok(await b.sync()).some((l) => l.op));
  } finally {
    await proxy.close();
    await s.stop();
    done();
  }
});

test("a folder move meeting another device's edit under it is refused whole; the files then move one by one, the edit stays, nothing is deleted", { timeout: 600_000 }, async () => {
  const s = await testServer();
  const proxy = await countingProxy(s);
  const { a, b, done } = devices(s.url, proxy.url);
  try {
    seed(a, 40);
    ok(await a.sync());
    ok(await b.sync());
    renameSync(path.join(a.dir, 'src'), path.join(a.dir, 'lib'));
    // b's edit of a file under src/ lands after a's listing, just before a's folder move
    proxy.onMove(async () => {
      b.write('src/d3/f3.txt', 'edited on b while a renamed the folder\n');
      ok(await b.sync());
    });
    const before = await server(s);
    const la = ok(await a.sync());
    // the folder move was refused, nothing moved by it; the files went one by one, but f3's
    // own check refused its move: b's edit stays at src/d3/f3.txt, a's copy goes up at lib/
    assert.ok((proxy.moves[0] as any).versions, JSON.stringify(proxy.moves[0]));
    assert.ok(!la.some((l) => l.error), JSON.stringify(la.filter((l) => l.error)));
    ok(await b.sync());
    ok(await a.sync());
    const tree = treeOf(a.dir);
    assert.deepEqual(treeOf(b.dir), tree);
    assert.equal(a.read('src/d3/f3.txt'), 'edited on b while a renamed the folder\n');
    assert.equal(a.read('lib/d3/f3.txt'), 'file 3\n'.repeat(4));
    for (let i = 0; i < 40; i++) assert.ok(tree.has(`lib/d${i % 10}/f${i}.txt`), `lib/…/f${i}`);
    const there = await server(s);
    assert.deepEqual(there.latest, tree);
    assert.deepEqual(there.trash, []);
    for (const c of before.ever) assert.ok(there.ever.has(c), 'every content the server held is still there');
  } finally {
    await proxy.close();
    await s.stop();
    done();
  }
});

test('a half-moved folder on the server (a folder move cut off midway) converges: nothing deleted, nothing in the trash', { timeout: 600_000 }, async () => {
  const s = await testServer();
  const { a, b, done } = devices(s.url);
  try {
    seed(a, 60);
    ok(await a.sync());
    ok(await b.sync());
    // a file b's rules ignore (the defaults: *.tmp) under the folder: b's folder does not move
    // whole (it would take that file along), its synced files move one by one
    b.write('src/d1/scratch.tmp', 'only on b\n');
    renameSync(path.join(a.dir, 'src'), path.join(a.dir, 'lib'));
    // what a folder move leaves when it stops after some files (each file's rename is whole):
    // half of them at the new name, the others at the old one
    const store = await s.storeOf('local');
    for (let i = 0; i < 60; i += 2) await store.rename(`proj/src/d${i % 10}/f${i}.txt`, `proj/lib/d${i % 10}/f${i}.txt`);
    const before = await server(s);
    const la = ok(await a.sync());
    assert.ok(!la.some((l) => l.error || l.op === 'upload' || l.op === 'deleteRemote' || l.op === 'deleteLocal'), JSON.stringify(la.filter((l) => l.op)));
    ok(await b.sync());
    const tree = treeOf(a.dir);
    assert.equal(tree.size, 61);
    assert.equal(b.read('src/d1/scratch.tmp'), 'only on b\n');
    assert.deepEqual(new Map([...treeOf(b.dir)].filter(([p]) => p !== 'src/d1/scratch.tmp')), tree);
    const there = await server(s);
    assert.deepEqual(there.latest, tree);
    assert.deepEqual(there.trash, []);
    for (const c of before.ever) assert.ok(there.ever.has(c));
    const still = (lines: Record<string, unknown>[]) => assert.deepEqual(lines.filter((l) => l.op), []);
    // b's folders that hold only its ignored file are folders on the server too (empty there):
    // a makes them, as any empty folder, and then nothing is left to do
    assert.deepEqual(ok(await a.sync()).filter((l) => l.op), [{ op: 'mkdirLocal', path: 'src' }, { op: 'mkdirLocal', path: 'src/d1' }]);
    still(ok(await a.sync()));
    still(ok(await b.sync()));
  } finally {
    await s.stop();
    done();
  }
});

test("a folder deleted on one device: one move of the folder into the server's trash, every file there with its history", { timeout: 600_000 }, async () => {
  const s = await testServer();
  const proxy = await countingProxy(s);
  const { a, b, done } = devices(s.url, proxy.url);
  try {
    seed(a, 40);
    ok(await a.sync());
    a.write('src/d2/f2.txt', 'file 2, edited\n');
    ok(await a.sync());
    ok(await b.sync());
    rmSync(path.join(a.dir, 'src'), { recursive: true });
    proxy.reset();
    const lines = ok(await a.sync('--max-delete', '100%'));
    // today's engine moved each file into the trash on its own (40 moves)
    assert.equal(proxy.count('POST /api/files/move'), 1, JSON.stringify(Object.fromEntries(proxy.counts)));
    const deleted = lines.filter((l) => l.op === 'deleteRemote' && !l.retry && !l.error);
    assert.equal(deleted.length, 40);
    const trash = String(deleted[0].trash).replace(/proj\/src\/.*$/, '');
    assert.match(trash, /^\.dsync-trash\/[^/]+\/$/);
    ok(await b.sync('--max-delete', '100%'));
    assert.deepEqual([...treeOf(b.dir).keys()], ['top.txt']);
    assert.deepEqual(treeOf(b.dir), treeOf(a.dir));
    const there = await server(s);
    assert.equal(there.trash.length, 40);
    assert.ok(there.trash.every((n) => n.startsWith(trash + 'proj/src/')));
    const store = await s.storeOf('local');
    assert.equal((await store.versionNumbers(trash + 'proj/src/d2/f2.txt')).length, 2, 'the history goes into the trash too');
  } finally {
    await proxy.close();
    await s.stop();
    done();
  }
});

test('POST /api/files/move of a folder with versions: a compare-and-swap on the folder, its body checked as hostile input', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const store = await s.storeOf('local');
  const { a, done } = devices(s.url);
  const move = async (body: unknown) => {
    const r = await fetch(`${s.url}/api/files/move`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as any };
  };
  const names = async () => (await store.list('')).map((f) => `${f.name}@${f.latest}`).sort();
  try {
    a.write('x/one.txt', 'one\n');
    a.write('x/sub/two.txt', 'two\n');
    a.write('y/taken.txt', 'taken\n');
    ok(await a.sync());
    const start = await names();
    const good = { 'one.txt': 1, 'sub/two.txt': 1 };
    // refused, nothing moved: another version, a name missing, a name more, the target taken
    for (const [versions, to] of [
      [{ 'one.txt': 2, 'sub/two.txt': 1 }, 'proj/z/'],
      [{ 'one.txt': 1 }, 'proj/z/'],
      [{ ...good, 'three.txt': 1 }, 'proj/z/'],
      [good, 'proj/y/'],
    ] as const) {
      const r = await move({ from: 'proj/x/', to, versions });
      assert.equal(r.status, 409, JSON.stringify(r));
      assert.deepEqual(await names(), start);
    }
    // hostile bodies: 400, nothing moved
    for (const versions of [[], null, 'x', {}, { '../escape.txt': 1 }, { 'one.txt': 0 }, { 'one.txt': '1' }, { 'one.txt': 1.5 }, { 'a\u0000b': 1 }, { 'e\u0301.txt': 1 }, { '/abs': 1 }, Object.fromEntries(Array.from({ length: FOLDER_MOVE_FILES + 1 }, (_, i) => [`f${i}`, 1]))]) {
      const r = await move({ from: 'proj/x/', to: 'proj/z/', versions });
      assert.equal(r.status, 400, `${JSON.stringify(versions).slice(0, 80)}: ${JSON.stringify(r)}`);
      assert.deepEqual(await names(), start);
    }
    assert.equal((await move({ from: 'proj/x/', to: 'proj/x/in/', versions: good })).status, 400, 'a folder into itself');
    assert.equal((await move({ from: 'proj/x/one.txt', to: 'proj/z.txt', versions: good })).status, 400, 'versions is for a folder');
    assert.deepEqual(await names(), start);
    // the check holds: moved, and the answer gives the numbers at the new name
    const r = await move({ from: 'proj/x/', to: 'proj/z/', versions: good });
    assert.equal(r.status, 200, JSON.stringify(r));
    assert.deepEqual(r.body, { moved: 2, versions: good });
    assert.deepEqual(await names(), ['proj/y/taken.txt@1', 'proj/z/one.txt@1', 'proj/z/sub/two.txt@1']);
    // the folder move without versions (the page's) keeps working
    const plain = await move({ from: 'proj/z/', to: 'proj/w/' });
    assert.equal(plain.status, 200, JSON.stringify(plain));
    assert.deepEqual(await names(), ['proj/w/one.txt@1', 'proj/w/sub/two.txt@1', 'proj/y/taken.txt@1']);
  } finally {
    await s.stop();
    done();
  }
});

test('the planner groups the file renames of a whole server folder into one folder move, and nothing else', () => {
  const mv = (from: string, to: string, version = 1): Action => ({ op: 'moveRemote', from, to, version });
  const remote = (...names: string[]) => new Map<string, RemoteFile>(names.map((n) => [n, { version: 1, size: 1 }]));
  const up: Action = { op: 'upload', path: 'new.txt', expect: 'absent' };
  // every file under a/ (subfolders too) to the same place under b/: one folder move
  const whole = [mv('a/x', 'b/x', 3), mv('a/s/y', 'b/s/y'), up];
  assert.deepEqual(folderMoves(whole, remote('a/x', 'a/s/y', 'c.txt')), [{ op: 'moveRemoteFolder', from: 'a', to: 'b', files: new Map([['x', 3], ['s/y', 1]]) }, up]);
  // a file under a/ that does not move: no folder move of a/, but of its subfolder a/s/
  const part = [mv('a/s/x', 'b/s/x'), mv('a/s/y', 'b/s/y')];
  assert.deepEqual(folderMoves(part, remote('a/s/x', 'a/s/y', 'a/stay')), [{ op: 'moveRemoteFolder', from: 'a/s', to: 'b/s', files: new Map([['x', 1], ['y', 1]]) }]);
  // the files moved but not all to one folder, or the new folder exists on the server, or lies
  // under a file there, or inside the old one, or a single file: file moves
  const as = (acts: Action[], r: Map<string, RemoteFile>) => assert.deepEqual(folderMoves(acts, r), acts);
  as([mv('a/x', 'b/x'), mv('a/y', 'c/y')], remote('a/x', 'a/y'));
  as([mv('a/x', 'b/x'), mv('a/y', 'b/y')], remote('a/x', 'a/y', 'b/other'));
  as([mv('a/x', 'b/c/x'), mv('a/y', 'b/c/y')], remote('a/x', 'a/y', 'b'));
  as([mv('a/x', 'a/n/x'), mv('a/y', 'a/n/y')], remote('a/x', 'a/y'));
  as([mv('a/x', 'b/x')], remote('a/x'));
  as([mv('a/x', 'b/y'), mv('a/z', 'b/w')], remote('a/x', 'a/z'));
  // the same here, for a folder moved on the server: every file this pass sees under it
  const ml = (from: string, to: string): Action => ({ op: 'moveLocal', from, to, version: 2 });
  const here = (...names: string[]) => ({ files: new Map(names.map((n) => [n, 1])), dirs: new Set<string>(), fold: (p: string) => p.toLowerCase() });
  assert.deepEqual(folderMoves([ml('a/x', 'b/x'), ml('a/s/y', 'b/s/y')], remote(), here('a/x', 'a/s/y')), [{ op: 'moveLocalFolder', from: 'a', to: 'b', files: new Map([['x', 2], ['s/y', 2]]) }]);
  const stays = [ml('a/x', 'b/x'), ml('a/y', 'b/y')];
  assert.deepEqual(folderMoves(stays, remote(), here('a/x', 'a/y', 'a/z')), stays);
  assert.deepEqual(folderMoves(stays, remote(), here('a/x', 'a/y', 'B/other')), stays, 'b is taken here, as this file system finds names');
  assert.deepEqual(folderMoves(stays, remote(), { ...here('a/x', 'a/y'), dirs: new Set(['b']) }), stays, 'an empty folder b here');
  assert.deepEqual(folderMoves(stays, remote()), stays, 'a device that renames no folders');
  // deletes on the server: every file the listing has under a folder
  const del = (path: string, version = 1): Action => ({ op: 'deleteRemote', path, version });
  assert.deepEqual(folderMoves([del('a/x', 4), del('a/s/y')], remote('a/x', 'a/s/y', 'b')), [{ op: 'deleteRemoteFolder', path: 'a', files: new Map([['x', 4], ['s/y', 1]]) }]);
  const some = [del('a/x'), del('a/y')];
  assert.deepEqual(folderMoves(some, remote('a/x', 'a/y', 'a/z')), some);
});
