// Commits at once (docs/store.md §4 "Commits at once", §11): the head changes of one process
// run in groups sharing one journal mark, the confirming reads of gc/state and each folder's
// catalog swap. Here: a group's mark is read back by the pass over the marks (every name in
// it noted), hostile marks are refused, and many concurrent pushes through one server, some on
// the same names (compare-and-swap contention: a change that must try again leaves its group),
// all land, each listed at its head's state, with no mark left behind.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import test from 'node:test';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { catalogKey, readCatalog } from '../src/store/catalog.ts';
import { parseFileHead } from '../src/store/format.ts';
import { JOURNAL_PREFIX, MARK_GROUP_MAX, parseMark, repairMarked } from '../src/store/journal.ts';
import { fileHeadKey } from '../src/store/keys.ts';

/** Pushes until the push lands: one built on a version another push replaced meanwhile is
 *  refused (StaleBasis) and pushed again, as a client does. */
async function pushAgain(s: { wsUrl: string }, name: string, body: Buffer) {
  for (let k = 0; ; k++) {
    try {
      return await pushBytes(s, name, body);
    } catch (e) {
      if (k >= 50) throw e;
    }
  }
}

const enc = (x: unknown) => Buffer.from(JSON.stringify(x));

test('a mark names one file or a group of up to MARK_GROUP_MAX; anything else is not a mark', () => {
  assert.deepEqual(parseMark(enc({ user: 'local', name: 'a/b.txt' })), [{ user: 'local', name: 'a/b.txt' }]);
  const heads = Array.from({ length: MARK_GROUP_MAX }, (_, i) => ({ user: 'local', name: `d/f${i}` }));
  assert.deepEqual(parseMark(enc({ heads })), heads);
  assert.equal(parseMark(enc({ heads: [...heads, { user: 'local', name: 'one/more' }] })), null, 'too many names');
  assert.equal(parseMark(enc({ heads: [] })), null, 'no name');
  assert.equal(parseMark(enc({ heads: [{ user: 'local', name: '../up' }] })), null, 'a name no client could send');
  assert.equal(parseMark(enc({ heads: [{ user: 'local', name: 'ok' }, { user: 'local' }] })), null, 'one bad entry');
  assert.equal(parseMark(enc({ heads: 'x' })), null);
  assert.equal(parseMark(Buffer.from('{"heads":[')), null);
});

test('a group mark left by a crash: the pass over the marks notes every file it names', async () => {
  const s = await testServer();
  try {
    const names = ['g/a.txt', 'g/b.txt', 'h/c.txt'];
    for (const n of names) await pushBytes(s, n, randomBytes(3000));
    const b = s.repo.backend;
    // the catalogs lose the files (as a crash between the swaps and their notes would leave them)
    for (const f of ['g', 'h']) await b.delete(catalogKey('local', f));
    for (const f of ['g', 'h']) assert.equal(Object.keys((await readCatalog(b, 'local', f)).files).length, 0);
    assert.ok(await b.putIfAbsent(`${JOURNAL_PREFIX}${'ab'.repeat(16)}`, enc({ heads: names.map((name) => ({ user: 'local', name })) })));
    const report = await repairMarked(s.repo);
    assert.equal(report.noted, 3);
    for (const n of names) {
      const [folder, base] = n.split('/');
      const head = parseFileHead((await b.getHead(fileHeadKey('local', n)))!.body, n);
      assert.equal((await readCatalog(b, 'local', folder)).files[base]?.seq, head.seq, n);
    }
    assert.deepEqual((await (await s.storeOf('local')).list('')).map((f) => f.name).sort(), [...names].sort());
  } finally {
    await s.stop();
  }
});

test('many pushes at once through one server, some on one name: every version lands, each file listed at its head, no mark left', async () => {
  const s = await testServer();
  try {
    const bodies = new Map<string, Buffer[]>();
    const jobs: Promise<unknown>[] = [];
    // 24 files of their own in three folders, and 4 pushes each of 4 shared names, all at once
    for (let i = 0; i < 24; i++) {
      const name = `f${i % 3}/own${i}.bin`;
      const body = randomBytes(1000 + i * 97);
      bodies.set(name, [body]);
      jobs.push(pushBytes(s, name, body));
    }
    for (let k = 0; k < 4; k++) {
      for (let j = 0; j < 4; j++) {
        const name = `f${j % 3}/shared${j}.bin`;
        const body = randomBytes(2000 + k);
        bodies.set(name, [...(bodies.get(name) ?? []), body]);
        jobs.push(pushAgain(s, name, body));
      }
    }
    const results = await Promise.allSettled(jobs);
    for (const r of results) assert.equal(r.status, 'fulfilled', r.status === 'rejected' ? String(r.reason) : '');
    const store = await s.storeOf('local');
    const b = s.repo.backend;
    for (const [name, all] of bodies) {
      const head = parseFileHead((await b.getHead(fileHeadKey('local', name)))!.body, name);
      assert.equal(head.versions.length, all.length, name);
      // every pushed body is one of the versions, byte-exact
      const stored = await Promise.all(head.versions.map((v) => store.bytes(name, v.version)));
      for (const body of all) assert.ok(stored.some((x) => x.equals(body)), `${name}: a pushed body is missing`);
      const [folder, base] = name.split('/');
      const e = (await readCatalog(b, 'local', folder)).files[base];
      assert.equal(e?.seq, head.seq, `${name}: listed at its head`);
      assert.equal(e?.latest, head.versions.at(-1)!.version);
    }
    // the marks go once their groups are done (deleted in the background)
    for (let t = 0; ; t++) {
      const left: string[] = [];
      for await (const e of b.list(JOURNAL_PREFIX)) left.push(e.key);
      if (!left.length) break;
      assert.ok(t < 600, `marks left: ${left.join(', ')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await s.stop();
  }
});
