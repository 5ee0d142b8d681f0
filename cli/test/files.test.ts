// push of directories and of many files, and pull's refusal to overwrite: what reaches the
// server, what is refused before anything is sent, and the exit statuses.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';

async function setup() {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-cli-files-'));
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known') };
  /** which of these names the server stores */
  const stored = async (...names: string[]) => (await Promise.all(names.map((n) => s.stored(n).then(() => n, () => null)))).filter(Boolean);
  return { s, dir, env, stored, done: async () => (await s.stop(), rmSync(dir, { recursive: true, force: true })) };
}

test('push DIR stores every file under the directory, named by its path from the directory\'s parent', async () => {
  const { s, dir, env, stored, done } = await setup();
  try {
    const photos = path.join(dir, 'trip', 'photos');
    mkdirSync(path.join(photos, '2026', 'may'), { recursive: true });
    writeFileSync(path.join(photos, 'a.jpg'), 'aaa');
    writeFileSync(path.join(photos, '2026', 'b.jpg'), 'bbb');
    writeFileSync(path.join(photos, '2026', 'may', 'c.jpg'), 'ccc');
    writeFileSync(path.join(dir, 'notes.txt'), 'notes');
    // a relative DIR, and a file beside it
    const r = await dsync(['push', 'photos', '../notes.txt', '--server', s.wsUrl], { env, cwd: path.join(dir, 'trip') });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(jsonLines(r.stdout).map((x) => x.name).sort(), ['notes.txt', 'photos/2026/b.jpg', 'photos/2026/may/c.jpg', 'photos/a.jpg']);
    assert.deepEqual(await stored('notes.txt', 'photos/2026/b.jpg', 'photos/2026/may/c.jpg', 'photos/a.jpg', 'a.jpg', 'trip/photos/a.jpg'), ['notes.txt', 'photos/2026/b.jpg', 'photos/2026/may/c.jpg', 'photos/a.jpg']);
    assert.equal((await s.stored('photos/2026/may/c.jpg')).toString(), 'ccc');
    // --name renames one file, never a directory
    assert.equal((await dsync(['push', photos, '--name', 'x', '--server', s.wsUrl], { env })).code, 2);
    assert.equal((await dsync(['push', path.join(dir, 'notes.txt'), '--name', 'docs/n.txt', '--server', s.wsUrl], { env })).code, 0);
    assert.equal((await s.stored('docs/n.txt')).toString(), 'notes');
  } finally {
    await done();
  }
});

test('two files of one name in one push are refused (status 2) before anything is sent', async () => {
  const { s, dir, env, stored, done } = await setup();
  try {
    for (const d of ['d1', 'd2', 'x/photos', 'y/photos']) mkdirSync(path.join(dir, d), { recursive: true });
    writeFileSync(path.join(dir, 'd1', 'notes.txt'), '1');
    writeFileSync(path.join(dir, 'd2', 'notes.txt'), '2');
    writeFileSync(path.join(dir, 'x/photos/a.jpg'), 'x');
    writeFileSync(path.join(dir, 'y/photos/a.jpg'), 'y');
    writeFileSync(path.join(dir, 'other.txt'), 'o');
    const r = await dsync(['push', path.join(dir, 'other.txt'), path.join(dir, 'd1/notes.txt'), path.join(dir, 'd2/notes.txt'), '--server', s.wsUrl], { env });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /two files of one name, nothing sent/);
    assert.match(r.stderr, /notes\.txt: .*d1\/notes\.txt, .*d2\/notes\.txt/);
    const dirs = await dsync(['push', path.join(dir, 'x/photos'), path.join(dir, 'y/photos'), '--server', s.wsUrl], { env });
    assert.equal(dirs.code, 2);
    assert.match(dirs.stderr, /photos\/a\.jpg/);
    // one name written in two Unicode forms (the server keeps NFC) is one name too
    writeFileSync(path.join(dir, 'd1', 'caf\u00e9.txt'), 'nfc');
    writeFileSync(path.join(dir, 'd2', 'cafe\u0301.txt'), 'nfd');
    const forms = await dsync(['push', path.join(dir, 'd1', 'caf\u00e9.txt'), path.join(dir, 'd2', 'cafe\u0301.txt'), '--server', s.wsUrl], { env });
    assert.equal(forms.code, 2);
    assert.match(forms.stderr, /two files of one name/);
    assert.deepEqual(await stored('other.txt', 'notes.txt', 'photos/a.jpg', 'caf\u00e9.txt'), [], 'nothing was sent, not even other.txt');
  } finally {
    await done();
  }
});

test('a missing file among many is reported, the rest still go, and the status is 1', async () => {
  const { s, dir, env, stored, done } = await setup();
  try {
    writeFileSync(path.join(dir, 'a'), 'a');
    writeFileSync(path.join(dir, 'c'), 'c');
    const r = await dsync(['push', path.join(dir, 'a'), path.join(dir, 'b'), path.join(dir, 'c'), '--server', s.wsUrl], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /dsync push: .*\/b: no such file or directory/);
    assert.deepEqual(jsonLines(r.stdout).map((x) => x.name), ['a', 'c']);
    assert.deepEqual(await stored('a', 'b', 'c'), ['a', 'c']);
    // all present: 0; a server that is not there: 1
    assert.equal((await dsync(['push', path.join(dir, 'a'), '--server', s.wsUrl], { env })).code, 0);
    const down = await dsync(['push', path.join(dir, 'a'), '--server', 'ws://127.0.0.1:9', '--retries', '0'], { env });
    assert.equal(down.code, 1);
    assert.match(down.stderr, /cannot connect/);
  } finally {
    await done();
  }
});

test('pull does not overwrite an existing file without --force (status 1, the file untouched)', async () => {
  const { s, dir, env, done } = await setup();
  try {
    writeFileSync(path.join(dir, 'report.txt'), 'version one');
    assert.equal((await dsync(['push', path.join(dir, 'report.txt'), '--server', s.wsUrl], { env })).code, 0);
    const out = path.join(dir, 'copy.txt');
    writeFileSync(out, 'precious');
    const r = await dsync(['pull', 'report.txt', '--server', s.wsUrl, '--out', out], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /copy\.txt exists; --force replaces it/);
    assert.equal(readFileSync(out, 'utf8'), 'precious');
    const f = await dsync(['pull', 'report.txt', '--server', s.wsUrl, '--out', out, '--force'], { env });
    assert.equal(f.code, 0, f.stderr);
    assert.equal(readFileSync(out, 'utf8'), 'version one');
    assert.equal(jsonLines(f.stdout)[0].name, 'report.txt');
    // a name the server does not have: status 1, and no file or temporary left behind
    const missing = await dsync(['pull', 'nope.txt', '--server', s.wsUrl, '--out', path.join(dir, 'nope.txt')], { env });
    assert.equal(missing.code, 1);
    assert.deepEqual(readdirSync(dir).filter((n) => n.startsWith('nope')), []);
  } finally {
    await done();
  }
});
