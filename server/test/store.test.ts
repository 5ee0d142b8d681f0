// The store keeps what a version shares with its basis by reference: a small edit of a large
// file costs segments the size of the Delta Bytes, every version still reads back exactly; the
// name → key mapping is injective; the local backend's heads are compare-and-swap.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Rng, applyEdits, fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { open } from 'node:fs/promises';
import { decodeName, encodeName, fileHeadKey, newSegmentId, segmentFamily, segmentKey } from '../src/store/keys.ts';
import { VersionSource } from '../src/store/source.ts';
import { DamageError } from '../src/store/errors.ts';
import { hash_chunks } from '../../shared/src/chunking/wasm.ts';
import { runHash } from '../../shared/src/chunking/chunk-index.ts';
import { decodeVersion, encodeVersion } from '../src/store/format.ts';
import { localBackend } from '../src/store/local.ts';
import { createHash } from 'node:crypto';
import { download, versionsOf } from '../../harness/trials.ts';
import { type TestServer, pullBytes, pushBytes, testServer } from '../../harness/helpers.ts';

let server: TestServer;
before(async () => (server = await testServer()));
after(() => server.stop());

/** Bytes in every segment of the store. */
async function segmentBytes(s: TestServer) {
  let n = 0;
  for await (const e of s.repo.backend.list('data/')) n += e.size;
  return n;
}

/** A push's new segment bytes: its literal bytes, and of the basis bytes its refined chunks
 *  copied only the pieces too small to reference. */
function assertOwnBytes(grew: number, report: { literalBytes: number; refinedBytes: number }) {
  assert.ok(grew >= report.literalBytes && grew <= report.literalBytes + report.refinedBytes, `grew ${grew}, literal ${report.literalBytes}, refined ${report.refinedBytes}`);
  if (report.refinedBytes >= 4096) assert.ok(grew - report.literalBytes < report.refinedBytes / 2, `refined pieces stored as bytes: grew ${grew}, literal ${report.literalBytes}, refined ${report.refinedBytes}`);
}

test('a small edit of a large file stores only its Delta Bytes; every version reads back exactly', async () => {
  const r = new Rng(5);
  const versions = [fastRandomBytes(5, 8 << 20)];
  const store = await server.storeOf('local');
  await pushBytes(server, 'big.bin', versions[0]);
  assert.equal(await segmentBytes(server), 8 << 20);
  for (let k = 0; k < 6; k++) {
    const next = applyEdits(versions[versions.length - 1], r, { kind: (['cut', 'insert', 'inverse'] as const)[k % 3], total: 2048 });
    const before = await segmentBytes(server);
    const report = await pushBytes(server, 'big.bin', next);
    versions.push(next);
    const v = versions.length;
    assert.equal(report.version, v);
    // the new segment holds the bytes sent as Delta Bytes; what refined chunks copy from the
    // basis is referenced (but pieces under 256 bytes, stored as bytes)
    assert.ok(report.literalBytes > 0 && report.literalBytes < 1 << 20, `literal ${report.literalBytes}`);
    const grew = (await segmentBytes(server)) - before;
    assertOwnBytes(grew, report);
    assert.equal((await store.versions('big.bin'))[v - 1].change, grew);
  }
  // an identical re-push is unchanged: no new version, nothing stored
  const before = await segmentBytes(server);
  const same = await pushBytes(server, 'big.bin', versions[versions.length - 1]);
  assert.equal(same.version, versions.length);
  assert.equal(await segmentBytes(server), before);
  assert.deepEqual(await versionsOf(server.url, 'big.bin'), versions.map((_, i) => i + 1));
  for (let v = 1; v <= versions.length; v++) {
    assert.deepEqual(await server.stored('big.bin', v), Buffer.from(versions[v - 1]), `version ${v}`);
    assert.equal((await store.versions('big.bin'))[v - 1].size, versions[v - 1].length);
  }
  // the REST download and a delta pull read through the layout too
  assert.deepEqual(await download(server.url, 'big.bin', 4), Buffer.from(versions[3]));
  const { bytes } = await pullBytes(server, 'big.bin', versions[1]);
  assert.deepEqual(bytes, Buffer.from(versions[versions.length - 1]));
});

test('a copy under a new name references the other file\'s segments', async () => {
  const a = textBytes(8, 1 << 20);
  await pushBytes(server, 'orig.txt', a);
  const copy = applyEdits(a, new Rng(9), { kind: 'insert', total: 256 });
  const before = await segmentBytes(server);
  const report = await pushBytes(server, 'orig (copy).txt', copy);
  assert.ok(report.literalBytes < 64 << 10);
  assertOwnBytes((await segmentBytes(server)) - before, report);
  assert.deepEqual(await server.stored('orig (copy).txt'), Buffer.from(copy));
});

test('a commit starts from the file head its session read: when another commit landed since, it reads the head again (a new number, or StaleBasis)', async () => {
  const store = await server.storeOf('local');
  const commit = async (bytes: Uint8Array, o: { expect?: number; seen?: Awaited<ReturnType<typeof store.headSeen>> } = {}) => {
    const sink = store.create('seen.bin', o.expect, undefined, undefined, o.seen);
    await sink.write(bytes);
    // as the receiver does: a failed commit aborts (its own segments go)
    return sink.commit(await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO)).catch(async (e) => {
      await sink.abort();
      throw e;
    });
  };
  const [a, b, c, d] = [41, 42, 43, 44].map((seed) => fastRandomBytes(seed, 50_000));
  assert.equal(await commit(a), 1);
  // two sessions read the head at version 1; one commits, then the other
  const seen = await store.headSeen('seen.bin');
  assert.equal(await commit(b, { seen }), 2);
  assert.equal(await commit(c, { seen }), 3, 'the stale head is read again: the next number, nothing lost');
  // a writer that built on version 3 and saw it: another commit lands first, so StaleBasis
  const seen3 = await store.headSeen('seen.bin');
  assert.equal(await commit(a), 4);
  await assert.rejects(commit(d, { expect: 3, seen: seen3 }), /is at version 4, not 3/);
  assert.deepEqual(await store.versionNumbers('seen.bin'), [1, 2, 3, 4]);
  for (const [v, bytes] of [[1, a], [2, b], [3, c], [4, a]] as const) assert.ok((await store.bytes('seen.bin', v)).equals(bytes), `version ${v} reads back`);
});

test('the name → key mapping is injective: a long name and the literal key of its old hash are two files', async () => {
  const long = 'd/' + 'x'.repeat(250) + '.txt';
  const old = 'h-' + createHash('sha256').update(long).digest('hex');
  await pushBytes(server, long, textBytes(1, 5000));
  await pushBytes(server, old, textBytes(2, 5000));
  assert.deepEqual(await versionsOf(server.url, long), [1]);
  assert.deepEqual(await versionsOf(server.url, old), [1]);
  assert.deepEqual(await server.stored(long), Buffer.from(textBytes(1, 5000)));
  assert.deepEqual(await server.stored(old), Buffer.from(textBytes(2, 5000)));
  // every key decodes back to its name; a leaf is never a folder of another key
  const r = new Rng(3);
  for (let i = 0; i < 2000; i++) {
    const name = Array.from({ length: 1 + r.int(700) }, () => String.fromCodePoint([0x61 + r.int(26), 0x2e, 0x2f, 0xe9, 0x1f600][r.int(5)])).join('');
    const key = encodeName(name);
    assert.equal(decodeName(key), name);
    assert.ok(key.split('/').slice(0, -1).every((c) => c.length === 200 && !c.includes('.')) && key.endsWith('.f'));
  }
  assert.notEqual(fileHeadKey('u', 'a'), fileHeadKey('u', 'a/b').slice(0, fileHeadKey('u', 'a').length) + 'x');
});

test('local backend: put-if-absent writes once; a head changes only with its current tag', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-local-'));
  try {
    const b = localBackend(dir);
    assert.equal(await b.putIfAbsent('data/ab/x', Buffer.from('one')), true);
    assert.equal(await b.putIfAbsent('data/ab/x', Buffer.from('two')), false);
    assert.deepEqual(Buffer.from(await b.get('data/ab/x')), Buffer.from('one'));
    assert.deepEqual(Buffer.from(await b.get('data/ab/x', { offset: 1, length: 5 })), Buffer.from('ne'));
    assert.equal(await b.getHead('h'), null);
    const t1 = await b.putHead('h', Buffer.from('1'), null);
    assert.ok(t1);
    assert.equal(await b.putHead('h', Buffer.from('x'), null), null);
    const t2 = await b.putHead('h', Buffer.from('2'), t1);
    assert.ok(t2);
    // a stale tag loses, even though its generation was removed when t2 landed
    assert.equal(await b.putHead('h', Buffer.from('stale'), t1), null);
    const t3 = await b.putHead('h', Buffer.from('3'), t2);
    assert.equal(await b.putHead('h', Buffer.from('stale'), t1), null);
    assert.deepEqual(await b.getHead('h'), { body: Buffer.from('3'), tag: t3 });
    // 20 writers racing on one head: every increment lands exactly once
    await b.putHead('n', Buffer.from('0'), null);
    await Promise.all(
      Array.from({ length: 20 }, async () => {
        for (;;) {
          const cur = (await b.getHead('n'))!;
          if (await b.putHead('n', Buffer.from(String(Number(Buffer.from(cur.body).toString()) + 1)), cur.tag)) return;
        }
      }),
    );
    assert.equal(Buffer.from((await b.getHead('n'))!.body).toString(), '20');
    const keys = [];
    for await (const e of b.list('')) keys.push(e.key);
    assert.deepEqual(keys, ['data/ab/x', 'h', 'n']);
    // a crash's temporary file is no key
    writeFileSync(path.join(dir, 'data/ab/@tmp-dead'), 'x');
    const again = [];
    for await (const e of b.list('data/')) again.push(e.key);
    assert.deepEqual(again, ['data/ab/x']);
    // gc removes it once it is old, and leaves a live writer's young one
    utimesSync(path.join(dir, 'data/ab/@tmp-dead'), new Date(Date.now() - 7200_000), new Date(Date.now() - 7200_000));
    writeFileSync(path.join(dir, 'data/ab/@tmp-live'), 'y');
    assert.equal(await b.sweepTemporaries(3600_000), 1);
    assert.deepEqual(readdirSync(path.join(dir, 'data/ab')).sort(), ['@tmp-live', 'x']);
    // whatever gc's min age: a collection with min age 0 must not take a writer's file
    assert.equal(await b.sweepTemporaries(0), 0);
    assert.deepEqual(readdirSync(path.join(dir, 'data/ab')).sort(), ['@tmp-live', 'x']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('chunking a file through its handle (slices read ahead into two reused buffers) equals chunking its bytes', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-chunkfile-'));
  try {
    // 3 whole 4 MiB slices and a partial one, text and random, so cut points straddle slices
    const bytes = new Uint8Array(13_000_003);
    bytes.set(textBytes(7n, 6_000_000));
    bytes.set(fastRandomBytes(8, 7_000_003), 6_000_000);
    const file = path.join(dir, 'f.bin');
    writeFileSync(file, bytes);
    const fh = await open(file, 'r');
    try {
      const a = await chunkSource(fileSource(fh, bytes.length), DEFAULT_PARAMS, 3);
      const b = await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
      assert.deepEqual(a.lengths, b.lengths);
      assert.deepEqual(a.fastfps, b.fastfps);
      assert.deepEqual(a.hashes, b.hashes);
      assert.deepEqual(a.root, b.root);
      assert.equal(a.lengths.reduce((x, y) => x + y, 0), bytes.length);
    } finally {
      await fh.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a file edited 150 times: commits are answered before their compaction, which keeps every version within the bound of segments; a push and a collection while one waits lose nothing', async () => {
  const { maxSegments } = await import('../src/store/compact.ts');
  const { repackHooks } = await import('../src/store/repack.ts');
  const { runCheck } = await import('../src/store/check.ts');
  const { runGc, unreferenced } = await import('../src/store/gc.ts');
  const r = new Rng(150);
  let cur = fastRandomBytes(150, 3 << 20);
  const store = await server.storeOf('local');
  const segments = async (v: number) => (await store.readVersion('edited.bin', v)).layout.segments;
  const push = async () => {
    cur = applyEdits(cur, r, { kind: 'insert', total: 64, maxFragment: 64 });
    return (await pushBytes(server, 'edited.bin', cur)).version;
  };
  const compactions: Record<string, unknown>[] = [];
  server.repo.log = (e) => void (e.event === 'compacted' && compactions.push(e));
  // the first compaction waits between writing its segments and index and swapping them in
  let waiting = false;
  let release = () => {};
  const held = new Promise<void>((go) => (release = go));
  repackHooks.step = async (step) => {
    if (step !== 'written' || waiting) return;
    waiting = true;
    await held;
  };
  try {
    await pushBytes(server, 'edited.bin', cur);
    const limit = maxSegments(cur.length);
    const kept = new Map<number, Uint8Array>();
    let most = 0;
    for (let k = 0; k < 150; k++) {
      const v = await push();
      if (k % 25 === 0 || k === 149) kept.set(v, cur);
      if ((await segments(v)).length > limit && !waiting) {
        // the commit beyond the bound was answered; its compaction has begun and now waits
        for (let t = 0; !waiting; t++) {
          assert.ok(t < 500, 'the compaction starts');
          await new Promise((go) => setTimeout(go, 10));
        }
        // a push building on the version being compacted is answered meanwhile, and a
        // collection deletes the waiting compaction's new objects, which nothing references yet
        kept.set(v, cur);
        const next = await push();
        kept.set(next, cur);
        assert.ok((await segments(next)).length > limit);
        const gc = await runGc(server.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 100 });
        assert.ok(gc.deleted > 0, JSON.stringify(gc));
        release();
        await server.repo.idle();
        // the waiting compaction's confirmation refused (the version keeps its old index); the
        // one queued behind it compacted both versions
        assert.deepEqual(compactions.map((e) => e.versions), [0, 2]);
        for (const x of [v, next]) assert.ok((await segments(x)).length < limit, `version ${x}`);
      }
      await server.repo.idle();
      most = Math.max(most, (await segments(v)).length);
    }
    assert.ok(most <= limit && most > limit - 5, `at most ${most} segments, the limit is ${limit}`);
    assert.ok(compactions.length >= 3, JSON.stringify(compactions));
    // compaction went down to half the slack
    const now = await segments(await store.latest('edited.bin'));
    assert.ok(now.length < limit, `${now.length} segments`);
    // the segments compaction wrote are in the file's family, as its pushes' are
    const family = segmentFamily('local', 'edited.bin');
    assert.ok(now.every((id) => id.startsWith(family)), `${family}: ${now.join(' ')}`);
    for (const [v, bytes] of kept) assert.deepEqual(await server.stored('edited.bin', v), Buffer.from(bytes), `version ${v}`);
    // what compaction replaced is garbage, which the next collection deletes; what is kept is whole
    assert.ok((await unreferenced(server.repo)).some((k) => k.startsWith('data/')));
    await runGc(server.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 100 });
    assert.deepEqual(await unreferenced(server.repo), []);
    assert.deepEqual((await runCheck(server.repo, { readData: true })).errors, []);
    for (const [v, bytes] of kept) assert.deepEqual(await server.stored('edited.bin', v), Buffer.from(bytes), `version ${v}`);
  } finally {
    repackHooks.step = undefined;
    release();
    server.repo.log = () => {};
  }
});

test('version indexes: two of the same chunks and layout are two objects (a nonce); format 3 is still read', async () => {
  const bytes = fastRandomBytes(44, 200_000);
  const index = await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
  const layout = { segments: ['0123456789abcdef0123456789abcdef'], extents: [{ seg: 0, offset: 0, length: bytes.length }] };
  const a = encodeVersion(index, layout);
  const b = encodeVersion(index, layout);
  assert.equal(a[4], 4);
  assert.notDeepEqual(a, b, 'each index body is its own, so each key is new');
  assert.deepEqual(decodeVersion(a), decodeVersion(b));
  // format 3: the same without the 16-byte nonce after the chunk count
  const v3 = Buffer.concat([a.subarray(0, 32), a.subarray(48)]);
  v3[4] = 3;
  assert.deepEqual(decodeVersion(v3), decodeVersion(a));
  assert.throws(() => decodeVersion(Buffer.concat([v3.subarray(0, 4), Buffer.from([5]), v3.subarray(5)])), /bad header/);
});

test('a verification fetches a segment whose pieces lie in several of its stretches once, and still finds damage in any of them', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-plan-'));
  try {
    const local = localBackend(dir);
    const gets: string[] = [];
    const backend: typeof local = { ...local, getStamped: (key, range) => (gets.push(key), local.getStamped(key, range)) };
    // a file of an old segment A and a small one B (as a small edit writes), B's pieces inside
    // two chunks far apart: [A 0..50000) [B 0..1000) [A 50000..150000) [B 1000..2000) [A 150000..200000)
    const a = fastRandomBytes(31, 200_000);
    const b = fastRandomBytes(32, 2_000);
    const [idA, idB] = [newSegmentId(), newSegmentId()];
    await local.putIfAbsent(segmentKey(idA), a);
    await local.putIfAbsent(segmentKey(idB), b);
    const extents = [
      { seg: 0, offset: 0, length: 50_000 },
      { seg: 1, offset: 0, length: 1_000 },
      { seg: 0, offset: 50_000, length: 100_000 },
      { seg: 1, offset: 1_000, length: 1_000 },
      { seg: 0, offset: 150_000, length: 50_000 },
    ];
    const file = Buffer.concat([a.subarray(0, 50_000), b.subarray(0, 1_000), a.subarray(50_000, 150_000), b.subarray(1_000), a.subarray(150_000)]);
    const lengths = new Uint32Array([40_000, 20_000, 80_000, 20_000, 42_000]);
    const hashes = hash_chunks(DEFAULT_ALGO, file, lengths);
    const index = { params: DEFAULT_PARAMS, algo: DEFAULT_ALGO, size: file.length, lengths, fastfps: new Uint32Array(5), hashes, root: runHash(DEFAULT_ALGO, hashes, 0, 5) };
    const source = () => new VersionSource(backend, { segments: [idA, idB], extents }, index, 'plan');
    const stretches = [{ offset: 50_000, length: 1_000 }, { offset: 151_000, length: 1_000 }];
    await source().verify(stretches);
    // chunks 1 and 3: A's pieces of each (more than 64 KiB apart) and B once
    assert.deepEqual(gets.filter((k) => k === segmentKey(idB)).length, 1);
    assert.equal(gets.length, 3);
    // a byte of B that only the second stretch reads, changed in place
    const damaged = Uint8Array.from(b);
    damaged[1_500] ^= 1;
    writeFileSync(path.join(dir, segmentKey(idB)), damaged);
    await assert.rejects(source().verify(stretches), (e) => e instanceof DamageError && /chunk 3 /.test(e.message));
    await assert.rejects(source().verify([stretches[1]]), DamageError);
    await source().verify([stretches[0]]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
