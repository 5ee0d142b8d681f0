// A listing is whole or it fails (docs/store.md §11): on a real server over a local directory,
// a folder catalog that cannot be read fails the listing, the recursive listing and the search
// with 503 "the store failed: …" (never a 200 without that folder); a damaged one is rebuilt
// from the file heads on the spot; names a tampered catalog holds that the server would refuse
// from a client are left out and logged. Every successful page carries "complete": true.
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';
import { catalogKey, parseCatalog } from '../src/store/catalog.ts';
import { encodeName } from '../src/store/keys.ts';

const get = (s: TestServer, q: string) => fetch(`${s.url}/api/${q}`);
const json = async (s: TestServer, q: string) => {
  const res = await get(s, q);
  assert.equal(res.status, 200, q);
  return (await res.json()) as { files: { name: string; latest: number }[]; folders: string[]; next: string | null; complete?: boolean };
};
const names = (l: { files: { name: string }[]; folders?: string[] }) => [...l.files.map((f) => f.name), ...(l.folders ?? [])].sort();

/** The file of the current generation of the catalog of `folder` in a local store under `data`
 *  (local.ts: a head is a directory `<key>@h` of numbered generations). */
function catalogFile(data: string, folder: string): string {
  const want = path.join('folders', encodeName(folder) + '@h');
  const find = (dir: string): string | null => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, d.name);
      if (!d.isDirectory()) continue;
      if (p.endsWith(want)) return p;
      const got = find(p);
      if (got) return got;
    }
    return null;
  };
  const dir = find(data);
  assert.ok(dir, `no catalog of ${folder || 'the top'} under ${data}`);
  const gens = readdirSync(dir).filter((f) => /^[1-9][0-9]*$/.test(f)).map(Number).sort((a, b) => b - a);
  return path.join(dir, String(gens[0]));
}

async function filled(s: TestServer) {
  for (const n of ['proj/a.txt', 'proj/b.txt', 'proj/c.txt', 'proj/sub/d.txt', 'proj/sub/e.txt', 'top.txt']) await pushBytes(s, n, Buffer.from(`bytes of ${n}`));
  // a kept (empty) folder under the subfolder: only its own catalog says it is there
  assert.equal((await fetch(`${s.url}/api/folders`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'proj/sub/kept' }) })).status, 200);
}

test('a catalog that cannot be read fails every listing and search that needs it (503); a damaged one is rebuilt from the heads', async () => {
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({}, (e) => logs.push(e));
  try {
    await filled(s);
    const whole = await json(s, 'files?prefix=proj/&recursive=1');
    assert.equal(whole.complete, true);
    assert.deepEqual(names(whole), ['proj/a.txt', 'proj/b.txt', 'proj/c.txt', 'proj/sub/', 'proj/sub/d.txt', 'proj/sub/e.txt', 'proj/sub/kept/']);
    assert.equal((await json(s, 'files?prefix=proj/')).complete, true);

    // unreadable: the catalog's current generation is a directory (chmod does not stop root)
    const file = catalogFile(s.data, 'proj/sub');
    rmSync(file);
    mkdirSync(file);
    for (const q of ['files?prefix=proj/&recursive=1', 'files?recursive=1', 'files?prefix=proj/sub/', 'search?q=e.txt', 'search?q=zzz']) {
      const res = await get(s, q);
      assert.equal(res.status, 503, q);
      assert.match(((await res.json()) as { error: string }).error, /^the store failed: .*EISDIR/, q);
    }
    assert.ok(logs.some((e) => e.error === 'http' && /the store failed/.test(String(e.message))), 'the failure is logged');
    // a folder whose own catalog reads still lists, whole
    assert.deepEqual(names(await json(s, 'files?prefix=proj/')), ['proj/a.txt', 'proj/b.txt', 'proj/c.txt', 'proj/sub/']);
    // nothing is lost: the file heads hold every version
    const store = await s.storeOf('local');
    for (const n of ['proj/sub/d.txt', 'proj/sub/e.txt']) assert.equal(await store.latest(n), 1);

    // damaged: garbage where the catalog was; the listing rebuilds it from the heads
    rmSync(file, { recursive: true });
    writeFileSync(file, '{"files": garbage');
    const again = await json(s, 'files?prefix=proj/&recursive=1');
    assert.equal(again.complete, true);
    assert.deepEqual(names(again), names(whole));
    assert.deepEqual(names(await json(s, 'search?q=e.txt')), ['proj/sub/e.txt']);
    // the rebuilt catalog is stored (a new generation), whole
    const key = catalogKey('local', 'proj/sub');
    const c = parseCatalog((await s.repo.backend.getHead(key))!.body, key);
    assert.deepEqual(Object.keys(c.files).sort(), ['d.txt', 'e.txt']);
    assert.deepEqual(Object.keys(c.folders), ['kept']);
    assert.ok(statSync(catalogFile(s.data, 'proj/sub')).size > 0);
  } finally {
    await s.stop();
  }
});

test('names a tampered catalog holds that the server would refuse are not listed, and the log says which', async () => {
  const logs: Record<string, unknown>[] = [];
  const s = await testServer({}, (e) => logs.push(e));
  try {
    await pushBytes(s, 'ok.txt', Buffer.from('fine'));
    await pushBytes(s, 'a/inner.txt', Buffer.from('fine too'));
    // written into the store directly, as a damaged or hand-edited store would hold them
    const key = catalogKey('local', '');
    const got = (await s.repo.backend.getHead(key))!;
    const c = JSON.parse(Buffer.from(got.body).toString('utf8'));
    const entry = c.files['ok.txt'];
    const bad = ['../x', 'a/../../x', 'nul\u0000name', '/etc/x', 'back\\slash', 'CON'];
    for (const n of bad) c.files[n] = { ...entry };
    c.folders['..'] = 1;
    c.folders['b/../..'] = 1;
    assert.ok(await s.repo.backend.putHead(key, Buffer.from(JSON.stringify(c)), got.tag));

    for (const q of ['files?recursive=1', 'files?prefix=', 'search?q=x']) {
      logs.length = 0;
      const l = await json(s, q);
      for (const n of [...l.files.map((f) => f.name), ...(l.folders ?? [])]) assert.ok(!n.includes('..') && !n.includes('\0') && !n.includes('\\') && !n.startsWith('/') && n !== 'CON', `${q} listed ${JSON.stringify(n)}`);
      const warned = logs.filter((e) => e.warning === 'stored names refused');
      assert.equal(warned.length, 1, `${q}: one log line per request: ${JSON.stringify(logs)}`);
      const folders = warned[0].folders as Record<string, string[]>;
      assert.deepEqual(Object.keys(folders), ['']);
      assert.deepEqual(new Set(folders['']), new Set([...bad, '..', 'b/../..']));
    }
    assert.deepEqual(names(await json(s, 'files?recursive=1')), ['a/', 'a/inner.txt', 'ok.txt']);
  } finally {
    await s.stop();
  }
});
