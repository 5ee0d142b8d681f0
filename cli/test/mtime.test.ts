// Modification times travel with every version (docs/protocol.md §3 "Modification times"): a
// file pushed with its mtime is pulled and synced with it, as rsync -a keeps it, and the sync
// state's size + mtime check keeps sparing untouched files a read. The real CLI, a real server.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from './run.ts';

/** 2001-02-03 04:05:06.789 UTC: far from the download's time, with milliseconds. */
const WHEN = Date.UTC(2001, 1, 3, 4, 5, 6, 789);
const LATER = Date.UTC(2002, 3, 4, 5, 6, 7, 123);

const ok = (r: { code: number | null; stdout: string; stderr: string }) => {
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return jsonLines(r.stdout);
};
/** The pass summary of a `dsync sync` run. */
const passOf = (lines: any[]) => lines.find((x) => x.pass)!.pass;

test('a file pushed by device A with its mtime (2001-02-03) is synced and pulled by device B with it; B\'s next sync reads no file', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-mtime-'));
  const env = (dev: string) => ({ DSYNC_CACHE_DIR: path.join(root, dev, 'cache'), DSYNC_SERVER: s.url });
  const dirA = path.join(root, 'a', 'proj');
  const dirB = path.join(root, 'b', 'proj');
  try {
    mkdirSync(path.join(dirA, 'docs'), { recursive: true });
    mkdirSync(dirB, { recursive: true });
    writeFileSync(path.join(dirA, 'docs', 'old.txt'), 'written in 2001\n');
    utimesSync(path.join(dirA, 'docs', 'old.txt'), new Date(WHEN), new Date(WHEN));
    ok(await dsync(['sync', dirA, '--device', 'a'], { env: env('a') }));

    // the version keeps it beside its commit time; the listing and the history show it
    const versions = await (await fetch(`${s.url}/api/versions?name=${encodeURIComponent('proj/docs/old.txt')}`)).json();
    assert.equal(versions.length, 1);
    assert.equal(versions[0].modified, WHEN);
    assert.ok(Date.parse(versions[0].mtime) > WHEN, 'mtime stays the commit time');
    const listed = await (await fetch(`${s.url}/api/files?prefix=proj/docs/`)).json();
    assert.equal(listed.files.find((f: { name: string }) => f.name === 'proj/docs/old.txt').modified, WHEN);
    const tree = await (await fetch(`${s.url}/api/files?prefix=proj/&recursive=1`)).json();
    assert.equal(tree.files.find((f: { name: string }) => f.name === 'proj/docs/old.txt').modified, WHEN);

    // B syncs: the file carries A's time, not its download's
    const first = ok(await dsync(['sync', dirB, '--device', 'b'], { env: env('b') }));
    assert.ok(first.some((x) => x.op === 'download' && x.path === 'docs/old.txt'), JSON.stringify(first));
    assert.equal(statSync(path.join(dirB, 'docs', 'old.txt')).mtimeMs, WHEN);
    // the state recorded that stat: the next pass reads no file
    assert.equal(passOf(ok(await dsync(['sync', dirB, '--device', 'b'], { env: env('b') }))).hashed, 0);

    // `dsync pull FILE` and `dsync pull FOLDER/` set it too
    const out = path.join(root, 'pulled.txt');
    ok(await dsync(['pull', 'proj/docs/old.txt', '--out', out, '--json'], { env: env('c') }));
    assert.equal(statSync(out).mtimeMs, WHEN);
    const dir = path.join(root, 'pulled');
    ok(await dsync(['pull', 'proj/', '--out', dir, '--json'], { env: env('c') }));
    assert.equal(statSync(path.join(dir, 'docs', 'old.txt')).mtimeMs, WHEN);

    // A edits it: B gets the new time
    writeFileSync(path.join(dirA, 'docs', 'old.txt'), 'edited in 2002\n');
    utimesSync(path.join(dirA, 'docs', 'old.txt'), new Date(LATER), new Date(LATER));
    ok(await dsync(['sync', dirA, '--device', 'a'], { env: env('a') }));
    ok(await dsync(['sync', dirB, '--device', 'b'], { env: env('b') }));
    assert.equal(statSync(path.join(dirB, 'docs', 'old.txt')).mtimeMs, LATER);
    assert.equal(passOf(ok(await dsync(['sync', dirB, '--device', 'b'], { env: env('b') }))).hashed, 0);
  } finally {
    rmSync(root, { recursive: true, force: true });
    await s.stop();
  }
});

test('`dsync push` sends the file\'s mtime; pushing the same bytes with another mtime keeps the stored version as it is', async () => {
  const s = await testServer();
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-mtime-'));
  const env = { DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_SERVER: s.url };
  try {
    const file = path.join(root, 'report.txt');
    writeFileSync(file, 'the report\n');
    utimesSync(file, new Date(WHEN), new Date(WHEN));
    ok(await dsync(['push', file, '--name', 'report.txt', '--json'], { env }));
    const history = async () => (await fetch(`${s.url}/api/versions?name=report.txt`)).json();
    const [v1] = await history();
    assert.equal(v1.modified, WHEN);
    // touched, not changed: unchanged, the version (its time too) as it was
    utimesSync(file, new Date(LATER), new Date(LATER));
    const [again] = ok(await dsync(['push', file, '--name', 'report.txt', '--force', '--json'], { env }));
    assert.equal(again.unchanged, true, JSON.stringify(again));
    assert.deepEqual(await history(), [v1]);
  } finally {
    rmSync(root, { recursive: true, force: true });
    await s.stop();
  }
});
