// The sync engine's races, made to happen: another device's change landing between a pass's
// listing and its action (the real server and I/O, with the other device's step injected just
// before the action), and a file rewritten while it is being uploaded; and its state: lost, and
// trusted (an unchanged file is not read again).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { FileKnown } from '../known.ts';
import { NodeTree } from '../node-tree.ts';
import { HttpFolder } from '../http-folder.ts';
import { FileState } from '../sync-state.ts';
import { syncUntilStill } from '../../shared/src/sync/engine.ts';
import { device, serverOf, sha, treeOf } from './sync-world.ts';
import { randomBytes } from '../../harness/testdata.ts';

/** A device whose server folder runs `before(op, path)` ahead of each push and pull. */
function hooked(s: { url: string }, root: string, name: string, before: (op: 'push' | 'pull', p: string) => Promise<void>) {
  const d = device(s, root, name);
  return {
    ...d,
    async syncHooked() {
      const tree = new NodeTree(d.dir);
      const remote = new HttpFolder({ values: { server: s.url }, folder: 'proj', tree, device: name, known: new FileKnown(path.join(d.cache, 'known')) });
      const push = remote.push.bind(remote);
      const pull = remote.pull.bind(remote);
      remote.push = async (p, basis) => (await before('push', p), push(p, basis));
      remote.pull = async (p, v, expect, basis) => (await before('pull', p), pull(p, v, expect, basis));
      // small files go in bulk (docs/sync.md "Small files in bulk"): the hook runs before each
      // file's place in the request
      const pushMany = remote.pushMany.bind(remote);
      const pullMany = remote.pullMany.bind(remote);
      remote.pushMany = async (items) => {
        for (const it of items) await before('push', it.path);
        return pushMany(items);
      };
      remote.pullMany = async (items) => {
        for (const it of items) await before('pull', it.path);
        return pullMany(items);
      };
      const state = new FileState({ server: s.url, folder: 'proj', dir: d.dir }, path.join(d.cache, 'sync'));
      try {
        return await syncUntilStill(tree, remote, state, { device: name, maxDeleteShare: 1, maxDeleteMin: 0, ignored: (p, dir) => tree.ignored(p, dir) });
      } finally {
        remote.close();
      }
    },
  };
}

test('races: an edit landing before an upload, a first file made twice at once, a local save during a download', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-races-'));
  const b = device(s, root, 'b');
  let inject: ((op: 'push' | 'pull', p: string) => Promise<void>) | null = null;
  const a = hooked(s, root, 'a', async (op, p) => {
    const f = inject;
    inject = null;
    await f?.(op, p);
  });
  const put = (dir: string, p: string, body: string) => writeFileSync(path.join(dir, p), body);
  try {
    put(a.dir, 'doc.txt', 'base');
    await a.syncHooked();
    await b.sync();

    // 1. a's edit goes up against v1, but b's edit lands first: StaleBasis, then a conflict copy
    put(a.dir, 'doc.txt', 'edit from a');
    put(b.dir, 'doc.txt', 'edit from b');
    inject = async () => void (await b.sync());
    const r1 = await a.syncHooked();
    assert.ok(r1.done.some((d) => d.op === 'upload' && d.retry), 'the stale upload is retried as a conflict');
    const c1 = r1.done.find((d) => d.op === 'conflict');
    assert.ok(c1?.conflictCopy, JSON.stringify(r1.done));
    await b.sync();
    for (const dir of [a.dir, b.dir]) {
      assert.equal(readFileSync(path.join(dir, 'doc.txt'), 'utf8'), 'edit from b');
      assert.equal(readFileSync(path.join(dir, c1.conflictCopy!), 'utf8'), 'edit from a');
    }

    // 2. a new name made on both at once: the listing showed none, b's lands under a's push
    put(a.dir, 'new.txt', 'new from a');
    put(b.dir, 'new.txt', 'new from b');
    inject = async () => void (await b.sync());
    const r2 = await a.syncHooked();
    assert.ok(r2.done.some((d) => d.op === 'upload' && d.path === 'new.txt' && d.retry), JSON.stringify(r2.done));
    const c2 = r2.done.find((d) => d.op === 'conflict' && d.path === 'new.txt');
    assert.ok(c2?.conflictCopy, JSON.stringify(r2.done));
    await b.sync();
    for (const dir of [a.dir, b.dir]) {
      assert.equal(readFileSync(path.join(dir, 'new.txt'), 'utf8'), 'new from b', "the first device's file keeps the name");
      assert.equal(readFileSync(path.join(dir, c2.conflictCopy!), 'utf8'), 'new from a');
    }

    // 3. a saves doc.txt while b's edit is coming down: the save is not overwritten
    put(b.dir, 'doc.txt', 'second edit from b');
    await b.sync();
    inject = async (op) => {
      assert.equal(op, 'pull');
      put(a.dir, 'doc.txt', 'saved on a during the download');
    };
    const r3 = await a.syncHooked();
    assert.ok(r3.done.some((d) => d.op === 'download' && d.retry), JSON.stringify(r3.done));
    const c3 = r3.done.find((d) => d.op === 'conflict' && d.path === 'doc.txt');
    assert.ok(c3?.conflictCopy);
    assert.equal(readFileSync(path.join(a.dir, c3.conflictCopy!), 'utf8'), 'saved on a during the download');
    assert.equal(readFileSync(path.join(a.dir, 'doc.txt'), 'utf8'), 'second edit from b');
    await b.sync();
    const { latest } = await serverOf(s);
    assert.deepEqual(treeOf(a.dir), latest);
    assert.deepEqual(treeOf(b.dir), latest);
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test("a large file rewritten between the plan's hashing and its push, its size and mtime kept: the plan's index is refused and nothing but what was on disk is stored", async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-planned-'));
  // above BULK_FILE_MAX: the push is a session of its own, sent from the plan's chunk index
  const first = randomBytes(31, 1 << 20);
  const second = randomBytes(32, 1 << 20);
  let inject: (() => void) | null = null;
  const a = hooked(s, root, 'a', async () => {
    const f = inject;
    inject = null;
    f?.();
  });
  const file = path.join(a.dir, 'big.bin');
  try {
    // a whole second, which a stat gives back exactly
    const mtime = 1_700_000_000;
    writeFileSync(file, first);
    utimesSync(file, mtime, mtime);
    inject = () => {
      writeFileSync(file, second);
      utimesSync(file, mtime, mtime);
    };
    const r = await a.syncHooked();
    const uploads = r.done.filter((d) => d.op === 'upload' && d.path === 'big.bin');
    // the first push sent the index of the bytes the plan read, and the server's root check
    // refused the bytes it got; the pass after read the file again
    assert.deepEqual(uploads.map((d) => !!d.retry), [true, false], JSON.stringify(r.done));
    assert.ok(r.agreed, JSON.stringify(r.done));
    const { latest, ever } = await serverOf(s);
    assert.deepEqual(latest, new Map([['big.bin', sha(second)]]));
    assert.deepEqual([...ever], [sha(second)], 'nothing stored but what was on disk');
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test('a file rewritten while it is uploaded is never stored torn', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-torn-'));
  const a = device(s, root, 'a');
  const file = path.join(a.dir, 'big.bin');
  const stop = path.join(root, 'stop');
  const SIZE = 6 << 20;
  // the file exists whole before any sync can see it; then a writer rewrites it in place,
  // 1 MiB at a time from the start, each round with one byte value (1, 2, …, 254, 1, …), until
  // the test has seen uploads meet it; then one last round of 255
  writeFileSync(file, Buffer.alloc(SIZE, 0));
  const writer = spawn(
    process.execPath,
    [
      '-e',
      `const fs = require('fs'); const [f, stop] = process.argv.slice(1); const size = ${SIZE};
       const round = (value) => {
         const fd = fs.openSync(f, 'r+');
         for (let o = 0; o < size; o += 1 << 20) fs.writeSync(fd, Buffer.alloc(1 << 20, value), 0, 1 << 20, o);
         fs.closeSync(fd);
       };
       for (let r = 0; !fs.existsSync(stop); r++) {
         round((r % 254) + 1);
         const t = Date.now(); while (Date.now() - t < 20);
       }
       round(255);`,
      file,
      stop,
    ],
    { stdio: 'inherit' },
  );
  const done = new Promise((r) => writer.once('exit', r));
  /** Whether `bytes` is a state the file had on disk: a round's value over the start and the
   *  round before it after (the writer goes from the start to the end), or one value. A sync
   *  that mixed reads from apart in time could store what never was, e.g. an older start. */
  const wasOnDisk = (bytes: Buffer) => {
    const cut = bytes.findIndex((x) => x !== bytes[0]);
    if (cut < 0) return true;
    const [first, rest] = [bytes[0], bytes[cut]];
    return bytes.subarray(cut).every((x) => x === rest) && (first === 255 || first === (rest % 254) + 1);
  };
  try {
    const store = await s.storeOf('local');
    const versions = () => store.versionNumbers('proj/big.bin').catch(() => [] as number[]);
    let retried = 0;
    // uploads meet the writer: refused (the bytes did not match their list) or stored; the
    // writer goes on until two did, however slow this machine is
    while (retried + (await versions()).length < 2) {
      const r = await a.sync();
      assert.deepEqual(r.done.filter((d) => d.error), [], 'a file changing while read is no error: it is read again');
      retried += r.done.filter((d) => d.retry).length;
    }
    writeFileSync(stop, '');
    await done;
    for (let i = 0; i < 2; i++) await a.sync();
    const stored = await versions();
    for (const v of stored) {
      const bytes = await store.bytes('proj/big.bin', v);
      assert.equal(bytes.length, SIZE, `v${v}'s size`);
      assert.ok(wasOnDisk(Buffer.from(bytes)), `v${v} is torn: it mixes writes the file never held at once`);
    }
    assert.ok((await s.stored('proj/big.bin')).every((x) => x === 255), 'the last write is the latest version');
  } finally {
    writer.kill('SIGKILL');
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test('a lost state loses nothing: equal files are agreed again without a transfer, a different one becomes a conflict copy', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-state-'));
  const a = device(s, root, 'a');
  try {
    for (const n of ['x', 'y', 'z']) writeFileSync(path.join(a.dir, `${n}.txt`), `${n} content`);
    await a.sync();
    rmSync(path.join(a.cache, 'sync'), { recursive: true });
    writeFileSync(path.join(a.dir, 'z.txt'), 'z changed while the state was lost');
    const r = await a.sync();
    assert.deepEqual(r.done.filter((d) => d.op === 'record').map((d) => d.path).sort(), ['x.txt', 'y.txt']);
    const c = r.done.find((d) => d.op === 'conflict');
    assert.equal(c?.path, 'z.txt');
    assert.ok(!r.done.some((d) => d.op === 'upload' || d.op === 'download'));
    assert.equal(readFileSync(path.join(a.dir, 'z.txt'), 'utf8'), 'z content');
    assert.equal(readFileSync(path.join(a.dir, c.conflictCopy!), 'utf8'), 'z changed while the state was lost');
    const store = await s.storeOf('local');
    assert.deepEqual(await store.versionNumbers('proj/x.txt'), [1], 'no new version of an unchanged file');
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

test('an unchanged folder is not read again: size and mtime match the state, files saved just before the sync included (a touched file is read, not sent)', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-sync-stat-'));
  const a = device(s, root, 'a');
  try {
    for (let i = 0; i < 30; i++) writeFileSync(path.join(a.dir, `f${i}.txt`), `file ${i}`);
    // past the file system's clock tick (a few ms here; FAT's is 2 s), not RACY_MS: the racy
    // rule compares the mtimes with the file system's own moment at the pass's start
    await new Promise((r) => setTimeout(r, 100));
    // each file read once: the passes after the first trust the recorded mtimes
    assert.equal((await a.sync()).hashed, 30);
    const still = await a.sync();
    assert.equal(still.hashed, 0);
    assert.deepEqual(still.done, []);
    const f = path.join(a.dir, 'f3.txt');
    utimesSync(f, new Date(), new Date(Date.now() - 60_000));
    const touched = await a.sync();
    assert.equal(touched.hashed, 1);
    assert.deepEqual(touched.done, [], 'the same content is not sent');
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
