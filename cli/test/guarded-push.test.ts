// `dsync push` never puts an older copy over a newer version (shared/src/sync/guarded-push.ts), and
// names a file by its path as typed inside the current directory. Two "devices" are two cache
// directories (DSYNC_CACHE_DIR) running the real CLI against a real server on a loopback port.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';
import { isConflictName } from '../../shared/src/sync/conflict.ts';

async function setup() {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-guard-'));
  const device = (label: string) => {
    const home = path.join(dir, label);
    mkdirSync(home, { recursive: true });
    const env = { DSYNC_CACHE_DIR: path.join(dir, `${label}-known`) };
    return {
      home,
      write: (rel: string, text: string) => {
        mkdirSync(path.dirname(path.join(home, rel)), { recursive: true });
        writeFileSync(path.join(home, rel), text);
      },
      run: (...args: string[]) => dsync([...args, '--server', s.wsUrl], { env, cwd: home }),
    };
  };
  const names = async () => (await (await fetch(`${s.url}/api/files?recursive=1`)).json()).files.map((f: { name: string }) => f.name) as string[];
  const versions = async (name: string) => (await (await fetch(`${s.url}/api/versions?name=${encodeURIComponent(name)}`)).json()) as { version: number }[];
  return { s, dir, device, names, versions, done: async () => (await s.stop(), rmSync(dir, { recursive: true, force: true })) };
}

test('a device whose copy is older does not revert a newer version: unchanged, nothing is pushed; edited, a conflict copy keeps both', async () => {
  const t = await setup();
  try {
    const a = t.device('laptop');
    const b = t.device('phone');
    a.write('proj/docs/file3.txt', 'v1 from the laptop\n');
    let r = await a.run('push', 'proj');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(jsonLines(r.stdout).map((x) => [x.name, x.version]), [['proj/docs/file3.txt', 1]]);
    // the phone pulls it, edits it and pushes v2 (against v1, which it knows from its pull)
    assert.equal((await b.run('pull', 'proj/docs/file3.txt', '--out', path.join(b.home, 'file3.txt'))).code, 0);
    b.write('file3.txt', 'v2 from the phone\n');
    r = await b.run('push', 'file3.txt', '--name', 'proj/docs/file3.txt');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(jsonLines(r.stdout)[0].version, 2);

    // the laptop, its copy unchanged since v1, pushes the folder: nothing is stored
    r = await a.run('push', 'proj');
    assert.equal(r.code, 0, r.stderr);
    const behind = jsonLines(r.stdout)[0];
    assert.deepEqual([behind.pushed, behind.behind, behind.knownVersion, behind.server.version], [false, true, 1, 2]);
    assert.deepEqual((await t.versions('proj/docs/file3.txt')).map((v) => v.version), [1, 2]);
    assert.equal((await t.s.stored('proj/docs/file3.txt')).toString(), 'v2 from the phone\n');
    // on a terminal it says so in words (run through a pipe here: --json off is not a TTY, so
    // the words are checked on the JSON's fields above and on the conflict line below)

    // the laptop edits its copy and pushes: the phone's v2 keeps the name, the laptop's bytes
    // go up beside it under a conflict name
    a.write('proj/docs/file3.txt', 'v1 edited on the laptop\n');
    r = await a.run('push', 'proj/docs/file3.txt');
    assert.equal(r.code, 0, r.stderr);
    const c = jsonLines(r.stdout)[0];
    assert.equal(c.conflict.name, 'proj/docs/file3.txt');
    assert.equal(c.conflict.server.version, 2);
    assert.ok(isConflictName(c.name) && c.name.startsWith('proj/docs/file3 (conflict from ') && c.name.endsWith(').txt'), c.name);
    assert.deepEqual((await t.versions('proj/docs/file3.txt')).map((v) => v.version), [1, 2]);
    assert.equal((await t.s.stored('proj/docs/file3.txt')).toString(), 'v2 from the phone\n');
    assert.equal((await t.s.stored(c.name)).toString(), 'v1 edited on the laptop\n');
    // --force pushes over it anyway, as a new version (v2 stays in the history)
    r = await a.run('push', 'proj/docs/file3.txt', '--force');
    assert.equal(jsonLines(r.stdout)[0].version, 3);
    assert.equal((await t.s.stored('proj/docs/file3.txt', 2)).toString(), 'v2 from the phone\n');
  } finally {
    await t.done();
  }
});

test('a first push of a name another device created meanwhile makes a conflict copy; the same bytes are no conflict', async () => {
  const t = await setup();
  try {
    const a = t.device('laptop');
    const b = t.device('desktop');
    a.write('notes.txt', 'the laptop wrote this\n');
    b.write('notes.txt', 'the desktop wrote this\n');
    assert.equal(jsonLines((await a.run('push', 'notes.txt')).stdout)[0].version, 1);
    const r = await b.run('push', 'notes.txt');
    assert.equal(r.code, 0, r.stderr);
    const c = jsonLines(r.stdout)[0];
    assert.ok(c.conflict && isConflictName(c.name), JSON.stringify(c));
    assert.equal((await t.s.stored('notes.txt')).toString(), 'the laptop wrote this\n');
    assert.equal((await t.s.stored(c.name)).toString(), 'the desktop wrote this\n');
    // a third device holding the laptop's very bytes: found unchanged, no copy, and remembered
    const d = t.device('tablet');
    d.write('notes.txt', 'the laptop wrote this\n');
    const same = jsonLines((await d.run('push', 'notes.txt')).stdout)[0];
    assert.deepEqual([same.name, same.version, same.conflict], ['notes.txt', 1, undefined]);
    assert.equal((await t.names()).length, 2);
    d.write('notes.txt', 'the tablet edited the laptop version\n');
    assert.equal(jsonLines((await d.run('push', 'notes.txt')).stdout)[0].version, 2);
  } finally {
    await t.done();
  }
});

test('push names a file or folder inside the current directory by its path as typed, one outside by its path from its parent', async () => {
  const t = await setup();
  try {
    const a = t.device('laptop');
    a.write('proj/docs/file2.txt', 'two\n');
    a.write('proj/readme.txt', 'readme\n');
    const outside = path.join(t.dir, 'elsewhere');
    mkdirSync(path.join(outside, 'pics'), { recursive: true });
    writeFileSync(path.join(outside, 'x.txt'), 'x\n');
    writeFileSync(path.join(outside, 'pics', 'p.txt'), 'p\n');
    const names = async (...args: string[]) => {
      const r = await a.run('push', ...args);
      assert.equal(r.code, 0, r.stderr);
      return jsonLines(r.stdout).map((x) => x.name);
    };
    assert.deepEqual(await names('proj/docs/file2.txt'), ['proj/docs/file2.txt']);
    assert.deepEqual(await names('./proj/docs'), ['proj/docs/file2.txt']);
    assert.deepEqual(await names('proj'), ['proj/docs/file2.txt', 'proj/readme.txt']);
    assert.deepEqual(await names(path.join(outside, 'x.txt'), path.join(outside, 'pics')), ['x.txt', 'pics/p.txt']);
    // each went to one name: pushing by either path is the same file
    assert.deepEqual((await t.names()).sort(), ['pics/p.txt', 'proj/docs/file2.txt', 'proj/readme.txt', 'x.txt']);
    assert.deepEqual((await t.versions('proj/docs/file2.txt')).map((v) => v.version), [1]);
  } finally {
    await t.done();
  }
});
