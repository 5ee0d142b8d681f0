// Damaged and missing stored bytes, as a bad disk or an attacker would leave them: nothing
// damaged is ever served, a new version never inherits damage, one damaged object affects only
// what holds it, and `check` finds every problem, naming the file and version.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { Store } from '../src/store/store.ts';
import { Repo } from '../src/store/repo.ts';
import type { Backend } from '../src/store/backend.ts';
import { runCheck } from '../src/store/check.ts';
import { unreferenced } from '../src/store/gc.ts';
import { localBackend } from '../src/store/local.ts';
import { bannerOf } from '../../harness/child.ts';
import { download } from '../../harness/trials.ts';
import { indexKey, segmentKey } from '../src/store/keys.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { indexIdOf } from './store-helpers.ts';

async function serve(data: string) {
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: data }, {}));
  return { ...s, wsUrl: s.url.replace('http', 'ws') + '/sync', store: await s.storeOf('local') };
}

/** A download's outcome: status and body, or the error reading the body ended with. */
async function tryDownload(url: string, name: string, version?: number) {
  const res = await fetch(`${url}/api/download?name=${encodeURIComponent(name)}${version ? `&version=${version}` : ''}`);
  try {
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
  } catch (e) {
    return { status: res.status, cut: (e as Error).message };
  }
}

function flip(file: string, at: number) {
  const b = readFileSync(file);
  b[at] ^= 0x5a;
  writeFileSync(file, b);
}

test('a flipped byte in a segment: never served (REST, pull), not inherited by a new version, found by check --read-data', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-damage-'));
  let s = await serve(data);
  try {
    const v1 = fastRandomBytes(1, 3_000_000);
    const v2 = applyEdits(v1, new Rng(1), { kind: 'insert', total: 2000 });
    await pushBytes(s, 'big.bin', v1);
    await pushBytes(s, 'big.bin', v2);
    const seg = (await s.store.readVersion('big.bin', 1)).layout.segments[0];
    await s.close();
    // one byte early in the file (inside the first piece a download reads) and one late
    flip(path.join(data, segmentKey(seg)), 100);
    flip(path.join(data, segmentKey(seg)), 2_500_000);
    s = await serve(data);
    for (const v of [1, 2]) {
      const d = await tryDownload(s.url, 'big.bin', v);
      assert.equal(d.status, 500, `version ${v}: ${JSON.stringify(d)}`);
    }
    const msg = (await (await fetch(`${s.url}/api/download?name=big.bin&version=2`)).json()) as { error: string };
    assert.match(msg.error, /damaged store: big\.bin version 2, chunk 0/);
    // a pull is refused with the same clear error, and the server lives on
    await assert.rejects(pullBytes(s, 'big.bin', null), (e) => e instanceof RemoteError && /damaged store: big\.bin version 2/.test(e.message));
    assert.equal((await fetch(`${s.url}/api/health`)).status, 200);
    // a push of an edit: the damaged latest version is no basis, so the client sends every
    // byte and a good version is stored, referencing none of the damaged bytes
    const v3 = applyEdits(v2, new Rng(2), { kind: 'cut', total: 1000 });
    const rep = await pushBytes(s, 'big.bin', v3);
    assert.equal(rep.version, 3);
    assert.ok(rep.literalBytes >= v3.length - 1000, `sent without a basis: ${rep.literalBytes}`);
    assert.ok((await pullBytes(s, 'big.bin', null)).bytes.equals(v3));
    assert.ok(!(await s.store.readVersion('big.bin', 3)).layout.segments.includes(seg));
    // check finds the damage with --read-data only, naming both damaged versions
    assert.deepEqual((await runCheck(s.repo)).errors, []);
    const full = await runCheck(s.repo, { readData: true });
    assert.equal(full.errors.length, 2, full.errors.join('\n'));
    assert.match(full.errors[0], /big\.bin version 1 .*chunk 0 /);
    assert.match(full.errors[1], /big\.bin version 2 .*chunk 0 /);
    // a late flip only: headers are out when it is found, and the response is cut off
    await s.close();
    flip(path.join(data, segmentKey(seg)), 100); // undo the early one
    s = await serve(data);
    const late = await tryDownload(s.url, 'big.bin', 1);
    assert.equal(late.status, 200);
    assert.ok(late.cut || late.body!.length < v1.length, 'the damaged download does not complete');
    assert.equal((await fetch(`${s.url}/api/health`)).status, 200);
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});

test('a truncated segment and a missing one: a clear error, the server lives on; check names them', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-damage-'));
  let s = await serve(data);
  try {
    await pushBytes(s, 'a.bin', fastRandomBytes(2, 3_000_000));
    await pushBytes(s, 'b.bin', fastRandomBytes(3, 100_000));
    const segA = (await s.store.readVersion('a.bin', 1)).layout.segments[0];
    const segB = (await s.store.readVersion('b.bin', 1)).layout.segments[0];
    await s.close();
    truncateSync(path.join(data, segmentKey(segA)), 2_000_000);
    rmSync(path.join(data, segmentKey(segB)));
    s = await serve(data);
    const a = await tryDownload(s.url, 'a.bin');
    assert.ok(a.status === 200 && (a.cut || a.body!.length < 3_000_000), JSON.stringify(a.status));
    const b = await fetch(`${s.url}/api/download?name=b.bin`);
    assert.equal(b.status, 500);
    assert.match(((await b.json()) as { error: string }).error, /damaged store: b\.bin version 1, segment .* is missing/);
    for (let k = 0; k < 5; k++) assert.equal((await fetch(`${s.url}/api/health`)).status, 200);
    const report = await runCheck(s.repo);
    assert.equal(report.errors.length, 2, report.errors.join('\n'));
    assert.ok(report.errors.some((e) => /a\.bin version 1 .*is 2000000 bytes, its layout needs 3000000/.test(e)));
    assert.ok(report.errors.some((e) => /b\.bin version 1 .*missing/.test(e)));
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});

test('a damaged index breaks only its own version: listing, unrelated pushes and similarity go on', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-damage-'));
  let s = await serve(data);
  try {
    const x = fastRandomBytes(4, 500_000);
    await pushBytes(s, 'x.bin', x);
    await pushBytes(s, 'y.bin', fastRandomBytes(5, 500_000));
    const id = await indexIdOf(s.store, 'x.bin', 1);
    await s.close();
    flip(path.join(data, indexKey(id)), 50);
    s = await serve(data);
    const { files } = (await (await fetch(`${s.url}/api/files`)).json()) as { files: { name: string }[] };
    assert.deepEqual(files.map((f) => f.name), ['x.bin', 'y.bin']);
    const d = await fetch(`${s.url}/api/download?name=x.bin`);
    assert.equal(d.status, 500);
    assert.match(((await d.json()) as { error: string }).error, /damaged store: x\.bin version 1: its index .* does not match its hash/);
    // a new name (the similarity search reads every latest index) still syncs
    const z = applyEdits(fastRandomBytes(5, 500_000), new Rng(6), { kind: 'insert', total: 1000 });
    const rep = await pushBytes(s, 'z.bin', z);
    assert.equal(rep.version, 1);
    assert.ok(rep.literalBytes < 100_000, `z.bin synced as a delta of y.bin: ${rep.literalBytes}`);
    // x.bin itself can be pushed anew (no basis read)
    assert.equal((await pushBytes(s, 'x.bin', x)).version, 2);
    const report = await runCheck(s.repo);
    assert.equal(report.errors.length, 1, report.errors.join('\n'));
    assert.match(report.errors[0], /x\.bin version 1/);
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});

test('a full disk mid-upload: the session ends at once with a clear error, nothing is left behind', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-full-'));
  // the real local directory, whose writes fail with ENOSPC once `room` bytes were put
  const real = localBackend(data);
  let room = Infinity;
  const full: Backend = {
    ...real,
    async putIfAbsent(key, body) {
      if (body.length > room) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      room -= body.length;
      return real.putIfAbsent(key, body);
    },
  };
  const repo = new Repo(full);
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: data }, {}), () => {}, repo);
  const srv = { ...s, wsUrl: s.url.replace('http', 'ws') + '/sync' };
  try {
    const a = fastRandomBytes(7, 1_000_000);
    await pushBytes(srv, 'kept.bin', a);
    room = 12 << 20; // one 8 MiB segment fits, the second does not
    const t0 = performance.now();
    await assert.rejects(pushBytes(srv, 'big.bin', fastRandomBytes(8, 30_000_000)), (e) => e instanceof RemoteError && /the server's disk is full \(ENOSPC: no space left on device, write\); nothing was stored/.test(e.message));
    // an error, not a hang: generous for a loaded machine
    assert.ok(performance.now() - t0 < 120_000);
    assert.deepEqual(await unreferenced(repo), [], 'the segment written before the disk filled is removed');
    assert.deepEqual(await new Store(repo, 'local').versionNumbers('big.bin'), []);
    room = Infinity;
    assert.ok((await download(s.url, 'kept.bin')).equals(a));
    assert.equal((await pushBytes(srv, 'big.bin', fastRandomBytes(9, 100_000))).version, 1);
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});

test('reads hold no segment open: 12 concurrent downloads of a fragmented version under a 100-descriptor limit', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-fds-'));
  // the server in a child process whose descriptor limit is 100 (the shell sets it, then execs);
  // --max-load 0: a loaded machine's admission would answer some of the 12 downloads busy (503)
  const root = new URL('../..', import.meta.url).pathname;
  const child = spawn('sh', ['-c', `ulimit -n 100 && exec "${process.execPath}" "${root}bin/dsync.mjs" serve --port 0 --host 127.0.0.1 --max-load 0 --store "${data}"`], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const [, url] = await bannerOf(child);
    const s = { url, wsUrl: url.replace('http', 'ws') + '/sync' };
    // 100 small scattered edits: the latest version references dozens of segments
    const r = new Rng(12);
    let cur = fastRandomBytes(12, 2_000_000);
    await pushBytes(s, 'frag.bin', cur);
    for (let k = 0; k < 100; k++) {
      cur = applyEdits(cur, r, { kind: 'insert', total: 64, maxFragment: 64 });
      await pushBytes(s, 'frag.bin', cur);
    }
    const downloads = await Promise.all(Array.from({ length: 12 }, () => tryDownload(url, 'frag.bin')));
    for (const d of downloads) {
      assert.equal(d.status, 200);
      assert.ok(d.body?.equals(cur), `a download ended ${d.cut ?? `with ${d.body?.length} bytes`}`);
    }
    const store = new Store(new Repo(localBackend(data)), 'local');
    const segs = (await store.readVersion('frag.bin', await store.latest('frag.bin'))).layout.segments.length;
    assert.ok(segs > 30, `the version references ${segs} segments`);
  } finally {
    child.kill('SIGKILL');
    rmSync(data, { recursive: true, force: true });
  }
});

test('gc goes on past a damaged index and keeps everything else', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-damage-'));
  let s = await serve(data);
  try {
    const keep = fastRandomBytes(20, 400_000);
    await pushBytes(s, 'bad.bin', fastRandomBytes(21, 400_000));
    await pushBytes(s, 'keep.bin', keep);
    await pushBytes(s, 'gone.bin', fastRandomBytes(22, 400_000));
    const id = await indexIdOf(s.store, 'bad.bin', 1);
    await s.store.remove('gone.bin');
    await s.close();
    flip(path.join(data, indexKey(id)), 60);
    s = await serve(data);
    const { runGc } = await import('../src/store/gc.ts');
    const report = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.equal(report.skipped, undefined, JSON.stringify(report));
    // gone.bin's segment and index; bad.bin's segment, which no readable index names
    assert.equal(report.deleted, 3, JSON.stringify(report));
    assert.ok((await download(s.url, 'keep.bin')).equals(keep));
  } finally {
    await s.close();
    rmSync(data, { recursive: true, force: true });
  }
});
