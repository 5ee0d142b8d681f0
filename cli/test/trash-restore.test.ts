// The trash like Dropbox's (docs/sync.md): a folder `dsync sync` deleted on the server comes
// back in one command, `dsync restore ".dsync-trash/STAMP/PATH/"`, every file with its
// history; a file whose name was taken again meanwhile stays in the trash and is named, never
// overwritten. The real CLI against a real server.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';

test('a folder deleted by sync comes back from the trash in one command, with its history; a name taken again stays in the trash', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-trash-restore-'));
  const dir = path.join(root, 'proj');
  const env = { DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_SERVER: s.url };
  const write = (p: string, body: string) => {
    mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
    writeFileSync(path.join(dir, p), body);
  };
  const sync = async () => {
    const r = await dsync(['sync', dir, '--device', 'dev0'], { env });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    return jsonLines(r.stdout);
  };
  const store = await s.storeOf('local');
  try {
    write('keep.txt', 'stays\n');
    write('sub/a.txt', 'a, first\n');
    write('sub/deeper/b.txt', 'b\n');
    write('sub/taken.txt', 'the old one\n');
    await sync();
    write('sub/a.txt', 'a, second\n');
    await sync();
    assert.deepEqual((await store.versions('proj/sub/a.txt')).map((v) => v.version), [1, 2]);

    // the folder goes on the device; the pass moves its files to the trash on the server
    rmSync(path.join(dir, 'sub'), { recursive: true });
    const gone = await sync();
    const trashed = gone.filter((l) => l.op === 'deleteRemote').map((l) => l.trash as string);
    assert.equal(trashed.length, 3, JSON.stringify(gone));
    // meanwhile a new file takes one of the names
    write('sub/taken.txt', 'the new one\n');
    await sync();

    // one command per trash stamp the pass used (one, unless it spanned a second)
    const stamps = [...new Set(trashed.map((t) => t.split('/').slice(0, 2).join('/')))];
    const restored: string[] = [];
    const skipped: string[] = [];
    for (const stamp of stamps) {
      const r = await dsync(['restore', `${stamp}/proj/sub/`, '--json'], { env });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const [out] = jsonLines(r.stdout);
      restored.push(...out.restored);
      skipped.push(...out.skipped.map((x: { name: string; why: string }) => (assert.match(x.why, /exists/), x.name)));
    }
    assert.deepEqual(restored.sort(), ['proj/sub/a.txt', 'proj/sub/deeper/b.txt']);
    assert.deepEqual(skipped.map((n) => n.split('/').slice(2).join('/')), ['proj/sub/taken.txt']);
    // histories came along (under the name's own new numbers, never reused); the taken name
    // kept its new content, the old one is still in the trash
    const vs = (await store.versions('proj/sub/a.txt')).map((v) => v.version);
    assert.equal(vs.length, 2);
    assert.equal((await s.stored('proj/sub/a.txt', vs[0])).toString(), 'a, first\n');
    assert.equal((await s.stored('proj/sub/a.txt', vs[1])).toString(), 'a, second\n');
    assert.equal((await s.stored('proj/sub/taken.txt')).toString(), 'the new one\n');
    assert.equal((await s.stored(skipped[0])).toString(), 'the old one\n');

    // the next pass brings them down
    await sync();
    assert.equal(readFileSync(path.join(dir, 'sub/a.txt'), 'utf8'), 'a, second\n');
    assert.equal(readFileSync(path.join(dir, 'sub/deeper/b.txt'), 'utf8'), 'b\n');
    assert.equal(readFileSync(path.join(dir, 'sub/taken.txt'), 'utf8'), 'the new one\n');

    // not in the trash: refused, nothing moves
    const bad = await dsync(['restore', '.dsync-trash/', '--json'], { env });
    assert.notEqual(bad.code, 0);
  } finally {
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
