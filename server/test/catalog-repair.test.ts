// A commit is listed or repaired at once (issue 44): a server process killed between a file
// head's swap and its folder catalog's note (DSYNC_TEST_DIE_BEFORE_CATALOG: the process SIGKILLs
// itself right there) leaves a file no listing shows. `dsync check` names it; a server that
// starts notes it from the head change's mark (store/journal.ts), and a push that meets
// "exists" for a name its listing lacks notes it at once; a second device then syncs the file.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { type Child, startServe } from '../../harness/child.ts';
import { dsync } from '../../cli/test/run.ts';

const FILE = 'x.txt';
/** its name on the server: the synced folder's name, then the file's */
const NAME = `proj/${FILE}`;

interface World {
  store: string;
  root: string;
  dev(i: number): { dir: string; sync(url: string): ReturnType<typeof dsync> };
  done(): void;
}

function world(): World {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-catalog-repair-'));
  const store = path.join(root, 'store');
  mkdirSync(store);
  return {
    store,
    root,
    dev(i) {
      const dir = path.join(root, `dev${i}`, 'proj');
      mkdirSync(dir, { recursive: true });
      const env = { DSYNC_CACHE_DIR: path.join(root, `dev${i}`, 'cache') };
      return { dir, sync: (url: string) => dsync(['sync', dir, '--device', `dev${i}`, '--server', url, '--json'], { env }) };
    },
    done: () => rmSync(root, { recursive: true, force: true }),
  };
}

/** A server on `store` that SIGKILLs itself between the head swap of NAME and its catalog's note. */
async function dying(store: string): Promise<Child> {
  return startServe(['--store', store], { env: { ...process.env, DSYNC_TEST_DIE_BEFORE_CATALOG: NAME } });
}

const exited = (c: Child) => new Promise<void>((r) => (c.child.exitCode !== null || c.child.signalCode !== null ? r() : c.child.once('exit', () => r())));

/** A first push of FILE through a server that dies before its catalog notes it. */
async function unlistedCommit(w: World, body: string) {
  const a = w.dev(0);
  writeFileSync(path.join(a.dir, FILE), body);
  const s = await dying(w.store);
  const r = await a.sync(s.url);
  await exited(s);
  assert.equal(s.child.signalCode, 'SIGKILL', 'the server died at the hook');
  assert.notEqual(r.code, 0, 'the pass that lost its server fails');
  // the head holds version 1, the catalog does not list it: check names it
  const check = await dsync(['check', '--store', w.store]);
  assert.equal(check.code, 1, check.stdout + check.stderr);
  assert.match(check.stdout, new RegExp(`${NAME}: the folder catalog lags its file head`));
  return a;
}

test('a server killed between a commit and its catalog: the next server to start lists the file, and a second device syncs it', { timeout: 300_000 }, async () => {
  const w = world();
  try {
    const a = await unlistedCommit(w, 'one\n');
    const s = await startServe(['--store', w.store]);
    try {
      // the second device gets the file from the listing the started server repaired
      const b = w.dev(1);
      const end = Date.now() + 60_000;
      for (;;) {
        const r = await b.sync(s.url);
        assert.equal(r.code, 0, r.stdout + r.stderr);
        if (existsSync(path.join(b.dir, FILE)) || Date.now() > end) break;
        await new Promise((res) => setTimeout(res, 200));
      }
      assert.equal(readFileSync(path.join(b.dir, FILE), 'utf8'), 'one\n');
      // the first device agrees (its upload's version is the one listed)
      const again = await a.sync(s.url);
      assert.equal(again.code, 0, again.stdout + again.stderr);
      const check = await dsync(['check', '--store', w.store]);
      assert.equal(check.code, 0, check.stdout + check.stderr);
    } finally {
      await s.kill();
    }
  } finally {
    w.done();
  }
});

test('a push that meets "exists" for a name its listing lacks repairs the catalog at once', { timeout: 300_000 }, async () => {
  const w = world();
  // a running server (started before the crash: its start-up pass found nothing to note)
  const s = await startServe(['--store', w.store]);
  try {
    const a = await unlistedCommit(w, 'two\n');
    // the mark is gone (a store written before marks, or a mark lost): only the refused push
    // can tell the listing lags
    rmSync(path.join(w.store, 'journal'), { recursive: true, force: true });
    // the first device's next pass uploads again and meets "exists (version 1)": the server
    // notes the head in the catalog, and the pass after it agrees
    const first = await a.sync(s.url);
    assert.match(first.stdout, /"op":"upload","path":"x.txt"/, 'the pass uploaded again');
    const check = await dsync(['check', '--store', w.store]);
    assert.equal(check.code, 0, `the refused push repaired the catalog: ${check.stdout}${check.stderr}`);
    const second = await a.sync(s.url);
    assert.equal(second.code, 0, second.stdout + second.stderr);
    const b = w.dev(1);
    const r = await b.sync(s.url);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(readFileSync(path.join(b.dir, FILE), 'utf8'), 'two\n');
  } finally {
    await s.kill();
    w.done();
  }
});
