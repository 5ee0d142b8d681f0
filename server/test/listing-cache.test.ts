// A changes request costs what changed (docs/store.md "Listing", docs/protocol.md "Listing
// changes"): two real `dsync serve` processes over one store directory. A changes request over
// an unchanged tree of 220 folders reads no folder catalog, while the whole listing before it
// read each (seen in the catalog files' access times: set back before a request, a read of the
// file moves it forward again, relatime; a listing of the catalogs stats them and reads none);
// and what the other server changes (a new version of the same size, twice in a row, a delete,
// a new folder) is in the next answer, which then equals the other server's whole listing.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { type Child, startChild } from '../../harness/child.ts';
import { pushBytes } from '../../harness/helpers.ts';
import type { ListingChanges, ListingPage } from '../../shared/src/wire/api.ts';

/** The files of every folder catalog's generations in the store directory `data`. */
const catalogFiles = (data: string) => {
  const dir = path.join(data, 'ns/local/folders');
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => /@h\/[0-9]+$/.test(f)).map((f) => path.join(dir, f));
};
const LONG_AGO = new Date('2001-01-01T00:00:00Z').getTime();
/** Sets the access time of every catalog file back to 2001 (its modification time as it is). */
const setBack = (files: string[]) => execFileSync('touch', ['-a', '-d', '2001-01-01T00:00:00Z', ...files]);
/** The catalog files read since `setBack`. */
const readSince = (files: string[]) => files.filter((f) => statSync(f).atimeMs > LONG_AGO + 1000);

const whole = async (c: Child): Promise<ListingPage> => {
  const r = await fetch(`${c.url}/api/files?prefix=proj/&recursive=1&limit=5000`);
  assert.equal(r.status, 200);
  const page = (await r.json()) as ListingPage;
  assert.equal(page.next, null);
  return page;
};
const changes = async (c: Child, since: string): Promise<ListingChanges> => {
  const r = await fetch(`${c.url}/api/files/changes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prefix: 'proj/', since }) });
  assert.equal(r.status, 200);
  const a = (await r.json()) as ListingChanges & { reset?: true };
  assert.ok(!a.reset, 'answered from the cursor');
  return a;
};

test('a changes request over an unchanged tree reads no catalog; what another server changed is in the next answer', { timeout: 600_000 }, async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-listing-cache-'));
  const a = await startChild(data);
  const b = await startChild(data);
  try {
    // through b: 200 kept folders in 20, and files in a few of them
    const mkdir = (name: string) => fetch(`${b.url}/api/folders`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name }) });
    const names: string[] = [];
    for (let i = 0; i < 20; i++) for (let j = 0; j < 10; j++) names.push(`proj/d${i}/e${j}`);
    for (let k = 0; k < names.length; k += 8) for (const r of await Promise.all(names.slice(k, k + 8).map(mkdir))) assert.equal(r.status, 200);
    for (const f of ['proj/d3/e4/f.txt', 'proj/d3/e4/g.txt', 'proj/d7/h.txt', 'proj/top.txt']) await pushBytes(b, f, Buffer.from(`${f} 1\n`));
    const catalogs = 1 + 20 + 200;

    // the whole listing through a reads every catalog (the measure sees reads)
    let files = catalogFiles(data);
    assert.equal(files.length, catalogs + 1, 'a catalog file each, the top one too');
    setBack(files);
    assert.deepEqual(readSince(files), []);
    const first = await whole(a);
    assert.equal(first.folders.length, 220);
    assert.equal(readSince(files).length, catalogs, 'the first whole listing read every catalog under proj/');
    let cursor = first.cursor!;
    assert.ok(cursor);

    // nothing changed: no entry, and no catalog read (twice)
    for (let k = 0; k < 2; k++) {
      setBack(files);
      const same = await changes(a, cursor);
      assert.deepEqual(same.changes, []);
      assert.equal(same.cursor, undefined, 'the cursor holds');
      assert.equal(same.digest, first.digest);
      assert.deepEqual(readSince(files), [], "an unchanged tree's changes request read no catalog");
    }

    // changes through b: a new version of the same size (its catalog's size likely the same),
    // a delete, a new folder; a answers with exactly those folders, and its answer is b's listing
    const expectChanges = async (want: string[], what: string) => {
      const got = await changes(a, cursor);
      assert.deepEqual(got.changes.map((c) => c.folder).sort(), want, what);
      const fresh = await whole(b);
      assert.equal(got.digest, fresh.digest, `${what}: a's answer is the whole listing now`);
      assert.ok(got.cursor, what);
      cursor = got.cursor!;
      return got;
    };
    assert.equal((await pushBytes(b, 'proj/d3/e4/f.txt', Buffer.from('proj/d3/e4/f.txt 2\n'), { expect: { version: 1 } })).version, 2);
    let got = await expectChanges(['proj/d3/e4/'], 'a new version through b');
    assert.equal(got.changes[0].files.find((f) => f.name === 'proj/d3/e4/f.txt')?.latest, 2);
    // again at once, the same size: a sees version 3
    assert.equal((await pushBytes(b, 'proj/d3/e4/f.txt', Buffer.from('proj/d3/e4/f.txt 3\n'), { expect: { version: 2 } })).version, 3);
    got = await expectChanges(['proj/d3/e4/'], 'another new version of the same size through b');
    assert.equal(got.changes[0].files.find((f) => f.name === 'proj/d3/e4/f.txt')?.latest, 3);
    assert.equal((await fetch(`${b.url}/api/files?name=proj/d7/h.txt`, { method: 'DELETE' })).status, 200);
    assert.equal((await mkdir('proj/d9/new')).status, 200);
    got = await expectChanges(['proj/d7/', 'proj/d9/', 'proj/d9/new/'], 'a delete and a new folder through b');
    assert.deepEqual(got.changes.find((c) => c.folder === 'proj/d7/')!.files, []);
    assert.ok(got.changes.find((c) => c.folder === 'proj/d9/')!.folders.includes('proj/d9/new/'));
    // and unchanged again: nothing, and no catalog read (a read the changes of b already)
    files = catalogFiles(data);
    setBack(files);
    assert.deepEqual((await changes(a, cursor)).changes, []);
    assert.deepEqual(readSince(files), [], 'no catalog read');
  } finally {
    await a.kill();
    await b.kill();
    rmSync(data, { recursive: true, force: true });
  }
});
