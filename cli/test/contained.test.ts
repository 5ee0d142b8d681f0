// The containment helpers (cli/contained.ts) and the local folder's acts on them (cli/node-tree.ts
// NodeTree): a path is rooted in the folder, and no write, rename or delete passes through a
// symbolic link, whoever asked for it.
import assert from 'node:assert/strict';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { NotContained, checkParents, checkTarget, insideFolder, tempName, tempPid } from '../contained.ts';
import { NodeTree } from '../node-tree.ts';

function world() {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-contained-'));
  const dir = path.join(root, 'proj');
  const outside = path.join(root, 'outside');
  mkdirSync(dir);
  mkdirSync(outside);
  writeFileSync(path.join(outside, 'secret'), 'keep me');
  writeFileSync(path.join(dir, 'a.txt'), 'a');
  writeFileSync(path.join(dir, 'file'), 'f');
  symlinkSync('../outside', path.join(dir, 'lnk'));
  symlinkSync('../outside/secret', path.join(dir, 'flink'));
  return { root, dir, outside, done: () => rmSync(root, { recursive: true, force: true }) };
}

test('insideFolder roots a plain relative path and refuses anything else', () => {
  const top = '/srv/proj';
  assert.equal(insideFolder(top, 'a/b.txt'), path.resolve('/srv/proj/a/b.txt'));
  for (const bad of ['', '../x', 'a/../../x', '/etc/x', 'a//b', './a', 'a/', 'a\\..\\x', 'n\0x']) assert.throws(() => insideFolder(top, bad), NotContained, JSON.stringify(bad));
});

test('checkParents makes folders one level at a time and refuses a link or a file on the way', async () => {
  const w = world();
  try {
    assert.equal(await checkParents(w.dir, 'x/y/z.txt', true), path.join(w.dir, 'x', 'y', 'z.txt'));
    assert.ok(lstatSync(path.join(w.dir, 'x', 'y')).isDirectory());
    await assert.rejects(checkParents(w.dir, 'lnk/new/z.txt', true), /lnk is a symbolic link: nothing is written through it/);
    assert.deepEqual(readdirSync(w.outside), ['secret'], 'nothing made through the link');
    await assert.rejects(checkParents(w.dir, 'file/z.txt', true), /file is not a folder here/);
    await assert.rejects(checkTarget(path.join(w.dir, 'flink'), 'flink'), /flink is a symbolic link here: not replaced/);
    assert.equal(await checkTarget(path.join(w.dir, 'none'), 'none'), false);
    const t = tempName();
    assert.match(t, /^\.dsync-tmp-\d+-[0-9a-f]{8}$/);
    assert.equal(tempPid(t), process.pid);
    assert.equal(tempPid('.x.txt.dsync-tmp-42'), 42, 'the older form too');
    assert.equal(tempPid('notes.txt'), undefined);
  } finally {
    w.done();
  }
});

test('NodeTree removes, renames and makes nothing through a link, and never removes a link', async () => {
  const w = world();
  try {
    const tree = new NodeTree(w.dir);
    await assert.rejects(tree.remove('lnk/secret', false), NotContained);
    await assert.rejects(tree.remove('flink', false), NotContained);
    await assert.rejects(tree.rename('a.txt', 'lnk/a.txt', false), NotContained);
    await assert.rejects(tree.rename('lnk/secret', 'stolen', false), NotContained);
    await assert.rejects(tree.mkdir('lnk/sub'), NotContained);
    assert.equal(await tree.rmdir('lnk'), false);
    assert.equal(await tree.stat('flink'), null, 'a link is no file');
    await assert.rejects(tree.hash('lnk/secret'), NotContained);
    assert.equal(readFileSync(path.join(w.outside, 'secret'), 'utf8'), 'keep me');
    assert.deepEqual(readdirSync(w.outside), ['secret']);
    assert.ok(lstatSync(path.join(w.dir, 'lnk')).isSymbolicLink() && lstatSync(path.join(w.dir, 'flink')).isSymbolicLink());
    assert.ok(existsSync(path.join(w.dir, 'a.txt')) && !existsSync(path.join(w.dir, 'stolen')));
    // inside, the same acts work
    await tree.rename('a.txt', 'sub/b.txt', false);
    assert.equal(readFileSync(path.join(w.dir, 'sub', 'b.txt'), 'utf8'), 'a');
    await tree.remove('sub/b.txt', true);
    assert.ok(!existsSync(path.join(w.dir, 'sub')), 'pruned');
  } finally {
    w.done();
  }
});
