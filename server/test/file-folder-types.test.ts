// A name is a file or a folder, never both (docs/store.md §11, "Files and folders"): a push of
// `x/y` while `x` is a file, and of `x` while the folder `x/` lists something, are refused
// (Inconsistent) through the real push protocol; a move's destination and POST /api/folders
// likewise (409) through the REST API. Removing the one lets the other through.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';

const enc = (s: string) => Buffer.from(s);
const post = (s: TestServer, route: string, body: unknown) => fetch(`${s.url}/api/${route}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
const listed = async (s: TestServer) => {
  const l = (await (await fetch(`${s.url}/api/files?recursive=1`)).json()) as { files: { name: string }[]; folders: string[] };
  return [...l.files.map((f) => f.name), ...l.folders].sort();
};

test('a push, a move or a folder that would make one name both a file and a folder is refused', async () => {
  const s = await testServer();
  try {
    await pushBytes(s, 'x', enc('x is a file'));
    await pushBytes(s, 'd/e/f.txt', enc('d is a folder'));
    await pushBytes(s, 'loose.txt', enc('to be moved'));
    assert.equal((await post(s, 'folders', { name: 'k' })).status, 200); // kept, empty

    // pushes (the WebSocket protocol): under a file, and over a folder
    await assert.rejects(pushBytes(s, 'x/y', enc('under a file')), /x is a file/);
    await assert.rejects(pushBytes(s, 'x/deeper/y', enc('under a file')), /x is a file/);
    await assert.rejects(pushBytes(s, 'd', enc('over a folder')), /d is a folder/);
    await assert.rejects(pushBytes(s, 'd/e', enc('over a folder')), /d\/e is a folder/);
    await assert.rejects(pushBytes(s, 'd/e/f.txt/g', enc('under a file')), /d\/e\/f\.txt is a file/);
    await assert.rejects(pushBytes(s, 'k', enc('over a kept folder')), /k is a folder/);

    // moves (REST): the destination, under a file or over a folder
    for (const to of ['x/loose.txt', 'd', 'd/e', 'k']) {
      const res = await post(s, 'files/move', { from: 'loose.txt', to });
      assert.equal(res.status, 409, to);
      assert.match(((await res.json()) as { error: string }).error, /is a (file|folder)/, to);
    }
    // a folder move into a file's name
    assert.equal((await post(s, 'files/move', { from: 'd/', to: 'x/' })).status, 409);
    // folders (REST): at a file, or under one
    for (const name of ['x', 'x/sub', 'd/e/f.txt/sub']) assert.equal((await post(s, 'folders', { name })).status, 409, name);

    assert.deepEqual(await listed(s), ['d/', 'd/e/', 'd/e/f.txt', 'k/', 'loose.txt', 'x']);

    // once the file goes, the folder may come (and the reverse)
    assert.equal((await fetch(`${s.url}/api/files?name=x`, { method: 'DELETE' })).status, 200);
    assert.equal((await pushBytes(s, 'x/y', enc('now a folder'))).version, 1);
    assert.equal((await fetch(`${s.url}/api/folders?name=k`, { method: 'DELETE' })).status, 200);
    assert.equal((await post(s, 'files/move', { from: 'loose.txt', to: 'k' })).status, 200);
    assert.deepEqual(await listed(s), ['d/', 'd/e/', 'd/e/f.txt', 'k', 'x/', 'x/y']);
  } finally {
    await s.stop();
  }
});
