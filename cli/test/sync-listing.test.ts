// Listings that cost what changed (docs/sync.md "State", docs/protocol.md "Listing changes"):
// the real `dsync sync` against a real server behind a real counting proxy, which counts the
// file entries of every listing answer the server sent (GET /api/files, POST
// /api/files/changes). A run over an unchanged folder of 300 files in nested folders gets no
// file entry; a file another device changed on the server brings only its folder's entries;
// a kept listing tampered with in the state file is found out by the server's digest and the
// whole listing is read instead, so nothing is deleted. A pass that changes neither side (only
// agreements recorded) is the last.
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { forwardUpgrades, pushBytes, testServer, type TestServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';
import { NodeTree } from '../node-tree.ts';
import { HttpFolder } from '../http-folder.ts';
import { catalogKey } from '../../server/src/store/catalog.ts';
import { LIST_CURSOR_CHARS } from '../../shared/src/base/limits.ts';
import type { ListingKeep } from '../../shared/src/sync/remote.ts';

/** A proxy in front of `s` that forwards everything (the WebSocket upgrade as raw bytes) and
 *  counts the file entries of the listing answers it passes on (asked plain, to read them). */
async function countingProxy(s: TestServer) {
  const up = new URL(s.url);
  const seen = { files: 0, answers: 0, whole: 0, changes: 0 };
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const listing = url.pathname === '/api/files' || url.pathname === '/api/files/changes';
    const headers = { ...req.headers, host: up.host };
    if (listing) delete headers['accept-encoding'];
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (r) => {
      if (!listing) {
        res.writeHead(r.statusCode!, r.headers);
        return void r.pipe(res);
      }
      const parts: Buffer[] = [];
      r.on('data', (c) => parts.push(c));
      r.on('end', () => {
        const body = Buffer.concat(parts);
        if (r.statusCode === 200 && req.method === 'GET' && url.searchParams.get('recursive') === '1') {
          const page = JSON.parse(body.toString('utf8'));
          seen.answers++;
          seen.whole++;
          seen.files += page.files.length;
        } else if (r.statusCode === 200 && req.method === 'POST') {
          const a = JSON.parse(body.toString('utf8'));
          seen.answers++;
          seen.changes++;
          for (const c of a.changes ?? []) seen.files += c.files.length;
        }
        res.writeHead(r.statusCode!, { ...r.headers, 'content-length': String(body.length) });
        res.end(body);
      });
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  });
  forwardUpgrades(server, up);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    reset: () => Object.assign(seen, { files: 0, answers: 0, whole: 0, changes: 0 }),
    close: () => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }),
  };
}

test('dsync sync lists only what changed: nothing for an unchanged folder, one folder for one edit, the whole listing for a tampered kept one', { timeout: 600_000 }, async () => {
  const s = await testServer();
  const proxy = await countingProxy(s);
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-listing-'));
  const dir = path.join(root, 'proj');
  const cache = path.join(root, 'cache');
  const env = { DSYNC_CACHE_DIR: cache, DSYNC_SERVER: proxy.url, XDG_CONFIG_HOME: path.join(root, 'config') };
  const sync = async (what: string) => {
    const r = await dsync(['sync', dir, '--remote', 'proj', '--device', 'here', '--json'], { env });
    assert.equal(r.code, 0, `${what}: ${r.stdout}${r.stderr}`);
    const lines = jsonLines(r.stdout);
    return { actions: lines.filter((l) => l.op), pass: lines.find((l) => l.pass)?.pass };
  };
  try {
    // 300 files: 5 folders of 6 folders of 10 files
    const names: string[] = [];
    for (let a = 0; a < 5; a++) for (let b = 0; b < 6; b++) for (let c = 0; c < 10; c++) names.push(`d${a}/e${b}/f${c}.txt`);
    for (const n of names) {
      mkdirSync(path.dirname(path.join(dir, n)), { recursive: true });
      writeFileSync(path.join(dir, n), `file ${n}\n`);
    }
    const first = await sync('the first run');
    assert.equal(first.actions.filter((a) => a.op === 'upload').length, 300);

    // an unchanged folder: no file entry of any listing, one pass, and the state file left as
    // it was (not written again)
    const stateDir = path.join(cache, 'sync');
    const stateStat = () => {
      const [f, ...more] = readdirSync(stateDir).filter((n) => !n.endsWith('.lock'));
      assert.deepEqual(more, [], 'one state file, no temporary one');
      const st = statSync(path.join(stateDir, f), { bigint: true });
      return `${f} ${st.ino} ${st.mtimeNs}`;
    };
    const before = stateStat();
    proxy.reset();
    const still = await sync('an unchanged run');
    assert.deepEqual(still.actions, []);
    assert.equal(stateStat(), before, 'a run that changed nothing writes no state file');
    assert.equal(still.pass.passes, 1, 'a pass that changed nothing makes no second pass');
    assert.equal(proxy.seen.files, 0, `listed file entries of an unchanged folder: ${JSON.stringify(proxy.seen)}`);
    assert.equal(proxy.seen.whole, 0);

    // one file changed on the server by another device: only its folder's 10 entries come
    await pushBytes(s, 'proj/d3/e4/f7.txt', Buffer.from('changed elsewhere\n'), { expect: { version: 1 } });
    proxy.reset();
    const one = await sync('a run after an edit elsewhere');
    assert.deepEqual(one.actions.map((a) => `${a.op} ${a.path}`), ['download d3/e4/f7.txt']);
    assert.equal(readFileSync(path.join(dir, 'd3/e4/f7.txt'), 'utf8'), 'changed elsewhere\n');
    assert.equal(proxy.seen.whole, 0, JSON.stringify(proxy.seen));
    assert.equal(proxy.seen.files, 10, `only the changed folder's entries: ${JSON.stringify(proxy.seen)}`);
    assert.equal(one.pass.passes, 1, 'a pass whose download landed in an agreed folder is the last');

    // an edit here: one upload, and no pass after it; a file in a new folder: a second pass
    // records the folder (a pass of the state only)
    writeFileSync(path.join(dir, 'd1/e2/f3.txt'), 'edited here\n');
    const edited = await sync('a run after an edit here');
    assert.deepEqual(edited.actions.map((a) => `${a.op} ${a.path}`), ['upload d1/e2/f3.txt']);
    assert.equal(edited.pass.passes, 1, 'a pass whose upload landed in an agreed folder is the last');
    assert.equal(edited.pass.agreed, true);
    assert.equal((await s.stored('proj/d1/e2/f3.txt')).toString(), 'edited here\n');
    mkdirSync(path.join(dir, 'd9'));
    writeFileSync(path.join(dir, 'd9/new.txt'), 'in a new folder\n');
    const made = await sync('a run after a file in a new folder');
    assert.deepEqual(made.actions.map((a) => `${a.op} ${a.path}`), ['upload d9/new.txt']);
    assert.equal(made.pass.passes, 2, 'a second pass records the new folder');
    assert.ok(JSON.parse(readFileSync(path.join(stateDir, readdirSync(stateDir).find((n) => n.endsWith('.json'))!), 'utf8')).folders.includes('d9'), 'the new folder agreed');
    rmSync(path.join(dir, 'd9'), { recursive: true });
    assert.deepEqual((await sync('a run after the new folder deleted here')).actions.map((a) => `${a.op} ${a.path}`), ['deleteRemote d9/new.txt']);
    const listed = (await (await fetch(`${s.url}/api/files?prefix=proj/&recursive=1`)).json()) as { folders: string[] };
    assert.ok(!listed.folders.includes('proj/d9/'), 'the agreed folder deleted here is deleted on the server');

    // the kept listing tampered with in the state file: a file dropped from it (the server
    // would seem to have deleted it) and a version changed. The digest finds it out, the whole
    // listing is read, and nothing is deleted or downloaded
    const [stateFile] = readdirSync(path.join(cache, 'sync')).filter((f) => f.endsWith('.json'));
    const statePath = path.join(cache, 'sync', stateFile);
    const state = JSON.parse(readFileSync(statePath, 'utf8'));
    assert.ok(state.listing?.cursor, 'the listing is kept in the state');
    state.listing.files = state.listing.files.filter((f: { name: string }) => f.name !== 'proj/d0/e0/f0.txt');
    state.listing.files.find((f: { name: string }) => f.name === 'proj/d1/e1/f1.txt').latest = 7;
    writeFileSync(statePath, JSON.stringify(state));
    proxy.reset();
    const tampered = await sync('a run over a tampered kept listing');
    assert.deepEqual(tampered.actions, [], 'nothing done from a tampered listing');
    assert.ok(existsSync(path.join(dir, 'd0/e0/f0.txt')));
    assert.equal(proxy.seen.whole, 1, `the whole listing read: ${JSON.stringify(proxy.seen)}`);
    assert.equal(proxy.seen.files, 300);
    // and the state file is written again, with the listing as the server has it
    const mended = JSON.parse(readFileSync(statePath, 'utf8'));
    assert.ok(mended.listing.files.some((f: { name: string }) => f.name === 'proj/d0/e0/f0.txt'), 'the kept listing mended on disk');

    // a kept listing that does not read back whole: the whole listing, nothing deleted
    const bad = JSON.parse(readFileSync(statePath, 'utf8'));
    bad.listing.files = 'not a list';
    writeFileSync(statePath, JSON.stringify(bad));
    proxy.reset();
    assert.deepEqual((await sync('a run over a broken kept listing')).actions, []);
    assert.equal(proxy.seen.whole, 1, JSON.stringify(proxy.seen));

    // and once more unchanged: nothing listed again
    proxy.reset();
    assert.deepEqual((await sync('an unchanged run again')).actions, []);
    assert.equal(proxy.seen.files, 0, JSON.stringify(proxy.seen));

    // the state lost: every file is new on both sides and equal, so the pass only records
    // them; it changed neither side, so no second pass follows
    rmSync(statePath);
    proxy.reset();
    const fresh = await sync('a run without its state');
    assert.equal(fresh.actions.length, 300);
    assert.ok(fresh.actions.every((a) => a.op === 'record'), JSON.stringify(fresh.actions.filter((a) => a.op !== 'record')));
    assert.equal(fresh.pass.passes, 1, 'a pass that only recorded makes no second pass');
    assert.equal(fresh.pass.agreed, true);
    assert.equal(proxy.seen.answers, 1, JSON.stringify(proxy.seen));
    for (const n of names) assert.ok(existsSync(path.join(dir, n)), `${n} kept`);
    assert.equal((await s.stored('proj/d0/e0/f0.txt')).toString(), 'file d0/e0/f0.txt\n');
  } finally {
    await proxy.close();
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});

const post = (s: { url: string }, body: unknown) => fetch(`${s.url}/api/files/changes`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });

test('the listing rebuilt from changes is the whole listing: new, changed, deleted and kept folders, a folder gone; hostile cursors are refused; a store failure is a 503', { timeout: 300_000 }, async () => {
  const s = await testServer();
  const proxy = await countingProxy(s);
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-listing-'));
  const keep: ListingKeep = { listing: null };
  const folder = (o: { keep?: boolean } = {}) => {
    const f = new HttpFolder({ values: { server: proxy.url }, folder: 'proj', tree: new NodeTree(root), device: 'here' });
    if (o.keep) f.keepListing(keep);
    return f;
  };
  const kept = folder({ keep: true });
  /** the kept folder's listing (from changes) and a fresh one's (whole), which must be equal */
  const both = async () => {
    proxy.reset();
    const a = await kept.list();
    const viaChanges = { ...proxy.seen };
    const fresh = folder();
    const b = await fresh.list();
    fresh.close();
    assert.deepEqual([...a.files].sort(), [...b.files].sort());
    assert.deepEqual([...(a.folders ?? [])].sort(), [...(b.folders ?? [])].sort());
    return viaChanges;
  };
  const mkdir = (name: string) => fetch(`${s.url}/api/folders`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name }) });
  try {
    for (const n of ['proj/a.txt', 'proj/x/b.txt', 'proj/x/y/c.txt', 'proj/z/d.txt', 'other/e.txt']) await pushBytes(s, n, Buffer.from(n));
    assert.equal((await both()).whole, 1);
    assert.ok(keep.listing?.cursor, 'a listing is kept');
    // nothing changed: no entry
    assert.deepEqual(await both(), { files: 0, answers: 1, whole: 0, changes: 1 });
    // a file changed, one new in a new folder, a kept empty folder, a folder gone, and a change
    // outside the synced folder
    await pushBytes(s, 'proj/x/y/c.txt', Buffer.from('new c'), { expect: { version: 1 } });
    await pushBytes(s, 'proj/n/m/f.txt', Buffer.from('f'));
    assert.equal((await mkdir('proj/empty')).status, 200);
    assert.equal((await fetch(`${s.url}/api/files?name=proj/z/d.txt`, { method: 'DELETE' })).status, 200);
    await pushBytes(s, 'other/g.txt', Buffer.from('g'));
    const seen = await both();
    assert.equal(seen.whole, 0, JSON.stringify(seen));
    // proj/ (a.txt; folders n, empty, x; z gone), proj/x/y/ (c.txt), proj/n/m/ (f.txt)
    assert.equal(seen.files, 3, JSON.stringify(seen));
    const listed = await kept.list();
    assert.deepEqual([...listed.files.keys()].sort(), ['a.txt', 'n/m/f.txt', 'x/b.txt', 'x/y/c.txt']);
    assert.deepEqual([...listed.folders!].sort(), ['empty', 'n', 'n/m', 'x', 'x/y']);
    kept.close();

    // hostile cursors: refused with 400, never read as a listing
    const cursor = keep.listing!.cursor;
    for (const [why, body] of [
      ['no cursor', { prefix: 'proj/' }],
      ['a cursor that is not a string', { prefix: 'proj/', since: 12 }],
      ['not base64url', { prefix: 'proj/', since: 'ab+/==' }],
      ['a torn cursor', { prefix: 'proj/', since: cursor.slice(0, -3) }],
      ['a prefix that is no folder', { prefix: 'proj', since: cursor }],
      ['a prefix out of the namespace', { prefix: '../', since: cursor }],
      ['no JSON', '{"prefix": '],
    ] as const) assert.equal((await post(s, body)).status, 400, why);
    assert.equal((await post(s, { prefix: 'proj/', since: 'A'.repeat(LIST_CURSOR_CHARS + 1) })).status, 400, 'a cursor past the limit');
    assert.equal((await post(s, { prefix: 'proj/', since: 'A'.repeat(LIST_CURSOR_CHARS * 2) })).status, 413, 'a body past the limit');
    // a cursor of another folder, or of another version: a reset (the client lists whole)
    assert.deepEqual(await (await post(s, { prefix: 'other/', since: cursor })).json(), { reset: true });
    const other = Buffer.from(cursor, 'base64url');
    other[0] = 9;
    assert.deepEqual(await (await post(s, { prefix: 'proj/', since: other.toString('base64url') })).json(), { reset: true });
    const ok = (await (await post(s, { prefix: 'proj/', since: cursor })).json()) as { complete: boolean; changes: unknown[]; held: string[]; cursor?: string };
    assert.equal(ok.complete, true);
    assert.deepEqual(ok.changes, []);
    assert.equal(ok.cursor, undefined, 'nothing changed: the cursor sent is still the one');
    assert.deepEqual(ok.held, []);

    // a catalog that cannot be read: 503, as the whole listing (never a partial answer); one
    // changed since this process last read it (one unchanged is not read again)
    await pushBytes(s, 'proj/x/new.txt', Buffer.from('new'));
    const store = await s.storeOf('local');
    const key = catalogKey('local', 'proj/x');
    const backend = store.backend as { getHead: (k: string) => Promise<unknown> };
    const getHead = backend.getHead.bind(backend);
    backend.getHead = async (k: string) => {
      if (k === key) throw new Error('the disk is gone');
      return getHead(k);
    };
    try {
      const res = await post(s, { prefix: 'proj/', since: cursor });
      assert.equal(res.status, 503);
      assert.match(((await res.json()) as { error: string }).error, /^the store failed: .*the disk is gone/);
    } finally {
      backend.getHead = getHead;
    }
  } finally {
    await proxy.close();
    await s.stop();
    rmSync(root, { recursive: true, force: true });
  }
});
