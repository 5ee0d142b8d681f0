// Many small commits at once (docs/store.md §4, "Commits at once"): a `dsync sync` pass of 1 000
// small files through a real server over a real local-directory store, counted at the store (a
// counting Backend around the real one) and at the server's WebSocket upgrades. The pass opens
// at most SYNC_TRANSFERS connections (small files of both compression modes share them; the
// server's load limit is off, so that no session is refused as busy, which ends its connection).
// How many of the pass's commits meet at once depends on timing, so their counts are printed;
// head changes that start in one turn are one group: one journal mark, one catalog swap per
// folder. Every file reads back byte-exact and `dsync check --read-data` finds nothing wrong.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { SYNC_TRANSFERS } from '../../shared/src/base/limits.ts';
import { loadConfig } from '../../server/src/config.ts';
import { startServer } from '../../server/src/server.ts';
import type { Backend } from '../../server/src/store/backend.ts';
import { JOURNAL_PREFIX } from '../../server/src/store/journal.ts';
import { changeHead } from '../../server/src/store/commit.ts';
import { localBackend } from '../../server/src/store/local.ts';
import { Repo } from '../../server/src/store/repo.ts';
import { dsync, expectCheckClean } from './run.ts';

const FILES = 1000;
const FOLDERS = 4;

/** The real local backend, counting journal marks written and folder catalog swaps landed. */
function counting(inner: Backend) {
  const counts = { marks: 0, catalogSwaps: 0 };
  const b: Backend = Object.create(inner);
  b.putIfAbsent = async (key, body, stamped) => {
    const made = await inner.putIfAbsent(key, body, stamped);
    if (made && key.startsWith(JOURNAL_PREFIX)) counts.marks++;
    return made;
  };
  b.putHead = async (key, body, tag) => {
    const t = await inner.putHead(key, body, tag);
    if (t !== null && /^ns\/[^/]+\/folders\//.test(key)) counts.catalogSwaps++;
    return t;
  };
  return { backend: b, counts };
}

test('a pass of 1 000 small files opens at most SYNC_TRANSFERS connections and shares its commits', async () => {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-group-commit-'));
  const data = path.join(root, 'store');
  const { backend, counts } = counting(localBackend(data));
  let upgrades = 0;
  const repo = new Repo(backend);
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: data, 'max-load': '0' }, {}), () => {}, repo, (server: http.Server) => {
    server.prependListener('upgrade', () => upgrades++);
    return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok((server.address() as AddressInfo).port)));
  });
  try {
    const dir = path.join(root, 'proj');
    const want = new Map<string, Buffer>();
    let seed = 45;
    const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (let i = 0; i < FILES; i++) {
      const name = `d${i % FOLDERS}/f${String(i).padStart(4, '0')}.bin`;
      const b = Buffer.alloc(2048 + Math.floor(rnd() * 10240));
      for (let k = 0; k < b.length; k++) b[k] = (rnd() * 256) | 0;
      mkdirSync(path.join(dir, path.dirname(name)), { recursive: true });
      writeFileSync(path.join(dir, name), b);
      want.set(name, b);
    }
    const env = { DSYNC_CACHE_DIR: path.join(root, 'cache') };
    const r = await dsync(['sync', dir, '-s', s.url, '--remote', 'proj', '--json'], { env });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    console.log(`${FILES} files: ${upgrades} WebSocket upgrades, ${counts.marks} journal marks, ${counts.catalogSwaps} catalog swaps`);

    // (a) the pass reuses its connections: at most one per transfer at once
    assert.ok(upgrades <= SYNC_TRANSFERS, `${upgrades} WebSocket upgrades`);
    // (b) head changes that start in one turn form one group: one mark, one swap per folder
    const names = [...want.keys()].slice(0, 40);
    const before = { ...counts };
    await Promise.all(names.map((n) => changeHead(repo, 'local', `proj/${n}`, (h) => ({ head: { ...h!, seq: (h!.seq ?? 0) + 1 }, result: 0 }))));
    assert.equal(counts.marks - before.marks, 1, 'one journal mark for the group');
    assert.ok(counts.catalogSwaps - before.catalogSwaps <= FOLDERS, `${counts.catalogSwaps - before.catalogSwaps} catalog swaps for ${names.length} changes in ${FOLDERS} folders`);

    // every file reads back byte-exact, listed in its folder
    const store = await s.storeOf('local');
    const listed = new Map((await store.list('proj')).map((f) => [f.name, f]));
    assert.equal(listed.size, FILES);
    for (const [name, b] of want) {
      assert.equal(listed.get(`proj/${name}`)?.size, b.length, name);
      assert.ok((await store.bytes(`proj/${name}`, listed.get(`proj/${name}`)!.latest)).equals(b), name);
    }
    // and the local folder still holds them as written
    for (const [name, b] of want) assert.ok(readFileSync(path.join(dir, name)).equals(b), name);
  } finally {
    await s.close();
  }
  try {
    await expectCheckClean(data);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
