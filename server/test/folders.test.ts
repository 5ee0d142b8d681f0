// Folder catalogs under concurrency (server/src/store/catalog.ts): two server processes' worth
// of stores (two servers on one data directory, each with its own cache of linked folders)
// delete the last file of a folder while others push files into it and its subfolders. After
// every round, a folder is listed exactly when a live file or a kept folder lies under it.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { pushBytes } from '../../harness/helpers.ts';
import { Rng } from '../../harness/testdata.ts';

test('emptied folders leave the listing, and a folder a file lands in meanwhile stays listed', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-folders-'));
  // admission by load off: both servers and their clients share this process' event loop, and
  // a busy refusal (503) of this test's bare fetches is not what it is about
  const servers = await Promise.all([0, 1].map(() => startServer(loadConfig({ port: '0', host: '127.0.0.1', data, 'max-load': '0' }, {}))));
  const ws = servers.map((s) => ({ wsUrl: s.url.replace('http', 'ws') + '/sync' }));
  const rng = new Rng(29);
  const live = new Set<string>();
  const pick = <T>(a: T[]) => a[rng.int(a.length)];

  const names = ['f/a', 'f/b', 'f/g/c', 'f/g/h/d', 'e/x'];
  const top = async (at: number): Promise<string[]> => (await (await fetch(`${servers[at].url}/api/files?prefix=`)).json()).folders;
  try {
    // one process linked f/ and remembers it; the other empties it; the first writes in it
    // again: f/ is listed again, whatever the first believed
    await pushBytes(ws[0], 'f/a', new TextEncoder().encode('1'));
    assert.deepEqual(await top(1), ['f/']);
    assert.equal((await fetch(`${servers[1].url}/api/files?name=f/a`, { method: 'DELETE' })).status, 200);
    assert.deepEqual(await top(0), []);
    await pushBytes(ws[0], 'f/b', new TextEncoder().encode('2'));
    assert.deepEqual(await top(1), ['f/']);
    assert.equal((await fetch(`${servers[1].url}/api/files?name=f/b`, { method: 'DELETE' })).status, 200);
    for (let round = 0; round < 40; round++) {
      const ops: Promise<unknown>[] = [];
      // four distinct names a round (a push racing a delete of its own name is another story)
      const round4 = [...names];
      for (let i = round4.length - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [round4[i], round4[j]] = [round4[j], round4[i]];
      }
      round4.length = 4;
      for (let k = 0; k < 4; k++) {
        const name = round4[k];
        const at = pick([0, 1]);
        if (live.has(name) && rng.int(10) < 6) {
          live.delete(name);
          ops.push(fetch(`${servers[at].url}/api/files?name=${name}`, { method: 'DELETE' }).then((r) => r.status === 200 || r.status === 404 || assert.fail(`delete ${r.status}`)));
        } else {
          live.add(name);
          ops.push(pushBytes(ws[at], name, new TextEncoder().encode(`${name} ${round} ${k}`)));
        }
      }
      await Promise.all(ops);
      // what is live now, as the heads say (a delete and a push of one name may have raced)
      const files: string[] = (await (await fetch(`${servers[0].url}/api/files?recursive=1`)).json()).files.map((f: { name: string }) => f.name);
      live.clear();
      for (const f of files) live.add(f);
      const want = new Set<string>();
      for (const f of files) for (let i = f.indexOf('/'); i > 0; i = f.indexOf('/', i + 1)) want.add(f.slice(0, i + 1));
      for (const s of servers) {
        const listed: string[] = (await (await fetch(`${s.url}/api/files?recursive=1`)).json()).folders;
        assert.deepEqual(listed.sort(), [...want].sort(), `round ${round}: folders listed`);
        // and one level at a time, as the page reads them
        const top: string[] = (await (await fetch(`${s.url}/api/files?prefix=`)).json()).folders;
        assert.deepEqual(top.sort(), [...want].filter((f) => f.indexOf('/') === f.length - 1).sort(), `round ${round}: top folders`);
      }
    }
  } finally {
    await Promise.all(servers.map((s) => s.close()));
    rmSync(data, { recursive: true, force: true });
  }
});

test('DELETE /api/folders?empty=1 removes an empty folder only, never a file, even one that lands after a listing', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-folders-'));
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', data }, {}));
  const ws = { wsUrl: s.url.replace('http', 'ws') + '/sync' };
  const top = async (): Promise<string[]> => (await (await fetch(`${s.url}/api/files?prefix=`)).json()).folders;
  const del = (q: string) => fetch(`${s.url}/api/folders?${q}`, { method: 'DELETE' });
  try {
    const made = await fetch(`${s.url}/api/folders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'k' }) });
    assert.equal(made.status, 200);
    assert.deepEqual(await top(), ['k/']);
    // a file lands in the folder after the sync engine saw it empty: its rmdir is refused and
    // the file keeps every version
    await pushBytes(ws, 'k/late.txt', new TextEncoder().encode('late'));
    const refused = await del('name=k&empty=1');
    assert.equal(refused.status, 409, await refused.text());
    const versions = await (await fetch(`${s.url}/api/versions?name=k/late.txt`)).json();
    assert.equal(versions.length, 1);
    assert.deepEqual(await top(), ['k/']);
    // empty: it goes
    assert.equal((await fetch(`${s.url}/api/files?name=k/late.txt`, { method: 'DELETE' })).status, 200);
    assert.equal((await del('name=k&empty=1')).status, 200);
    assert.deepEqual(await top(), []);
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});
