// `dsync sync` trusted with a home folder (issue 44), the engine's part: the real CLI on two or
// three devices against a real server where the CLI can show it, the engine with the CLI's I/O
// (and a hook at the right moment) where a race must land between a listing and an action, and
// a case-insensitive tree in memory (sync-world.ts CaselessTree) where this machine mounts no
// case-insensitive file system.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { FileKnown } from '../known.ts';
import { NodeTree } from '../node-tree.ts';
import { HttpFolder } from '../http-folder.ts';
import { FileState } from '../sync-state.ts';
import { syncUntilStill } from '../../shared/src/sync/engine.ts';
import { dsync, jsonLines } from './run.ts';
import { guardMessage } from '../commands/sync.ts';
import { caselessDevice, device, serverOf, sha, treeOf } from './sync-world.ts';

interface Dev {
  name: string;
  dir: string;
  env: NodeJS.ProcessEnv;
  sync(...flags: string[]): ReturnType<typeof dsync>;
  write(p: string, body: string | Buffer): void;
  read(p: string): string;
  at(p: string): string;
}

function devices(url: string, n = 2) {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-trust-'));
  const devs: Dev[] = [];
  for (let i = 0; i < n; i++) {
    const dir = path.join(root, `dev${i}`, 'proj');
    mkdirSync(dir, { recursive: true });
    const env = { DSYNC_CACHE_DIR: path.join(root, `dev${i}`, 'cache'), DSYNC_SERVER: url };
    const at = (p: string) => path.join(dir, ...p.split('/'));
    devs.push({
      name: `dev${i}`,
      dir,
      env,
      at,
      sync: (...flags) => dsync(['sync', dir, '--device', `dev${i}`, ...flags], { env }),
      write(p, body) {
        mkdirSync(path.dirname(at(p)), { recursive: true });
        writeFileSync(at(p), body);
      },
      read: (p) => readFileSync(at(p), 'utf8'),
    });
  }
  return { devs, root, done: () => rmSync(root, { recursive: true, force: true }) };
}

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return jsonLines(r.stdout);
};

/** Every content in `dir`'s files. */
const contents = (dir: string) => new Set(treeOf(dir).values());
const h = (s: string) => sha(Buffer.from(s));

const HOUR_AGO = new Date(Date.now() - 3600_000);

/** Writes `body` keeping the file's size and mtime (as `cp -p`, a restore, or an editor that
 *  keeps times does). */
function sneakyEdit(file: string, body: string) {
  const st = statSync(file);
  assert.equal(Buffer.byteLength(body), st.size, 'the same size');
  writeFileSync(file, body);
  utimesSync(file, st.atime, st.mtime);
}

test('an edit that keeps size and mtime is not overwritten by a download, nor deleted, and survives as a conflict', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    for (const [p, body] of [['x.txt', 'x from a 1'], ['y.txt', 'y from a 1']]) {
      a.write(p, body);
      // an old mtime, so that the state trusts it (RACY_MS)
      utimesSync(a.at(p), HOUR_AGO, HOUR_AGO);
    }
    ok(await a.sync());
    ok(await a.sync());
    ok(await b.sync());

    // x: edited on both; a's edit keeps size and mtime
    sneakyEdit(a.at('x.txt'), 'X FROM A 2');
    b.write('x.txt', 'x edited on b');
    ok(await b.sync());
    // y: deleted on b; edited on a keeping size and mtime
    rmSync(b.at('y.txt'));
    ok(await b.sync());
    sneakyEdit(a.at('y.txt'), 'Y FROM A 2');

    const r = ok(await a.sync());
    assert.ok(r.some((x) => x.op === 'download' && x.path === 'x.txt' && x.retry), 'the download met a local change: ' + JSON.stringify(r));
    const c = r.find((x) => x.op === 'conflict' && x.path === 'x.txt');
    assert.ok(c?.conflictCopy, JSON.stringify(r));
    assert.equal(a.read(c.conflictCopy), 'X FROM A 2', "a's edit is the conflict copy");
    assert.equal(a.read('x.txt'), 'x edited on b');
    assert.ok(!r.some((x) => x.op === 'deleteLocal' && x.path === 'y.txt' && !x.retry), 'y is not deleted');
    assert.equal(a.read('y.txt'), 'Y FROM A 2', 'the edit beats the delete');
    ok(await b.sync());
    assert.equal(b.read('y.txt'), 'Y FROM A 2');
    assert.equal(b.read(c.conflictCopy), 'X FROM A 2');
    const { latest } = await serverOf(s);
    assert.deepEqual(treeOf(a.dir), latest);
    assert.deepEqual(treeOf(b.dir), latest);
  } finally {
    done();
    await s.stop();
  }
});

test('a local rename racing another device\'s edit: the move is recorded only as verified, and the two sides end equal with both contents', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-move-race-'));
  const a = device(s, root, 'a');
  const b = device(s, root, 'b');
  try {
    writeFileSync(path.join(a.dir, 'doc.txt'), 'one');
    await a.sync();
    await b.sync();
    renameSync(path.join(a.dir, 'doc.txt'), path.join(a.dir, 'moved.txt'));
    writeFileSync(path.join(b.dir, 'doc.txt'), 'TWO, B edited');
    // a's pass: b's edit lands between a's listing and a's move
    const tree = new NodeTree(a.dir);
    const remote = new HttpFolder({ values: { server: s.url }, folder: 'proj', tree, device: 'a', known: new FileKnown(path.join(a.cache, 'known')) });
    const move = remote.move.bind(remote);
    let injected = false;
    remote.move = async (from, to, expect) => {
      if (!injected) (injected = true), assert.equal((await b.sync()).agreed, true);
      return move(from, to, expect);
    };
    const state = new FileState({ server: s.url, folder: 'proj', dir: a.dir }, path.join(a.cache, 'sync'));
    try {
      const r = await syncUntilStill(tree, remote, state, { device: 'a', maxDeleteShare: 1, maxDeleteMin: 0 });
      assert.ok(injected);
      assert.ok(r.done.some((d) => d.op === 'moveRemote' && d.retry), 'the move is not recorded: ' + JSON.stringify(r.done));
      assert.equal(r.agreed, true, JSON.stringify(r.done));
    } finally {
      remote.close();
    }
    await b.sync();
    const { latest } = await serverOf(s);
    assert.deepEqual(treeOf(a.dir), latest, "a's tree is the server's");
    assert.deepEqual(treeOf(b.dir), latest, "b's tree is the server's");
    const all = new Set(latest.values());
    assert.ok(all.has(h('one')) && all.has(h('TWO, B edited')), 'both contents are kept');
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test('file and folder at one path, both ways, against edits on other devices: all three converge and keep every content', async () => {
  const s = await testServer();
  const { devs: [a, b, c], done } = devices(s.url, 3);
  try {
    a.write('x', 'x as a file');
    a.write('w', 'w as a file');
    a.write('d/e.txt', 'e in folder d');
    for (const d of [a, b, c]) ok(await d.sync());

    // x: a makes it a folder and syncs first; b edits the file
    rmSync(a.at('x'));
    a.write('x/inside.txt', 'in the folder x');
    b.write('x', 'x edited on b');
    // w: b edits the file and syncs first; a makes it a folder
    b.write('w', 'w edited on b');
    rmSync(a.at('w'));
    a.write('w/inside.txt', 'in the folder w');
    // d: a makes the folder a file; c edits a file in it
    rmSync(a.at('d'), { recursive: true });
    a.write('d', 'd as a file');
    c.write('d/e.txt', 'e edited on c');

    const order = [b, a, c, b, a, c, a, b, c];
    for (const d of order.slice(0, 1)) ok(await d.sync()); // b's w edit lands first
    for (const d of order.slice(1)) ok(await d.sync());
    const { latest } = await serverOf(s);
    for (const d of [a, b, c]) assert.deepEqual(treeOf(d.dir), latest, `${d.name}'s tree is the server's`);
    const all = new Set(latest.values());
    for (const body of ['x edited on b', 'in the folder x', 'w edited on b', 'in the folder w', 'd as a file', 'e edited on c']) assert.ok(all.has(h(body)), `${body} is kept`);
    assert.ok(statSync(a.at('x')).isDirectory() && statSync(a.at('w')).isDirectory(), 'the folders keep their names');
    // a fourth pass on each has nothing to do
    for (const d of [a, b, c]) assert.equal(ok(await d.sync()).filter((x) => x.op).length, 0);
  } finally {
    done();
    await s.stop();
  }
});

test('names that differ by case on the server are not clobbered on a case-insensitive file system (an in-memory tree)', async () => {
  const s = await testServer();
  const { devs: [a], done } = devices(s.url, 1);
  const mac = caselessDevice(s, 'mac');
  try {
    a.write('Readme.md', 'readme, capital R');
    a.write('README.md', 'README, all capitals');
    a.write('docs/Notes.txt', 'notes');
    ok(await a.sync());
    mac.tree.write('docs/notes.txt', Buffer.from('notes made on the mac'));
    const r = await mac.sync();
    assert.ok(!r.done.some((d) => d.error), JSON.stringify(r.done));
    assert.ok(r.done.some((d) => d.op === 'asideRemote'), JSON.stringify(r.done));
    ok(await a.sync());
    await mac.sync();
    const { latest } = await serverOf(s);
    assert.deepEqual(mac.tree.contents(), latest, "the mac's tree is the server's");
    assert.deepEqual(treeOf(a.dir), latest, "the Linux device's tree is the server's");
    const all = new Set(latest.values());
    for (const body of ['readme, capital R', 'README, all capitals', 'notes', 'notes made on the mac']) assert.ok(all.has(h(body)), `${body} is kept`);
    const folded = [...latest.keys()].map((p) => p.toLowerCase());
    assert.equal(new Set(folded).size, folded.length, 'no two names the mac holds as one');
  } finally {
    done();
    await s.stop();
  }
});

test('Unicode forms: an edit comes down to the NFD name on disk, and two forms of one name in a folder do not hold it for ever', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  const nfd = 'cafe\u0301.txt';
  const nfc = nfd.normalize('NFC');
  try {
    a.write(nfd, 'made with an NFD name');
    ok(await a.sync());
    ok(await b.sync());
    assert.equal(b.read(nfc), 'made with an NFD name');
    b.write(nfc, 'edited on b');
    ok(await b.sync());
    ok(await a.sync());
    assert.deepEqual(readdirSync(a.dir), [nfd], 'the edit went to the name on disk: no twin');
    assert.equal(a.read(nfd), 'edited on b');

    // two names differing only by form, in one folder
    a.write('sub/' + 'e\u0301.txt', 'the NFD one');
    a.write('sub/' + 'é.txt', 'the NFC one');
    const r = await a.sync();
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const pass = jsonLines(r.stdout).at(-1).pass;
    assert.equal(pass.agreed, true);
    ok(await a.sync());
    ok(await b.sync());
    const all = contents(b.dir);
    assert.ok(all.has(h('the NFD one')) && all.has(h('the NFC one')), 'both kept');
    const { latest } = await serverOf(s);
    assert.deepEqual(treeOf(b.dir), latest);
  } finally {
    done();
    await s.stop();
  }
});

test('the delete guard counts folders, and never suggests a higher limit while entries could not be read', async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    for (let i = 0; i < 12; i++) mkdirSync(a.at(`empty${i}`));
    a.write('f.txt', 'one file');
    ok(await a.sync());
    ok(await b.sync());
    for (let i = 0; i < 12; i++) rmSync(b.at(`empty${i}`), { recursive: true });
    const r = await b.sync('--max-delete', '50%');
    assert.equal(r.code, 1, r.stdout + r.stderr);
    const pass = jsonLines(r.stdout).at(-1).pass;
    assert.deepEqual(pass.guard, { deletes: 12, allowed: 6, files: 1, folders: 12, errors: 0 });
    assert.match(r.stderr, /would delete 12 of 1 file and 12 folders/);
    assert.match(r.stderr, /run again with --max-delete 12/);
    for (let i = 0; i < 12; i++) assert.ok(existsSync(path.join(a.dir, `empty${i}`)));

    // entries that could not be read in the pass: the guard does not suggest a higher limit
    const tree = new NodeTree(b.dir);
    const scan = tree.scan.bind(tree);
    tree.scan = async () => {
      const r = await scan();
      r.skipped.push({ path: 'unreadable/', reason: 'cannot read the folder: EIO', hold: true });
      return r;
    };
    const remote = new HttpFolder({ values: { server: s.url }, folder: 'proj', tree, device: 'dev1' });
    try {
      const state = new FileState({ server: s.url, folder: 'proj', dir: b.dir }, path.join(b.env.DSYNC_CACHE_DIR!, 'sync'));
      const g = (await syncUntilStill(tree, remote, state, { device: 'dev1', maxDeleteShare: 0.5, maxDeleteMin: 0 })).guard;
      assert.deepEqual(g, { deletes: 12, allowed: 6, files: 1, folders: 12, errors: 1 });
      assert.doesNotMatch(guardMessage(g), /--max-delete \d/);
      assert.match(guardMessage(g), /could not be read/);
    } finally {
      remote.close();
    }
  } finally {
    done();
    await s.stop();
  }
});

test('every delete of one pass goes under one trash folder', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-trash-'));
  const a = device(s, root, 'a');
  try {
    for (const p of ['one.txt', 'two.txt', 'sub/three.txt']) {
      mkdirSync(path.dirname(path.join(a.dir, p)), { recursive: true });
      writeFileSync(path.join(a.dir, p), p);
    }
    await a.sync();
    for (const p of ['one.txt', 'two.txt', 'sub/three.txt']) rmSync(path.join(a.dir, p));
    // a clock a second later at every look: deletes that each took the time would differ
    let t = Date.parse('2026-11-26T15:30:00');
    const now = () => new Date((t += 1000));
    const r = await a.sync({ now });
    const trash = r.done.filter((d) => d.op === 'deleteRemote').map((d) => d.trash!);
    assert.equal(trash.length, 3, JSON.stringify(r.done));
    const stamps = new Set(trash.map((p) => p.split('/')[1]));
    assert.equal(stamps.size, 1, trash.join(', '));
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test('one folder reached through a link keeps one state (keyed by its real path, as the lock)', async () => {
  const s = await testServer();
  const { devs: [a], root, done } = devices(s.url, 1);
  try {
    a.write('x.txt', 'x');
    a.write('y.txt', 'y');
    ok(await a.sync());
    const link = path.join(root, 'link-to-proj');
    symlinkSync(a.dir, link);
    const r = ok(await dsync(['sync', link, '--device', 'dev0', '--remote', 'proj'], { env: a.env }));
    assert.deepEqual(r.filter((x) => x.op), [], 'nothing to record again: the state is the same');
  } finally {
    done();
    await s.stop();
  }
});

test(".dsyncignore is this device's own: one device's rules do not silence another, and a rule hiding synced files is reported", async () => {
  const s = await testServer();
  const { devs: [a, b], done } = devices(s.url);
  try {
    a.write('f.txt', 'synced');
    ok(await a.sync());
    ok(await b.sync());
    a.write('.dsyncignore', '*\n!.dsyncignore\n');
    const r = ok(await a.sync());
    assert.ok(r.some((x) => x.skipped === 'f.txt' && /hidden now by the ignore rules/.test(x.reason)), JSON.stringify(r));
    assert.equal(r.at(-1).pass.hidden, 1);
    b.write('g.txt', 'made on b');
    ok(await b.sync());
    const { latest } = await serverOf(s);
    assert.ok(latest.has('g.txt'), "b's new file went up");
    assert.ok(!latest.has('.dsyncignore'), 'the rules stay on a');
  } finally {
    done();
    await s.stop();
  }
});

test('an upload the server refuses again and again against the same listing stops with the reason', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-refused-'));
  const a = device(s, root, 'a');
  const b = device(s, root, 'b');
  try {
    writeFileSync(path.join(b.dir, 'held.txt'), 'on the server');
    await b.sync();
    writeFileSync(path.join(a.dir, 'held.txt'), 'made on a');
    // a's listing lacks held.txt (as a folder catalog that missed a commit does)
    const tree = new NodeTree(a.dir);
    const remote = new HttpFolder({ values: { server: s.url }, folder: 'proj', tree, device: 'a' });
    const list = remote.list.bind(remote);
    remote.list = async () => {
      const l = await list();
      l.files.delete('held.txt');
      return l;
    };
    const state = new FileState({ server: s.url, folder: 'proj', dir: a.dir }, path.join(a.cache, 'sync'));
    let pushes = 0;
    const push = remote.push.bind(remote);
    remote.push = async (p, e) => (pushes++, push(p, e));
    // (a small file goes up in bulk: each file of a bulk upload counts as a push)
    const pushMany = remote.pushMany.bind(remote);
    remote.pushMany = async (items) => ((pushes += items.length), pushMany(items));
    try {
      const opts = { device: 'a', maxDeleteShare: 1, maxDeleteMin: 0 };
      const r = await syncUntilStill(tree, remote, state, opts, 10);
      const failed = r.done.filter((d) => d.error);
      assert.equal(failed.length, 1, JSON.stringify(r.done));
      assert.match(failed[0].error!, /refused this upload 3 times .*listing/);
      assert.equal(pushes, 3);
      // a --watch keeps the state: later passes say it again without sending
      const again = await syncUntilStill(tree, remote, state, opts, 10);
      assert.equal(again.done.filter((d) => d.error).length, 1);
      assert.equal(pushes, 3);
    } finally {
      remote.close();
    }
    assert.equal(readFileSync(path.join(a.dir, 'held.txt'), 'utf8'), 'made on a');
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
