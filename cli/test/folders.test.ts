// Folders on the server: `dsync rm -r`, folders that go away when emptied (by a delete or a
// move), empty folders made on purpose (POST /api/folders), `dsync ls -R`, and `dsync pull
// FOLDER/ --out DIR` with each file a delta against the copy already in DIR. The real CLI
// against a real server on a loopback port.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';
import { textBytes } from '../../harness/testdata.ts';

async function setup() {
  const s = await testServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-folders-'));
  const env = { DSYNC_CACHE_DIR: path.join(dir, 'known') };
  const run = (...args: string[]) => dsync([...args, '--server', s.wsUrl], { env, cwd: dir });
  const write = (rel: string, b: string | Uint8Array) => {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), b);
  };
  const ls = async (...args: string[]) => {
    const r = await run('ls', ...args);
    assert.equal(r.code, 0, r.stderr);
    const names = jsonLines(r.stdout).map((x) => x.folder ?? x.name);
    // -R: in name order (one folder's listing: its folders first)
    return args.includes('-R') ? names.sort() : names;
  };
  const api = (method: string, p: string, body?: unknown) => fetch(`${s.url}${p}`, { method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body === undefined ? undefined : JSON.stringify(body) });
  return { s, dir, run, write, ls, api, done: async () => (await s.stop(), rmSync(dir, { recursive: true, force: true })) };
}

test('rm -r FOLDER/ deletes every file under it and the folder leaves the listing; folders emptied by a delete or a move go too', async () => {
  const t = await setup();
  try {
    t.write('proj/trash/a.txt', 'a');
    t.write('proj/trash/deep/b.txt', 'b');
    t.write('proj/keep.txt', 'k');
    t.write('proj/old/c.txt', 'c');
    t.write('proj/one/d.txt', 'd');
    assert.equal((await t.run('push', 'proj')).code, 0);
    assert.deepEqual(await t.ls('proj'), ['proj/old/', 'proj/one/', 'proj/trash/', 'proj/keep.txt']);
    // without -r a folder is refused with a hint, as rm does
    let r = await t.run('rm', 'proj/trash/');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /rm -r proj\/trash\//);
    r = await t.run('rm', '-r', 'proj/trash/');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(jsonLines(r.stdout)[0].removed.sort(), ['proj/trash/a.txt', 'proj/trash/deep/b.txt']);
    assert.deepEqual(await t.ls('proj'), ['proj/old/', 'proj/one/', 'proj/keep.txt']);
    // the last file of a folder deleted: the folder goes
    assert.equal((await t.run('rm', 'proj/old/c.txt')).code, 0);
    // a folder moved away: its old name goes
    assert.equal((await t.run('mv', 'proj/one/', 'proj/two/')).code, 0);
    assert.deepEqual(await t.ls('proj'), ['proj/two/', 'proj/keep.txt']);
    assert.deepEqual(await t.ls('-R'), ['proj/', 'proj/keep.txt', 'proj/two/', 'proj/two/d.txt']);
    // a file pushed into a folder that went away brings it back
    t.write('proj/trash/again.txt', 'again');
    assert.equal((await t.run('push', 'proj/trash/again.txt')).code, 0);
    assert.deepEqual(await t.ls('proj'), ['proj/trash/', 'proj/two/', 'proj/keep.txt']);
    // deleting everything leaves nothing listed
    assert.equal((await t.run('rm', '-r', 'proj')).code, 0);
    assert.deepEqual(await t.ls(), []);
    r = await t.run('rm', '-r', 'proj/');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no folder proj\//);
  } finally {
    await t.done();
  }
});

test('an empty folder made on purpose stays listed until deleted; ls -R lists it', async () => {
  const t = await setup();
  try {
    let res = await t.api('POST', '/api/folders', { name: 'a/empty/' });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { folder: 'a/empty/' });
    assert.deepEqual(await t.ls(), ['a/']);
    assert.deepEqual(await t.ls('-R'), ['a/', 'a/empty/']);
    // a file in it and out again: it stays, being kept
    t.write('a/empty/f.txt', 'f');
    assert.equal((await t.run('push', 'a/empty/f.txt')).code, 0);
    assert.equal((await t.run('rm', 'a/empty/f.txt')).code, 0);
    assert.deepEqual(await t.ls('-R'), ['a/', 'a/empty/']);
    // a file's name is no folder
    t.write('x.txt', 'x');
    assert.equal((await t.run('push', 'x.txt')).code, 0);
    assert.equal((await t.api('POST', '/api/folders', { name: 'x.txt' })).status, 409);
    assert.equal((await t.api('POST', '/api/folders', { name: 'bad//name' })).status, 400);
    res = await t.api('DELETE', '/api/folders?name=a/empty/');
    assert.equal(res.status, 200);
    assert.deepEqual(await t.ls('-R'), ['x.txt']);
  } finally {
    await t.done();
  }
});

test('pull FOLDER/ --out DIR: every file to its path, empty folders made, and files DIR holds come down as deltas against them', async () => {
  const t = await setup();
  try {
    const big = textBytes(7, 400_000);
    t.write('src/proj/big.txt', big);
    t.write('src/proj/docs/small.txt', 'small\n');
    assert.equal((await t.run('push', 'src/proj')).code, 0);
    assert.equal((await t.api('POST', '/api/folders', { name: 'src/proj/empty' })).status, 200);
    const out = path.join(t.dir, 'copy');
    // named without its '/', a folder is not taken for a missing file
    let r = await t.run('pull', 'src/proj', '--out', out);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /src\/proj is a folder: pull src\/proj\/ --out DIR/);
    r = await t.run('pull', 'src/proj/', '--out', out);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(readFileSync(path.join(out, 'big.txt')), Buffer.from(big));
    assert.equal(readFileSync(path.join(out, 'docs', 'small.txt'), 'utf8'), 'small\n');
    assert.ok(existsSync(path.join(out, 'empty')));
    // an edit on the server; the copy in DIR is the basis: only the changed part comes down
    big.set(textBytes(8, 2000), 200_000);
    t.write('src/proj/big.txt', big);
    assert.equal((await t.run('push', 'src/proj/big.txt')).code, 0);
    r = await t.run('pull', 'src/proj/', '--out', out);
    assert.equal(r.code, 1, 'existing files need --force');
    assert.match(r.stderr, /exists; --force replaces it/);
    r = await t.run('pull', 'src/proj/', '--out', out, '--force');
    assert.equal(r.code, 0, r.stderr);
    const reports = jsonLines(r.stdout);
    const bigReport = reports.find((x) => x.name === 'src/proj/big.txt');
    assert.ok(bigReport.literalBytes < 40_000 && bigReport.matchedBytes > 300_000, JSON.stringify(bigReport));
    assert.deepEqual(readFileSync(path.join(out, 'big.txt')), Buffer.from(big));
  } finally {
    await t.done();
  }
});
