// `dsync sync` as a user runs it: two "devices" (each a folder and a cache directory of its
// own) and the real CLI against a real server, one test per rule of docs/sync.md.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { startServe } from '../../harness/child.ts';
import { testServer } from '../../harness/helpers.ts';
import { DSYNC, dsync, dsyncOnTerminal, jsonLines } from './run.ts';
import { serverOf, treeOf } from './sync-world.ts';
import { EMPTY_LOCK_MS } from '../sync-lock.ts';
import { syncStateDir } from '../sync-state.ts';

interface Dev {
  dir: string;
  env: NodeJS.ProcessEnv;
  sync(...flags: string[]): ReturnType<typeof dsync>;
  write(p: string, body: string | Buffer): void;
  read(p: string): string;
}

function devices(url: string, n = 2) {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-cli-'));
  const devs: Dev[] = [];
  for (let i = 0; i < n; i++) {
    const dir = path.join(root, `dev${i}`, 'proj');
    mkdirSync(dir, { recursive: true });
    const env = { DSYNC_CACHE_DIR: path.join(root, `dev${i}`, 'cache'), DSYNC_SERVER: url };
    devs.push({
      dir,
      env,
      sync: (...flags) => dsync(['sync', dir, '--device', `dev${i}`, ...flags], { env }),
      write(p, body) {
        mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
        writeFileSync(path.join(dir, p), body);
      },
      read: (p) => readFileSync(path.join(dir, p), 'utf8'),
    });
  }
  return { devs, root, done: () => rmSync(root, { recursive: true, force: true }) };
}

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return jsonLines(r.stdout);
};

test('two devices: files go both ways, a concurrent edit makes a conflict copy on both with both contents', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    a.write('report.txt', 'first\n');
    a.write('docs/notes.md', 'notes\n');
    // an empty folder is made on the server, and on the other device
    mkdirSync(path.join(a.dir, 'empty'));
    const up = ok(await a.sync());
    assert.deepEqual(up.filter((x) => x.op).map((x) => [x.op, x.path]).sort(), [['mkdirRemote', 'empty'], ['upload', 'docs/notes.md'], ['upload', 'report.txt']]);
    assert.deepEqual(up.at(-1).pass.agreed, true);
    ok(await b.sync());
    assert.equal(b.read('report.txt'), 'first\n');
    assert.equal(b.read('docs/notes.md'), 'notes\n');
    assert.deepEqual(readdirSync(path.join(b.dir, 'empty')), []);

    // both edit report.txt; a syncs first
    a.write('report.txt', 'first\nfrom a\n');
    b.write('report.txt', 'first\nfrom b\n');
    ok(await a.sync());
    const c = ok(await b.sync());
    const conflict = c.find((x) => x.op === 'conflict');
    assert.match(conflict.conflictCopy, /^report \(conflict from dev1 \d{4}-\d\d-\d\d \d{4}\)\.txt$/);
    ok(await a.sync());
    for (const d of [a, b]) {
      assert.equal(d.read('report.txt'), 'first\nfrom a\n', 'the server\'s version keeps the name');
      assert.equal(d.read(conflict.conflictCopy), 'first\nfrom b\n', 'the other device\'s bytes are the copy');
    }
    const { latest } = await serverOf(s);
    assert.deepEqual(treeOf(a.dir), latest);
    assert.deepEqual(treeOf(b.dir), latest);
    // a second run has nothing to do; on a terminal it says so
    const again = await dsyncOnTerminal(['sync', a.dir, '--device', 'dev0'], { env: a.env });
    assert.equal(again.code, 0, again.out);
    assert.match(again.out, /proj ⇄ http:\/\/127\.0\.0\.1:\d+\/proj: nothing to do; in sync/);
  } finally {
    done();
    await s.stop();
  }
});

test('modify beats delete, in either order, and a synced delete stays recoverable from the trash', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    a.write('x.txt', 'x1');
    a.write('y.txt', 'y1');
    ok(await a.sync());
    ok(await b.sync());
    // x: deleted on a (synced first), edited on b
    rmSync(path.join(a.dir, 'x.txt'));
    b.write('x.txt', 'x2 from b');
    // y: edited on b (synced first), deleted on a
    rmSync(path.join(a.dir, 'y.txt'));
    const first = ok(await a.sync());
    assert.deepEqual(first.filter((x) => x.op).map((x) => [x.op, x.path]).sort(), [['deleteRemote', 'x.txt'], ['deleteRemote', 'y.txt']]);
    const trashed = first.find((x) => x.path === 'x.txt').trash;
    assert.match(trashed, /^\.dsync-trash\/\d{4}-\d\d-\d\d \d{6}\/proj\/x\.txt$/);
    const second = ok(await b.sync());
    assert.ok(second.some((x) => x.op === 'upload' && x.path === 'x.txt'), 'the edit goes up again');
    assert.ok(second.some((x) => x.op === 'deleteLocal' && x.path === 'y.txt'), 'the unchanged file follows the delete');
    ok(await a.sync());
    assert.equal(a.read('x.txt'), 'x2 from b');
    assert.ok(!existsSync(path.join(b.dir, 'y.txt')));

    // edited on a, deleted on b, a first: the edit wins and comes back to b
    a.write('x.txt', 'x3 from a');
    rmSync(path.join(b.dir, 'x.txt'));
    ok(await a.sync());
    const back = ok(await b.sync());
    assert.ok(back.some((x) => x.op === 'download' && x.path === 'x.txt'));
    assert.equal(b.read('x.txt'), 'x3 from a');

    // the trash keeps the deleted file with its history; dsync mv brings it back
    const env = a.env;
    assert.equal((await dsync(['mv', trashed, 'proj/old-x.txt'], { env })).code, 0);
    const log = jsonLines((await dsync(['log', 'proj/old-x.txt'], { env })).stdout);
    assert.equal(log.length, 1);
    ok(await b.sync());
    assert.equal(b.read('old-x.txt'), 'x1');
  } finally {
    done();
    await s.stop();
  }
});

test('renames are moves on the other side (history kept), also case-only ones; a rename meeting an edit loses nothing', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    a.write('a.txt', 'v1');
    ok(await a.sync());
    a.write('a.txt', 'v2 of a');
    ok(await a.sync());
    ok(await b.sync());
    // a rename on a: a server-side move, the two versions go along; b renames too
    mkdirSync(path.join(a.dir, 'sub'));
    renameSync(path.join(a.dir, 'a.txt'), path.join(a.dir, 'sub', 'b.txt'));
    const mv = ok(await a.sync());
    assert.deepEqual(mv.filter((x) => x.op).map((x) => [x.op, x.from, x.to]), [['moveRemote', 'a.txt', 'sub/b.txt']]);
    assert.equal(jsonLines((await dsync(['log', 'proj/sub/b.txt'], { env: a.env })).stdout).length, 2, 'history moved along');
    const here = ok(await b.sync());
    assert.deepEqual(here.filter((x) => x.op).map((x) => [x.op, x.from, x.to]), [['moveLocal', 'a.txt', 'sub/b.txt']]);
    assert.equal(b.read('sub/b.txt'), 'v2 of a');
    assert.ok(!existsSync(path.join(b.dir, 'a.txt')));

    // case only, on b this time
    renameSync(path.join(b.dir, 'sub', 'b.txt'), path.join(b.dir, 'sub', 'B.txt'));
    assert.deepEqual(ok(await b.sync()).filter((x) => x.op).map((x) => [x.op, x.to]), [['moveRemote', 'sub/B.txt']]);
    ok(await a.sync());
    assert.deepEqual([...treeOf(a.dir).keys()], ['sub/B.txt']);

    // renamed on a while edited on b: both names end on both, nothing lost
    renameSync(path.join(a.dir, 'sub', 'B.txt'), path.join(a.dir, 'c.txt'));
    b.write('sub/B.txt', 'edited on b');
    ok(await a.sync());
    ok(await b.sync());
    ok(await a.sync());
    for (const d of [a, b]) {
      assert.equal(d.read('c.txt'), 'v2 of a');
      assert.equal(d.read('sub/B.txt'), 'edited on b');
    }
  } finally {
    done();
    await s.stop();
  }
});

test('the delete guard stops a pass that would delete too much, and deletes nothing', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    for (let i = 0; i < 30; i++) a.write(`f${i}.txt`, `file ${i}`);
    ok(await a.sync());
    ok(await b.sync());
    for (let i = 0; i < 20; i++) rmSync(path.join(a.dir, `f${i}.txt`));
    const stopped = await a.sync();
    assert.equal(stopped.code, 1);
    assert.match(stopped.stderr, /would delete 20 of 30 files, more than --max-delete allows \(15\); nothing was changed/);
    assert.equal((await serverOf(s)).latest.size, 30, 'nothing deleted on the server');
    // a count allows it
    const allowed = ok(await a.sync('--max-delete', '20'));
    assert.equal(allowed.filter((x) => x.op === 'deleteRemote').length, 20);
    // b follows: 20 of 30 again, so b needs it too
    assert.equal((await b.sync()).code, 1);
    ok(await b.sync('--max-delete', '70%'));
    assert.equal(readdirSync(b.dir).length, 10);
    assert.equal((await dsync(['sync', a.dir, '--max-delete', 'lots'], { env: a.env })).code, 2);
  } finally {
    done();
    await s.stop();
  }
});

test(".dsyncignore (this device's own, never synced) and the default ignores; symbolic links and special files are skipped with a note", async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    a.write('.dsyncignore', '*.log\nbuild/\n!keep.log\n');
    a.write('app.log', 'noise');
    a.write('keep.log', 'kept');
    a.write('build/out.bin', 'built');
    a.write('~$report.docx', 'office lock');
    a.write('.DS_Store', 'mac');
    a.write('draft.tmp', 'temp');
    a.write('.#emacs-lock', 'lock');
    a.write('real.txt', 'real');
    a.write('sub/.notes.txt.swp', 'vim');
    // a link to a file, and a FIFO (a special file)
    assert.equal(spawnSync('ln', ['-s', 'real.txt', path.join(a.dir, 'link.txt')]).status, 0);
    assert.equal(spawnSync('mkfifo', [path.join(a.dir, 'pipe')]).status, 0);
    // links and special files are held: nothing at their paths is deleted or downloaded; with
    // nothing at their paths on the server they are only noted (exit 0)
    const noted = await a.sync();
    assert.equal(noted.code, 0, noted.stdout + noted.stderr);
    const r = jsonLines(noted.stdout);
    // sub holds only an ignored file: the folder itself is synced (empty on the server), as
    // Syncthing syncs a folder whose files it ignores; build/ is ignored whole
    assert.deepEqual(r.filter((x) => x.op).map((x) => x.path).sort(), ['keep.log', 'real.txt', 'sub']);
    // app.log and build/ are what the folder's own rules hide (the defaults are not counted)
    assert.equal(r.at(-1).pass.hidden, 2);
    assert.deepEqual(r.filter((x) => x.skipped).map((x) => [x.skipped, x.reason]), [['link.txt/', 'a symbolic link: not followed'], ['link.txt', 'a symbolic link: not followed'], ['pipe', 'not a regular file']]);
    ok(await b.sync());
    assert.deepEqual([...treeOf(b.dir).keys()].sort(), ['keep.log', 'real.txt']);
    assert.deepEqual(readdirSync(path.join(b.dir, 'sub')), []);
    // an ignored file on b (by b's own rules) is not deleted by the server lacking it, nor uploaded
    b.write('.dsyncignore', '*.log\n!keep.log\n');
    b.write('local.log', 'mine');
    ok(await b.sync());
    assert.ok(existsSync(path.join(b.dir, 'local.log')));
    assert.ok(!(await serverOf(s)).latest.has('local.log'));
    // a file at the link's path on the server: held on a (exit 1, the sides do not agree), the
    // link left as it is and the server's file kept
    b.write('link.txt', 'a real file on b');
    ok(await b.sync());
    const held = await a.sync();
    assert.equal(held.code, 1, held.stdout + held.stderr);
    assert.equal(jsonLines(held.stdout).at(-1).pass.agreed, false);
    assert.ok(lstatSync(path.join(a.dir, 'link.txt')).isSymbolicLink());
    assert.equal(readFileSync(path.join(a.dir, 'real.txt'), 'utf8'), readFileSync(path.join(a.dir, 'link.txt'), 'utf8'));
    assert.ok((await serverOf(s)).latest.has('link.txt'));
  } finally {
    done();
    await s.stop();
  }
});

test('a file that cannot be read is reported and skipped; the run goes on and the server copy stays', async () => {
  const s = await testServer();
  const { devs: [a, b], root, done } = devices(s.url);
  // root reads every file: the device runs as nobody, in folders it may write
  const asUser = process.getuid?.() === 0;
  const syncA = () =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const argv = [process.execPath, DSYNC, 'sync', a.dir, '--device', 'dev0'];
      const child = spawn(asUser ? 'setpriv' : argv[0], asUser ? ['--reuid=65534', '--regid=65534', '--clear-groups', ...argv] : argv.slice(1), { env: { ...process.env, ...a.env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (x) => (stdout += x));
      child.stderr.on('data', (x) => (stderr += x));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
  const open = (d: string) => {
    chmodSync(d, 0o777);
    for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) open(path.join(d, e.name));
  };
  try {
    a.write('secret.txt', 's1');
    a.write('sub/hidden/deep.txt', 'd1');
    a.write('open.txt', 'o1');
    mkdirSync(a.env.DSYNC_CACHE_DIR!, { recursive: true });
    if (asUser) open(root);
    ok(await syncA());
    a.write('secret.txt', 's2');
    chmodSync(path.join(a.dir, 'secret.txt'), 0);
    chmodSync(path.join(a.dir, 'sub', 'hidden'), 0);
    a.write('open.txt', 'o2');
    const r = await syncA();
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const lines = jsonLines(r.stdout);
    assert.match(lines.find((x) => x.skipped === 'secret.txt')?.reason, /^cannot read: EACCES/);
    assert.match(lines.find((x) => x.skipped === 'sub/hidden/')?.reason, /^cannot read the folder: EACCES/);
    assert.ok(!lines.some((x) => x.op === 'deleteRemote'), 'what cannot be read is not deleted on the server');
    ok(await b.sync());
    assert.equal(b.read('open.txt'), 'o2');
    assert.equal(b.read('secret.txt'), 's1');
    assert.equal(b.read('sub/hidden/deep.txt'), 'd1');
  } finally {
    chmodSync(path.join(a.dir, 'sub', 'hidden'), 0o755);
    done();
    await s.stop();
  }
});

/** `dsync sync DIR --watch` as a child; its JSON lines as they come. */
function watching(d: Dev, name: string) {
  const child = spawn(process.execPath, [DSYNC, 'sync', d.dir, '--watch', '--device', name], { env: { ...process.env, ...d.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: any[] = [];
  let buf = '';
  child.stdout.on('data', (x) => {
    buf += x;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(buf.slice(0, i)));
      buf = buf.slice(i + 1);
    }
  });
  let err = '';
  child.stderr.on('data', (x) => (err += x));
  return { child, lines, stderr: () => err };
}

async function until(what: string, cond: () => boolean, ms = 60_000) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const stopChild = async (c: ChildProcess) => {
  if (c.exitCode !== null) return c.exitCode;
  const exited = new Promise<number | null>((r) => c.once('exit', (code) => r(code)));
  c.kill('SIGINT');
  return exited;
};

test('--watch: a local save goes up and a change on the server comes down, across a server restart', { timeout: 300_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-sync-watch-'));
  let server = await startServe(['--data', path.join(data, 'store')]);
  const port = new URL(server.url).port;
  const { devs: [a, b], done } = devices(server.url);
  const wa = watching(a, 'dev0');
  const wb = watching(b, 'dev1');
  const has = (d: Dev, p: string, body: string) => () => existsSync(path.join(d.dir, p)) && readFileSync(path.join(d.dir, p), 'utf8') === body;
  try {
    await until('both watching', () => wa.lines.some((l) => l.watching) && wb.lines.some((l) => l.watching));
    a.write('note.txt', 'saved on a');
    await until('a\'s save on b', has(b, 'note.txt', 'saved on a'));
    // an edit of the file b just downloaded, of the same size: b's watcher takes it for a
    // change, not for the download it made itself (cli/sync-watch.ts ownWrite)
    b.write('note.txt', 'saved on b');
    await until('b\'s same-size edit on a', has(a, 'note.txt', 'saved on b'));
    b.write('note.txt', 'edited on b');
    await until('b\'s edit on a', has(a, 'note.txt', 'edited on b'));

    // the server goes away and comes back on its port: both carry on
    await server.kill();
    a.write('while-down.txt', 'made while the server was away');
    await new Promise((r) => setTimeout(r, 1500));
    server = await startServe(['--data', path.join(data, 'store'), '--port', port]);
    await until('the change made while down, on b', has(b, 'while-down.txt', 'made while the server was away'));
    b.write('after.txt', 'after the restart');
    await until('b\'s file on a', has(a, 'after.txt', 'after the restart'));
    assert.equal(await stopChild(wa.child), 0, wa.stderr());
    assert.equal(await stopChild(wb.child), 0, wb.stderr());
  } finally {
    wa.child.kill('SIGKILL');
    wb.child.kill('SIGKILL');
    await server.kill();
    done();
    rmSync(data, { recursive: true, force: true });
  }
});

test('--watch: a pass woken by a save looks only at its folder, and one woken by the server only at the folders that changed there; a new folder gets a whole pass', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  for (let i = 0; i < 10; i++) for (let j = 0; j < 10; j++) a.write(`d${i}/f${j}.txt`, `file ${i} ${j}\n`);
  ok(await a.sync());
  ok(await b.sync());
  const wa = watching(a, 'dev0');
  const wb = watching(b, 'dev1');
  const has = (d: Dev, p: string, body: string | null) => () => (body === null ? !existsSync(path.join(d.dir, p)) : existsSync(path.join(d.dir, p)) && readFileSync(path.join(d.dir, p), 'utf8') === body);
  /** the report of the pass that did `op` on `p` (its action line comes first) */
  const passOf = async (w: ReturnType<typeof watching>, op: string, p: string) => {
    await until(`${op} ${p}`, () => {
      const k = w.lines.findIndex((l) => l.op === op && l.path === p);
      return k >= 0 && w.lines.slice(k).some((l) => l.pass);
    });
    const k = w.lines.findIndex((l) => l.op === op && l.path === p);
    return w.lines.slice(k).find((l) => l.pass).pass;
  };
  try {
    await until('both watching', () => wa.lines.some((l) => l.watching) && wb.lines.some((l) => l.watching));
    // a first save, whichever pass takes it (the first one looks at the whole folder)
    a.write('d1/f1.txt', 'first save');
    await until('the first save on b', has(b, 'd1/f1.txt', 'first save'));
    // a save: a's pass looks at its folder's 10 files, b's at the 10 of the folder that changed
    // on the server; one pass each (a transfer that landed needs no pass after it). A save
    // whose pass was woken by more (the rescan every 30 s, the event stream's connection: a
    // whole pass) is made again.
    let up, down;
    for (let k = 0; k < 4; k++) {
      a.write('d3/f7.txt', `saved ${k}`);
      await until('the save on b', has(b, 'd3/f7.txt', `saved ${k}`));
      up = await passOf(wa, 'upload', 'd3/f7.txt');
      down = await passOf(wb, 'download', 'd3/f7.txt');
      wa.lines.length = wb.lines.length = 0;
      if (up.woken.join() === 'local' && down.woken.join() === 'server') break;
    }
    assert.deepEqual(up.woken, ['local']);
    assert.equal(up.looked, 10, JSON.stringify(up));
    assert.equal(up.passes, 1);
    assert.deepEqual(down.woken, ['server']);
    assert.equal(down.looked, 10, JSON.stringify(down));
    // a delete: its folder's 9 files in each pass (a delete is checked by a second pass), and
    // the file goes on the other device
    rmSync(path.join(a.dir, 'd5/f0.txt'));
    await until('the delete on b', has(b, 'd5/f0.txt', null));
    const del = await passOf(wa, 'deleteRemote', 'd5/f0.txt');
    assert.ok(del.looked <= 9 * del.passes || del.woken.join() !== 'local', JSON.stringify(del));
    // a new folder: a whole pass (the watcher names the folder, not what it holds)
    mkdirSync(path.join(a.dir, 'new/deep'), { recursive: true });
    writeFileSync(path.join(a.dir, 'new/deep/x.txt'), 'in a new folder');
    await until('the new folder on b', has(b, 'new/deep/x.txt', 'in a new folder'));
    // and nothing else changed: both sides hold the same files
    const { latest } = await serverOf(s);
    const same = (m: Map<string, string>) => JSON.stringify([...m].sort()) === JSON.stringify([...latest].sort());
    await until('both the same', () => same(treeOf(a.dir)) && same(treeOf(b.dir)));
    assert.equal(latest.size, 100);
    assert.equal(await stopChild(wa.child), 0, wa.stderr());
    assert.equal(await stopChild(wb.child), 0, wb.stderr());
  } finally {
    wa.child.kill('SIGKILL');
    wb.child.kill('SIGKILL');
    await s.stop();
    done();
  }
});

test('one sync per folder: a second one is refused while the first runs, and a killed one does not hold the folder', { timeout: 120_000 }, async () => {
  const s = await testServer();
  const { devs: [a], done } = devices(s.url, 1);
  const w = watching(a, 'dev0');
  try {
    await until('watching', () => w.lines.some((l) => l.watching));
    a.write('x.txt', 'x');
    const refused = await a.sync();
    assert.equal(refused.code, 1, refused.stdout + refused.stderr);
    assert.match(refused.stderr, new RegExp(`another dsync sync \\(pid ${w.child.pid}\\) is syncing`));
    // the same folder named through a symbolic link is the same folder
    const link = path.join(path.dirname(a.dir), 'link');
    symlinkSync(a.dir, link);
    const viaLink = await dsync(['sync', link, '--remote', 'proj', '--device', 'dev0'], { env: a.env });
    assert.equal(viaLink.code, 1, viaLink.stdout + viaLink.stderr);
    assert.match(viaLink.stderr, /another dsync sync/);
    w.child.kill('SIGKILL');
    await new Promise((r) => w.child.once('exit', r));
    const lines = ok(await a.sync());
    assert.ok(lines.some((l) => l.pass?.agreed), JSON.stringify(lines));
    // a sync that ended released the folder
    ok(await a.sync());
    // a lock left empty (its owner killed between creating it and writing its pid): busy while
    // the owner may still be writing, taken over once older than EMPTY_LOCK_MS
    const lock = path.join(syncStateDir(a.env), createHash('sha256').update(realpathSync(a.dir)).digest('hex').slice(0, 32) + '.lock');
    assert.ok(!existsSync(lock), 'no lock once the syncs ended');
    writeFileSync(lock, '');
    const young = await a.sync();
    assert.equal(young.code, 1, young.stdout + young.stderr);
    assert.match(young.stderr, /another dsync sync is syncing/);
    const old = (Date.now() - EMPTY_LOCK_MS - 60_000) / 1000;
    utimesSync(lock, old, old);
    ok(await a.sync());
    assert.ok(!existsSync(lock), 'the lock taken over was released');
    assert.deepEqual(readdirSync(syncStateDir(a.env)).filter((n) => n.includes('.lock')), [], 'nothing left beside it');
  } finally {
    w.child.kill('SIGKILL');
    await s.stop();
    done();
  }
});
