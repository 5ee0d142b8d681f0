// Delete, move, restore and retention through the REST API of a real server; an unchanged push
// stores nothing; `dsync rm` plus gc returns the store to what the kept versions need.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Rng, applyEdits, fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { runCheck } from '../src/store/check.ts';
import { runGc, unreferenced } from '../src/store/gc.ts';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';
import { download, versionsOf } from '../../harness/trials.ts';
import { until } from '../../harness/wait.ts';

const api = (s: TestServer, method: string, path: string, body?: unknown) =>
  fetch(`${s.url}/api/${path}`, { method, headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined });
const q = encodeURIComponent;

async function storedBytes(s: TestServer) {
  let n = 0;
  for await (const e of s.repo.backend.list('data/')) n += e.size;
  for await (const e of s.repo.backend.list('index/')) n += e.size;
  return n;
}

test('delete a version or a file, move a file or a folder, restore a version: metadata only', async () => {
  const s = await testServer();
  try {
    const v1 = textBytes(1, 300_000);
    const v2 = applyEdits(v1, new Rng(1), { kind: 'insert', total: 500 });
    const v3 = applyEdits(v2, new Rng(2), { kind: 'cut', total: 500 });
    for (const v of [v1, v2, v3]) await pushBytes(s, 'docs/a.txt', v);
    await pushBytes(s, 'docs/sub/b.txt', textBytes(2, 1000));
    // delete version 2: 1 and 3 stay; numbers are never reused
    let res = await api(s, 'DELETE', `files?name=${q('docs/a.txt')}&version=2`);
    assert.deepEqual(await res.json(), { removed: [2] });
    assert.deepEqual(await versionsOf(s.url, 'docs/a.txt'), [1, 3]);
    assert.equal((await api(s, 'DELETE', `files?name=${q('docs/a.txt')}&version=2`)).status, 404);
    assert.equal((await api(s, 'GET', `download?name=${q('docs/a.txt')}&version=2`)).status, 404);
    // restore version 1 as a new version (4), without moving bytes
    const before = await storedBytes(s);
    res = await api(s, 'POST', 'files/restore', { name: 'docs/a.txt', version: 1 });
    assert.deepEqual(await res.json(), { version: 4 });
    assert.equal(await storedBytes(s), before);
    assert.ok((await download(s.url, 'docs/a.txt')).equals(v1));
    const versions = (await (await api(s, 'GET', `versions?name=${q('docs/a.txt')}`)).json()) as { version: number; change: number; size: number }[];
    assert.deepEqual(versions.map((v) => v.version), [1, 3, 4]);
    assert.equal(versions[2].change, 0);
    assert.equal(versions[0].change, v1.length);
    // a push after the deletion gets the next number, 5
    assert.equal((await pushBytes(s, 'docs/a.txt', v2)).version, 5);
    // move a file; a move onto an existing name is refused
    assert.equal((await api(s, 'POST', 'files/move', { from: 'docs/a.txt', to: 'docs/sub/b.txt' })).status, 409);
    res = await api(s, 'POST', 'files/move', { from: 'docs/a.txt', to: 'docs/c.txt' });
    assert.deepEqual(await res.json(), { moved: 1 });
    assert.deepEqual(await versionsOf(s.url, 'docs/a.txt'), []);
    assert.deepEqual(await versionsOf(s.url, 'docs/c.txt'), [1, 2, 3, 4]);
    assert.ok((await download(s.url, 'docs/c.txt', 2)).equals(v3));
    // move a folder
    res = await api(s, 'POST', 'files/move', { from: 'docs/', to: 'archive/2026/' });
    assert.deepEqual(await res.json(), { moved: 2 });
    const { files } = (await (await api(s, 'GET', 'files?recursive=1')).json()) as { files: { name: string; latest: number; versions: number }[] };
    assert.deepEqual(files.map((f) => [f.name, f.latest, f.versions]), [['archive/2026/c.txt', 4, 4], ['archive/2026/sub/b.txt', 1, 1]]);
    assert.ok((await download(s.url, 'archive/2026/c.txt')).equals(v2));
    // delete a whole file: gone from listings
    res = await api(s, 'DELETE', `files?name=${q('archive/2026/sub/b.txt')}`);
    assert.deepEqual(await res.json(), { removed: [1] });
    assert.deepEqual(((await (await api(s, 'GET', 'files?recursive=1')).json()) as { files: { name: string }[] }).files.map((f) => f.name), ['archive/2026/c.txt']);
    // bad requests
    assert.equal((await api(s, 'DELETE', 'files?name=..')).status, 400);
    assert.equal((await api(s, 'DELETE', `files?name=x&version=abc`)).status, 400);
    assert.equal((await api(s, 'POST', 'files/restore', { name: 'archive/2026/c.txt', version: 99 })).status, 404);
    assert.equal((await api(s, 'POST', 'files/move', { from: 'a/', to: 'b' })).status, 400);
  } finally {
    await s.stop();
  }
});

test('an unchanged push stores nothing; rm of every file plus gc leaves an empty store', async () => {
  const s = await testServer();
  try {
    const a = fastRandomBytes(3, 2_000_000);
    await pushBytes(s, 'a.bin', a);
    const b = applyEdits(a, new Rng(3), { kind: 'insert', total: 5000 });
    await pushBytes(s, 'a.bin', b);
    await pushBytes(s, 'copy.bin', applyEdits(a, new Rng(4), { kind: 'cut', total: 5000 }));
    const before = await storedBytes(s);
    const same = await pushBytes(s, 'a.bin', b);
    assert.equal(same.version, 2);
    assert.equal(await storedBytes(s), before);
    // version 1 of a.bin deleted: gc keeps what version 2 and copy.bin still reference
    await api(s, 'DELETE', `files?name=a.bin&version=1`);
    const r1 = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.equal(r1.deleted, 1, JSON.stringify(r1)); // version 1's index: its segment is shared
    assert.ok((await download(s.url, 'a.bin', 2)).equals(b));
    for (const name of ['a.bin', 'copy.bin']) assert.equal((await api(s, 'DELETE', `files?name=${name}`)).status, 200);
    const r2 = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.ok(r2.bytes > 2_000_000, JSON.stringify(r2));
    assert.equal(await storedBytes(s), 0);
    assert.deepEqual(await unreferenced(s.repo), []);
    // a gc with a minimum age keeps young objects
    await pushBytes(s, 'young.bin', a);
    await api(s, 'DELETE', `files?name=young.bin`);
    assert.equal((await runGc(s.repo, { minAgeMs: 60_000, windowMs: 10, repackPercent: 20 })).deleted, 0);
    assert.ok((await storedBytes(s)) > 0);
  } finally {
    await s.stop();
  }
});

test('retention: --keep-versions and --keep-days drop old versions at commit, never the latest', async () => {
  const s = await testServer({ 'keep-versions': '2' });
  try {
    let cur = textBytes(9, 50_000);
    for (let k = 0; k < 5; k++) {
      cur = applyEdits(cur, new Rng(k), { kind: 'insert', total: 100 });
      await pushBytes(s, 'r.txt', cur);
    }
    assert.deepEqual(await versionsOf(s.url, 'r.txt'), [4, 5]);
    assert.ok((await download(s.url, 'r.txt')).equals(cur));
    // a tighter setting applies at the next gc, to files no commit touched, and frees bytes
    await pushBytes(s, 'other.txt', textBytes(10, 50_000));
    await pushBytes(s, 'other.txt', textBytes(11, 50_000));
    s.repo.settings.keepVersions = 1;
    const report = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.equal(report.retired, 2, JSON.stringify(report));
    assert.ok(report.bytes > 50_000, JSON.stringify(report));
    assert.deepEqual(await versionsOf(s.url, 'r.txt'), [5]);
    assert.deepEqual(await versionsOf(s.url, 'other.txt'), [2]);
    assert.ok((await download(s.url, 'other.txt')).equals(textBytes(11, 50_000)));
  } finally {
    await s.stop();
  }
  const { applyRetention } = await import('../src/store/format.ts');
  const day = 86_400_000;
  const now = Date.parse('2026-01-10T00:00:00Z');
  const v = (version: number, daysAgo: number) => ({ version, index: '0'.repeat(64), size: 1, mtime: new Date(now - daysAgo * day).toISOString(), root: 'aa', algo: 3, change: 1 });
  const vs = [v(1, 9), v(2, 5), v(3, 1), v(4, 0.5)];
  assert.deepEqual(applyRetention(vs, { keepVersions: 0, keepDays: 2 }, now).map((x) => x.version), [3, 4]);
  assert.deepEqual(applyRetention([v(1, 9), v(2, 8)], { keepVersions: 0, keepDays: 2 }, now).map((x) => x.version), [2]);
  assert.deepEqual(applyRetention(vs, { keepVersions: 3, keepDays: 0 }, now).map((x) => x.version), [2, 3, 4]);
});

test('listing: one store read per page, paged by name, folders first-class; gc repairs a catalog a crash left behind', async () => {
  const s = await testServer();
  try {
    const store = await s.storeOf('local');
    const names = ['top.txt', 'a/1.txt', 'a/2.txt', 'a/3.txt', 'a/b/deep.txt', 'z/last.txt', 'p/__proto__', 'p/constructor', '__proto__/x'];
    for (const [i, n] of names.entries()) await pushBytes(s, n, textBytes(i + 1, 2000 + i));
    // count the backend's reads while listing
    const b = s.repo.backend;
    let reads = 0;
    const { getHead, get } = b;
    b.getHead = (k) => (reads++, getHead.call(b, k));
    b.get = (k, r) => (reads++, get.call(b, k, r));
    const page = async (query: string) => (await (await api(s, 'GET', `files?${query}`)).json()) as { files: { name: string; latest: number; size: number }[]; folders: string[]; next: string | null };
    let p = await page('');
    assert.equal(reads, 1);
    assert.deepEqual([p.files.map((f) => f.name), p.folders, p.next], [['top.txt'], ['__proto__/', 'a/', 'p/', 'z/'], null]);
    reads = 0;
    p = await page(`prefix=a/&limit=2`);
    assert.equal(reads, 1);
    assert.deepEqual([p.files.map((f) => f.name), p.folders, p.next], [['a/1.txt', 'a/2.txt'], [], 'a/2.txt']);
    p = await page(`prefix=a/&limit=2&cursor=${q(p.next!)}`);
    assert.deepEqual([p.files.map((f) => f.name), p.folders, p.next], [['a/3.txt'], ['a/b/'], null]);
    b.getHead = getHead;
    b.get = get;
    p = await page('recursive=1');
    assert.deepEqual(p.files.map((f) => f.name), ['__proto__/x', 'a/1.txt', 'a/2.txt', 'a/3.txt', 'a/b/deep.txt', 'p/__proto__', 'p/constructor', 'top.txt', 'z/last.txt']);
    assert.equal(p.files[7].size, 2000);
    assert.equal((await api(s, 'GET', 'files?prefix=a')).status, 400);
    // a new version and a delete show at once
    await pushBytes(s, 'a/2.txt', textBytes(9, 3000));
    await api(s, 'DELETE', `files?name=${q('a/1.txt')}`);
    p = await page('prefix=a/');
    assert.deepEqual(p.files.map((f) => [f.name, f.latest, f.size]), [['a/2.txt', 2, 3000], ['a/3.txt', 1, 2003]]);
    // a crash between a file head's swap and its catalog's: the listing lags until gc
    const { fileHeadKey } = await import('../src/store/keys.ts');
    const key = fileHeadKey('local', 'a/3.txt');
    const cur = (await b.getHead(key))!;
    const head = JSON.parse(Buffer.from(cur.body).toString());
    head.versions = [];
    head.seq++;
    await b.putHead(key, Buffer.from(JSON.stringify(head)), cur.tag);
    assert.deepEqual((await page('prefix=a/')).files.map((f) => f.name), ['a/2.txt', 'a/3.txt']);
    assert.deepEqual((await runCheck(s.repo)).errors, ['a/3.txt: the folder catalog lags its file head (gc repairs it)']);
    const report = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.deepEqual((await runCheck(s.repo)).errors, []);
    assert.ok(report.catalogsRepaired >= 1, JSON.stringify(report));
    assert.deepEqual((await page('prefix=a/')).files.map((f) => f.name), ['a/2.txt']);
    assert.deepEqual((await store.list()).map((f) => f.name), ['__proto__/x', 'a/2.txt', 'a/b/deep.txt', 'p/__proto__', 'p/constructor', 'top.txt', 'z/last.txt']);
  } finally {
    await s.stop();
  }
});

test('the server collects in the background (--gc-interval-ms)', async () => {
  const s = await testServer({ 'gc-interval-ms': '100', 'gc-min-age-ms': '0', 'gc-window-ms': '20' });
  try {
    await pushBytes(s, 'bg.bin', fastRandomBytes(30, 300_000));
    assert.ok((await storedBytes(s)) > 300_000);
    await api(s, 'DELETE', 'files?name=bg.bin');
    await until('the background collection', async () => (await storedBytes(s)) === 0, 120_000, 100);
  } finally {
    await s.stop();
  }
});

test('a version records the client that pushed it: the label from /sync?client=, printable and short, or none', async () => {
  const s = await testServer();
  try {
    const at = (label: string) => ({ wsUrl: `${s.wsUrl}${s.wsUrl.includes('?') ? '&' : '?'}client=${q(label)}` });
    await pushBytes(at('Chrome on Android'), 'c.txt', textBytes(3, 5000));
    await pushBytes(at('x'.repeat(65)), 'c.txt', textBytes(4, 5000));
    await pushBytes(at('bad\u0007label'), 'c.txt', textBytes(5, 5000));
    await pushBytes(at('  dsync on box  '), 'c.txt', textBytes(6, 5000));
    const versions = (await (await api(s, 'GET', `versions?name=c.txt`)).json()) as { version: number; client?: string }[];
    assert.deepEqual(
      versions.map((v) => v.client),
      ['Chrome on Android', undefined, undefined, 'dsync on box'],
    );
  } finally {
    await s.stop();
  }
});
