// Search by name over a real server's folder catalogs (GET /api/search, store/search.ts): every
// match in any folder, in name order; paging by cursor, bounded by hits and by catalogs read,
// finds each match once whatever the page bounds; hostile parameters are refused.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SEARCH_PAGE } from '../../shared/src/base/limits.ts';
import { Store } from '../src/store/store.ts';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';

const get = (s: TestServer, path: string) => fetch(`${s.url}/api/${path}`);

const NAMES = [
  'proj/bin/blob3mb.bin',
  'proj/bin/other.bin',
  'proj/readme.md',
  'proj-notes.txt',
  'Blobby.txt',
  'a/b/c/d/deep-blob.dat',
  'a/b.blob',
  'a/b/x.txt',
  'z/BLOB',
  'z/y/none.txt',
];

test('search finds a name in any folder, case-insensitively, in name order, with its folder', async () => {
  const s = await testServer();
  try {
    for (const [i, n] of NAMES.entries()) await pushBytes(s, n, new TextEncoder().encode(`file ${i}`));
    const res = await get(s, 'search?q=blob');
    assert.equal(res.status, 200);
    const page = (await res.json()) as { files: { name: string; size: number; latest: number }[]; next: string | null };
    const want = NAMES.filter((n) => n.toLowerCase().includes('blob')).sort((a, b) => (a < b ? -1 : 1));
    assert.deepEqual(page.files.map((f) => f.name), want);
    assert.equal(page.next, null);
    assert.equal(page.files[0].latest, 1);
    // a path part matches too
    assert.deepEqual(((await (await get(s, 'search?q=bin%2F')).json()) as any).files.map((f: any) => f.name), ['proj/bin/blob3mb.bin', 'proj/bin/other.bin']);
    // a deleted file is not found
    assert.equal((await fetch(`${s.url}/api/files?name=${encodeURIComponent('z/BLOB')}`, { method: 'DELETE' })).status, 200);
    assert.ok(!((await (await get(s, 'search?q=blob')).json()) as any).files.some((f: any) => f.name === 'z/BLOB'));

    // paging: every bound of hits and catalogs read finds each match exactly once, in order
    const store = new Store(s.repo, 'local');
    const all = (await store.search('', '', 1000, 1000)).files.map((f) => f.name);
    assert.equal(all.length, NAMES.length - 1);
    for (const q of ['', 'b', 'blob', '.txt']) {
      const expect = all.filter((n) => n.toLowerCase().includes(q));
      for (const limit of [1, 2, 3, 50]) {
        for (const maxFolders of [1, 2, 3, 100]) {
          const got: string[] = [];
          let cursor = '';
          for (let pages = 0; ; pages++) {
            assert.ok(pages < 100, 'the walk ends');
            const p = await store.search(q, cursor, limit, maxFolders);
            assert.ok(p.files.length <= limit);
            got.push(...p.files.map((f) => f.name));
            if (p.next === null) break;
            assert.ok(p.next > cursor || (cursor === '' && p.next !== ''), `the cursor moves on (${cursor} → ${p.next})`);
            cursor = p.next;
          }
          assert.deepEqual(got, expect, `q=${q} limit=${limit} maxFolders=${maxFolders}`);
        }
      }
    }

    // hostile parameters: a clear 400, the server goes on
    for (const bad of ['search', 'search?q=', `search?q=${'x'.repeat(2000)}`, 'search?q=a&limit=0', `search?q=a&limit=${SEARCH_PAGE + 1}`, 'search?q=a&limit=x', `search?q=a&cursor=${'c'.repeat(3000)}`]) {
      assert.equal((await get(s, bad)).status, 400, bad);
    }
    assert.equal((await get(s, 'search?q=a&q=b')).status, 400, 'a repeated parameter');
    assert.equal((await get(s, 'search?q=blob')).status, 200);
  } finally {
    await s.stop();
  }
});
