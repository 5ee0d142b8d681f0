// Garbage collection against commits: a commit that references a condemned object rescues it;
// one that would reference an object being deleted is refused, retryably; and SIGKILL trials
// at random points of a collector and of commits, in separate processes, lose no byte of a
// kept version.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { Store } from '../src/store/store.ts';
import { Repo } from '../src/store/repo.ts';
import { runCheck } from '../src/store/check.ts';
import { GC_STALE_MS, runGc, unreferenced } from '../src/store/gc.ts';
import { guardRefs, readGcState } from '../src/store/gc-state.ts';
import { GC_STATE, segmentFamily, segmentKey, uploadsKey } from '../src/store/keys.ts';
import { bufferSource, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { FaultyBackend } from '../../harness/faulty-backend.ts';
import { localBackend } from '../src/store/local.ts';
import { type Child, startChild } from '../../harness/child.ts';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { download, referencedBytes, versionsOf } from '../../harness/trials.ts';
import { until } from '../../harness/wait.ts';

test('a commit rescues the condemned objects it references; while they are deleted it is refused', async () => {
  const s = await testServer({ 'gc-window-ms': '400' });
  try {
    const a = fastRandomBytes(1, 600_000);
    await pushBytes(s, 'a.bin', a);
    const store = await s.storeOf('local');
    const { index, layout } = await store.readVersion('a.bin', 1);
    // a session opens version 1 as its basis; then the file is removed, so its objects are
    // garbage, and a collector condemns them and waits its window
    const { source } = await store.openVersion('a.bin', 1);
    await store.remove('a.bin');
    // (a window a loaded machine's commit lands within: the collector waits it out whole)
    const gc = runGc(s.repo, { minAgeMs: 0, windowMs: 10_000, repackPercent: 20 });
    await until('the collector condemns', async () => (await readGcState(s.repo)).state.phase === 'condemned', 120_000, 5);
    // the session commits a version copying all of its basis: it rescues the segment
    const sink = store.create('b.bin');
    await sink.copy!(source, 0, source.size);
    assert.equal(await sink.commit(index), 1);
    const report = await gc;
    // the segment is rescued; a.bin's index is not (b.bin's index is a new object, though its
    // layout and chunks are the same: an index carries a nonce)
    assert.equal(report.rescued, 1, JSON.stringify(report));
    assert.equal(report.deleted, 1, JSON.stringify(report));
    assert.ok((await download(s.url, 'b.bin')).equals(a));
    // a commit that needs an object in the deleting phase is refused with a retryable error
    const key = `data/${layout.segments[0].slice(0, 2)}/${layout.segments[0]}`;
    const cur = (await s.repo.backend.getHead(GC_STATE))!;
    await s.repo.backend.putHead(GC_STATE, Buffer.from(JSON.stringify({ epoch: 5, phase: 'deleting', candidates: [key], since: Date.now() })), cur.tag);
    await assert.rejects(guardRefs(s.repo, new Map([[key, 5]])), /collecting garbage this version needs; push again/);
    // and once a collection ended since the session began, missing objects are found
    await s.repo.backend.putHead(GC_STATE, Buffer.from(JSON.stringify({ epoch: 6, phase: 'idle', candidates: [], since: Date.now() })), (await s.repo.backend.getHead(GC_STATE))!.tag);
    await assert.rejects(guardRefs(s.repo, new Map([['data/00/00000000000000000000000000000000', 5]])), /the store collected/);
    // an object found to exist is known at the current epoch from then on
    assert.deepEqual((await guardRefs(s.repo, new Map([[key, 5]]))).refs, new Map([[key, 6]]));
  } finally {
    await s.stop();
  }
});

test("keys under data/ and index/ the store never makes are not its own: gc leaves them, and goes on collecting", async () => {
  const s = await testServer({});
  try {
    await pushBytes(s, 'a.bin', fastRandomBytes(2, 300_000));
    const store = await s.storeOf('local');
    const { layout } = await store.readVersion('a.bin', 1);
    await store.remove('a.bin');
    const foreign = ['data/ab/NOTES', 'data/README', `index/00/${'0'.repeat(63)}`, `data/${layout.segments[0].slice(0, 2)}/${layout.segments[0]}x`];
    for (const k of foreign) assert.ok(await s.repo.backend.putIfAbsent(k, Buffer.from('not the store\'s')));
    for (let i = 0; i < 2; i++) {
      const report = await runGc(s.repo, { minAgeMs: 0, windowMs: 0, repackPercent: 20 });
      assert.equal(report.skipped, undefined, JSON.stringify(report));
      assert.equal(report.deleted, i === 0 ? 2 : 0, `collection ${i + 1}: a.bin's segment and index, then nothing: ${JSON.stringify(report)}`);
    }
    for (const k of foreign) assert.equal((await s.repo.backend.get(k)).toString(), "not the store's", k);
    assert.equal((await readGcState(s.repo)).state.phase, 'idle');
  } finally {
    await s.stop();
  }
});

test('the guard before a swap takes a gc/state this process read moments ago; the confirmation reads it anew and withdraws what it must', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-gc-seen-'));
  try {
    // the file heads and gc/state of one local directory, counting this process's gc/state reads
    const real = localBackend(dir);
    let stateReads = 0;
    const counted = new Proxy(real, {
      get(t, p) {
        if (p === 'getHead') return (key: string) => ((stateReads += key === GC_STATE ? 1 : 0), t.getHead(key));
        const v = Reflect.get(t, p, t);
        return typeof v === 'function' ? v.bind(t) : v;
      },
    });
    // W = 60 s: a state read less than 15 s ago serves the epoch and the guard before a swap
    const repo = new Repo(counted, { gcWindowMs: 60_000 });
    const store = new Store(repo, 'local');
    const bytes = fastRandomBytes(3, 300_000);
    const first = store.create('a.bin');
    await first.write(bytes);
    assert.equal(await first.commit(await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO)), 1);
    const { index, layout } = await store.readVersion('a.bin', 1);
    const { source } = await store.openVersion('a.bin', 1);
    // another process's collection is deleting a.bin's segment (this process last saw gc/state
    // idle, at version 1's confirmation)
    const segment = segmentKey(layout.segments[0]);
    assert.ok(await real.putHead(GC_STATE, Buffer.from(JSON.stringify({ epoch: 0, phase: 'deleting', candidates: [segment], since: Date.now() })), null));
    // a commit copying that segment: its guard before the swap decides from the state seen
    // moments ago, its confirmation reads the state anew, refuses, and withdraws the version
    stateReads = 0;
    const sink = store.create('b.bin');
    await sink.copy!(source, 0, source.size);
    await assert.rejects(sink.commit(index), /collecting garbage this version needs; push again/);
    assert.equal(stateReads, 1, 'gc/state read once: by the confirmation');
    assert.deepEqual(await store.versionNumbers('b.bin'), [], 'the version is withdrawn');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the lease: a collector that renews is not taken over; one SIGKILLed mid-run is, within staleMs', async () => {
  const s = await testServer();
  let child: ChildProcess | null = null;
  try {
    const keep = fastRandomBytes(51, 300_000);
    await pushBytes(s, 'keep.bin', keep);
    await pushBytes(s, 'gone.bin', fastRandomBytes(52, 300_000));
    await (await s.storeOf('local')).remove('gone.bin');
    const repo = new Repo(localBackend(s.data));
    // a collector in its own process that sits in its commit window for a minute, renewing
    // its lease every 2000 / 6 ms
    child = spawn(process.execPath, ['--import', 'tsx', new URL('./gc-child.ts', import.meta.url).pathname, s.data, '60000', '2000'], { stdio: ['ignore', 'ignore', 'inherit'] });
    await until('the collector condemns', async () => (await readGcState(repo)).state.phase === 'condemned');
    // alive: another collector watches its state change, and leaves it alone (it watches for
    // 10 s, which holds dozens of renewals: a loaded machine's child still makes one)
    const live = await runGc(repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 10_000 });
    assert.match(live.skipped ?? '', /another collector is condemned/, JSON.stringify(live));
    // killed: the next collector (default settings) takes over once renewals stopped
    await kill(child);
    const t0 = performance.now();
    const report = await runGc(repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    const took = performance.now() - t0;
    assert.equal(report.skipped, undefined, JSON.stringify(report));
    assert.equal(report.deleted, 2, JSON.stringify(report)); // gone.bin's segment and index
    // a deadline, generous for a loaded machine: a collector that never took over would wait forever
    assert.ok(took < GC_STALE_MS + 60_000, `taken over after ${Math.round(took)} ms`);
    assert.ok(GC_STALE_MS <= 60_000, `a killed collector blocks gc for ${GC_STALE_MS} ms at most`);
    assert.deepEqual(await unreferenced(repo), []);
    assert.ok((await download(s.url, 'keep.bin')).equals(keep));
  } finally {
    if (child) await kill(child);
    await s.stop();
  }
});

/** A store on a fresh local directory, through a FaultyBackend; and a version writer. */
function faultyStore() {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-gcunit-'));
  const faulty = new FaultyBackend(localBackend(dir));
  const repo = new Repo(faulty);
  const store = new Store(repo, 'local');
  const commit = async (name: string, bytes: Uint8Array) => {
    const sink = store.create(name);
    await sink.write(bytes);
    return sink.commit(await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO));
  };
  return { faulty, repo, store, commit, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

test('a version copying from one whose objects a collection took, before that one was withdrawn, is refused', async () => {
  const { faulty, store, commit, cleanup } = faultyStore();
  try {
    const a = fastRandomBytes(3, 300_000);
    assert.equal(await commit('v.bin', a), 1);
    // a push opens v1 as its basis and copies all of it
    const { layout } = await store.readVersion('v.bin', 1);
    const { source } = await store.openVersion('v.bin', 1);
    const sink = store.create('w.bin');
    await sink.copy!(source, 0, source.size);
    // its commit verifies the copied bytes, then its guard reads the state, held up here; as
    // if v1's swap had landed after a collection's second mark, that collection deletes v1's
    // segment and ends meanwhile (before v1's confirmation withdrew it)
    faulty.faults = [{ op: 'getHead', key: /^gc\/state$/, before: 3000, times: 1 }];
    const committing = sink.commit((await store.readVersion('v.bin', 1)).index);
    committing.catch(() => {});
    await until('the commit reaches its guard', () => !!faulty.hit.get('getHead'), 120_000, 10);
    await faulty.inner.delete(segmentKey(layout.segments[0]));
    const st = await faulty.inner.getHead(GC_STATE);
    const epoch = st ? (JSON.parse(Buffer.from(st.body).toString()).epoch as number) : 0;
    assert.ok(await faulty.inner.putHead(GC_STATE, Buffer.from(JSON.stringify({ epoch: epoch + 1, phase: 'idle', candidates: [], since: Date.now() })), st?.tag ?? null));
    // v1's epoch says its objects are known only from before, so the commit checks them
    await assert.rejects(committing, /the store collected data\/.*push again/);
    assert.deepEqual(await store.versionNumbers('w.bin'), []);
  } finally {
    cleanup();
  }
});

test('a head swap whose answer is lost is settled: found landed (one version, not two), or fenced so that it never lands', async () => {
  const { faulty, store, commit, cleanup } = faultyStore();
  try {
    const bytes = [1, 2, 3, 4].map((k) => fastRandomBytes(20 + k, 50_000));
    // the swap fails before it reaches the store: the head is fenced (a new empty head), and
    // the commit tried again lands
    faulty.faults = [{ op: 'putHead', key: /\/files\//, fail: true, times: 1 }];
    assert.equal(await commit('f.bin', bytes[0]), 1);
    assert.equal((await store.head('f.bin'))!.seq, 2);
    // the swap lands and its answer is lost (an error; then an SDK retry refused): the head
    // holds this commit's index, so it is the version, confirmed
    faulty.faults = [{ op: 'putHead', key: /\/files\//, lost: 'throw', times: 1 }];
    assert.equal(await commit('f.bin', bytes[1]), 2);
    faulty.faults = [{ op: 'putHead', key: /\/files\//, lost: 'retry', times: 1 }];
    assert.equal(await commit('f.bin', bytes[2]), 3);
    // a swap that cannot be settled (no head write goes through, not even a fence) fails, and
    // leaves the objects it wrote in place (for all it knows the swap may still land)
    faulty.faults = [{ op: 'putHead', key: /\/files\//, fail: true }];
    const segmentsBefore = await count(store, 'data/');
    await assert.rejects(commit('f.bin', bytes[3]), /failed \(injected\)/);
    assert.ok((await count(store, 'data/')) > segmentsBefore);
    faulty.faults = [];
    assert.deepEqual(await store.versionNumbers('f.bin'), [1, 2, 3]);
    for (let v = 1; v <= 3; v++) assert.ok((await store.bytes('f.bin', v)).equals(bytes[v - 1]));
  } finally {
    cleanup();
  }
});

test('a session whose version landed never deletes or suspends what it wrote, whatever fails after', async () => {
  const { store, cleanup } = faultyStore();
  try {
    const bytes = fastRandomBytes(31, 100_000);
    const index = await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, DEFAULT_ALGO);
    const { sink } = await store.sinkFor('s.bin', 0, DEFAULT_PARAMS, DEFAULT_ALGO)({ digest: null });
    await sink.write(bytes);
    assert.equal(await sink.commit(index), 1);
    // the connection is lost before the Result goes out: the receiver suspends the session, or
    // aborts it
    await sink.suspend!({ digest: new Uint8Array(32), count: index.lengths.length, hashes: index.hashes });
    await sink.abort();
    assert.equal(await store.backend.getHead(uploadsKey('local', 's.bin')), null, 'nothing suspended');
    assert.ok((await store.bytes('s.bin', 1)).equals(bytes));
  } finally {
    cleanup();
  }
});

async function count(store: { backend: { list(p: string): AsyncIterable<unknown> } }, prefix: string) {
  let n = 0;
  for await (const _ of store.backend.list(prefix)) n++;
  return n;
}

/** objects the collectors in child processes reported deleted, and bytes they repacked */
let collected = 0;
let repacked = 0;
function startGc(data: string): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', new URL('./gc-child.ts', import.meta.url).pathname, data, '30', '1500'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let rest = '';
  child.stdout!.on('data', (d) => {
    const lines = (rest + d).split('\n');
    rest = lines.pop()!;
    for (const l of lines) {
      const r = JSON.parse(l) as { deleted: number; repacked: number };
      collected += r.deleted;
      repacked += r.repacked;
    }
  });
  return child;
}
async function kill(c: ChildProcess) {
  if (c.exitCode === null && c.signalCode === null) {
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await exited;
  }
}

test('SIGKILL trials at random points of gc and of commits lose no byte of a kept version', async () => {
  const trials = Number(process.env.GC_KILL_TRIALS ?? 24);
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-gckill-'));
  const r = new Rng(77);
  const files = ['a.bin', 'b.bin', 'dir/c.bin'];
  // what each confirmed version holds; versions are removed as they go, so gc has work
  const confirmed = new Map<string, Map<number, Buffer>>(files.map((f) => [f, new Map()]));
  let current = new Map(files.map((f, i) => [f, fastRandomBytes(10 + i, 300_000 + r.int(700_000))]));
  const flags = ['--gc-window-ms', '30'];
  let server: Child = await startChild(data, flags);
  let gc = startGc(data);
  let kills = 0;
  try {
    // at least `trials` trials, and more (up to 5×) until the collectors have both deleted and
    // repacked while commits ran: on a loaded machine a collector may be killed before its
    // first collection ends
    const exercised = () => collected > 0 && repacked > 0;
    for (let t = 0; t < trials || (!exercised() && t < 5 * trials); t++) {
      const next = new Map(files.map((f) => [f, applyEdits(current.get(f)!, r, { kind: (['cut', 'insert', 'inverse'] as const)[r.int(3)], total: [256, 16_384, 200_000][r.int(3)], maxFragment: 4096 })]));
      const runs = files.map(async (f) => {
        try {
          const rep = await pushBytes(server, f, next.get(f)!);
          confirmed.get(f)!.set(rep.version, Buffer.from(next.get(f)!));
          // drop the oldest kept version but the latest (REST), making garbage
          const vs = await versionsOf(server.url, f);
          if (vs.length > 2) {
            const res = await fetch(`${server.url}/api/files?name=${encodeURIComponent(f)}&version=${vs[0]}`, { method: 'DELETE' });
            if (res.status === 200) confirmed.get(f)!.delete(vs[0]);
          }
        } catch {
          // killed
        }
      });
      // kill the collector, the server, or both, at a random moment
      await new Promise((res) => setTimeout(res, r.int(300)));
      const which = r.int(3);
      if (which !== 1) await kill(gc);
      if (which !== 0) await server.kill();
      kills++;
      await Promise.all(runs);
      if (which !== 1) gc = startGc(data);
      if (which !== 0) server = await startChild(data, flags);
      // every kept version reads back exactly (through the verified REST download)
      for (const f of files) {
        const kept = await versionsOf(server.url, f);
        for (const [v, bytes] of confirmed.get(f)!) {
          if (!kept.includes(v)) continue; // a delete landed though its reply was lost
          assert.ok((await download(server.url, f, v)).equals(bytes), `trial ${t}: ${f} v${v} lost bytes`);
        }
      }
      current = next;
    }
    assert.ok(kills >= 20);
    assert.ok(collected > 0, 'the collectors deleted garbage while commits ran');
    assert.ok(repacked > 0, 'the collectors repacked segments while commits ran');
    // once everything stops, collections (until one repacks nothing more) leave exactly what the kept versions need
    await kill(gc);
    await server.kill();
    const repo = new Repo(localBackend(data));
    let report;
    for (let k = 0; (report = await runGc(repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 1000 })).skipped || report.repackedVersions; k++) assert.ok(k < 4, JSON.stringify(report));
    assert.deepEqual(await unreferenced(repo), []);
    for (const f of files) for (const v of (await new Store(repo, 'local').versionNumbers(f))) assert.ok((await new Store(repo, 'local').bytes(f, v)).length > 0);
  } finally {
    await kill(gc);
    await server.kill();
    rmSync(data, { recursive: true, force: true });
  }
});

/** Pushes a 3 MB file and a dozen versions of it, each cut by 150 KB; returns the last (and
 *  the edits' generator, for more). With
 *  every version but the latest removed, the first version's segments are mostly dead (a
 *  version stores only the bytes its push sent). */
async function pushCuts(s: Awaited<ReturnType<typeof testServer>>, name: string, seed: number, fileSeed: number): Promise<{ cur: Uint8Array; r: Rng }> {
  const r = new Rng(seed);
  let cur = fastRandomBytes(fileSeed, 3_000_000);
  await pushBytes(s, name, cur);
  for (let k = 0; k < 12; k++) {
    cur = applyEdits(cur, r, { kind: 'cut', total: 150_000, maxFragment: 30_000 });
    await pushBytes(s, name, cur);
  }
  return { cur, r };
}

test("a file's segments share its family, its pushes' and a repack's (one listing asks their stamps on S3)", async () => {
  const s = await testServer({ 'gc-interval-ms': '0' });
  try {
    const { cur } = await pushCuts(s, 'fam.bin', 33, 6);
    const store = await s.storeOf('local');
    const family = segmentFamily('local', 'fam.bin');
    const latest = await store.latest('fam.bin');
    const before = (await store.readVersion('fam.bin', latest)).layout.segments;
    assert.ok(before.length > 1 && before.every((id) => id.startsWith(family)), `${family}: ${before.join(' ')}`);
    for (const v of await store.versionNumbers('fam.bin')) if (v !== latest) await store.remove('fam.bin', v);
    let report;
    for (let k = 0; (report = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 })).skipped || report.repackedVersions; k++) assert.ok(k < 4, JSON.stringify(report));
    const after = (await store.readVersion('fam.bin', latest)).layout.segments;
    assert.ok(after.some((id) => !before.includes(id)), 'the repack wrote new segments');
    assert.ok(after.every((id) => id.startsWith(family)), `${family}: ${after.join(' ')}`);
    assert.ok((await download(s.url, 'fam.bin', latest)).equals(cur));
  } finally {
    await s.stop();
  }
});

test('a collector SIGKILLed at each step of a repack: no kept version lost or read back wrong; the next collector finishes or drops the repack', { timeout: 600_000 }, async () => {
  for (const step of ['written', 'pending', 'confirmed'] as const) {
    const s = await testServer({ 'gc-interval-ms': '0' });
    let child: ChildProcess | null = null;
    try {
      // a file cut a dozen times, every version but the latest removed: the segments of the
      // first version are mostly dead
      const { cur, r } = await pushCuts(s, 'f.bin', 31, 4);
      const store = await s.storeOf('local');
      const latest = await store.latest('f.bin');
      for (const v of await store.versionNumbers('f.bin')) if (v !== latest) await store.remove('f.bin', v);
      child = spawn(process.execPath, ['--import', 'tsx', new URL('./gc-child.ts', import.meta.url).pathname, s.data, '30', '1500'], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, REPACK_STOP_AT: step } });
      let out = '';
      await new Promise<void>((res, rej) => {
        child!.stdout!.on('data', (d) => (out += d) && out.includes(`at ${step}\n`) && res());
        child!.once('exit', () => rej(new Error(`the collector exited before ${step}: ${out}`)));
        setTimeout(() => rej(new Error(`the collector did not reach ${step} in 120 s (nothing to repack?): ${out.slice(-2000)}`)), 120_000).unref();
      });
      const pending = (await store.head('f.bin'))!.versions.filter((v) => v.repack).length;
      assert.equal(pending, step === 'written' ? 0 : 1, `at ${step}, a repack is under way in the head: ${pending}`);
      // while it is stopped, a push builds on the version being repacked (its old index)
      const next = applyEdits(cur, r, { kind: 'cut', total: 4096, maxFragment: 1024 });
      const pushed = (await pushBytes(s, 'f.bin', next)).version;
      await kill(child);
      // the next collectors finish or drop the repack, and delete what it left
      let report;
      for (let k = 0; (report = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 1000 })).skipped || report.repackedVersions; k++) assert.ok(k < 4, JSON.stringify(report));
      assert.equal(report.repackFailed, undefined);
      assert.ok((await download(s.url, 'f.bin', latest)).equals(cur), `${step}: the repacked version reads back exactly`);
      assert.ok((await download(s.url, 'f.bin', pushed)).equals(next), `${step}: the version built on it reads back exactly`);
      assert.deepEqual((await store.head('f.bin'))!.versions.filter((v) => v.repack), [], 'no repack left under way');
      assert.deepEqual(await unreferenced(s.repo), []);
      assert.deepEqual((await runCheck(s.repo, { readData: true })).errors, []);
      // the space kept is within what the threshold allows (a segment at most 20% dead)
      let stored = 0;
      for await (const e of s.repo.backend.list('data/')) stored += e.size;
      const liveBytes = (await referencedBytes(store, ['f.bin'])).bytes;
      assert.ok(stored <= 1.3 * liveBytes, `${step}: ${stored} bytes stored for ${liveBytes} live`);
    } finally {
      if (child) await kill(child);
      await s.stop();
    }
  }
});

/** A store with f.bin v2 holding two thirds of v1's segment, v1 removed: a segment 35% dead. */
async function sparseFile() {
  const s = await testServer({ 'gc-interval-ms': '0' });
  const a = fastRandomBytes(7, 1_000_000);
  await pushBytes(s, 'f.bin', a);
  const b = Buffer.concat([a.subarray(0, 300_000), a.subarray(650_000)]);
  await pushBytes(s, 'f.bin', b);
  const store = await s.storeOf('local');
  await store.remove('f.bin', 1);
  return { s, store, b };
}

test("a repack whose swap lands after a whole collection took its new objects is dropped: the version keeps its index and bytes", async () => {
  const { s, store, b } = await sparseFile();
  try {
    const before = (await store.head('f.bin'))!.versions[0].index;
    // the repacking collector's first file head write (its new index beside the old) is held
    // in transit while another collector runs a whole collection, which finds the repack's new
    // segment and index unreferenced (minimum age 0) and deletes them
    let other: Awaited<ReturnType<typeof runGc>> | null = null;
    const slow = new FaultyBackend(localBackend(s.data));
    const held = slow.putHead.bind(slow);
    let once = true;
    slow.putHead = async (key, body, tag) => {
      if (once && key.includes('/files/')) {
        once = false;
        other = await runGc(new Repo(localBackend(s.data)), { minAgeMs: 0, windowMs: 10, repackPercent: 100 });
      }
      return held(key, body, tag);
    };
    const report = await runGc(new Repo(slow), { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.ok(report.repacked > 600_000, JSON.stringify(report));
    assert.ok(other && (other as { deleted: number }).deleted >= 2, `the other collection deleted the new objects: ${JSON.stringify(other)}`);
    // the confirmation found them gone: the repack was dropped, the version is untouched
    const v = (await store.head('f.bin'))!.versions[0];
    assert.equal(v.index, before);
    assert.equal(v.repack, undefined);
    assert.ok((await download(s.url, 'f.bin', 2)).equals(b));
    assert.deepEqual((await runCheck(s.repo, { readData: true })).errors, []);
    // with no one in the way, the next repack swaps a new index in, and the one after deletes the old segment
    const next = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.ok(next.repackedVersions === 1 && (await store.head('f.bin'))!.versions[0].index !== before, JSON.stringify(next));
    const last = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
    assert.ok(last.bytes >= 1_000_000, JSON.stringify(last));
    assert.ok((await download(s.url, 'f.bin', 2)).equals(b));
    assert.deepEqual((await runCheck(s.repo, { readData: true })).errors, []);
    assert.deepEqual(await unreferenced(s.repo), []);
  } finally {
    await s.stop();
  }
});

test('a push copying from the index a repack replaced, whose old segment a collection then deleted, is refused retryably; a new push commits', async () => {
  const { s, store, b } = await sparseFile();
  try {
    // a push opens v2 as its basis (the index before the repack) and copies all of it
    const { source, close } = await store.openVersion('f.bin', 2);
    const sink = store.create('g.bin');
    await sink.copy!(source, 0, source.size);
    const index = (await store.readVersion('f.bin', 2)).index;
    await close();
    // the repack swaps a new index in; the next collection deletes the old segment
    assert.equal((await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 })).repackedVersions, 1);
    assert.ok((await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 })).bytes >= 1_000_000);
    // the push's commit finds its basis' segment gone after a collection: "push again", not damage
    await assert.rejects(sink.commit(index), (e: Error) => /push again/.test(e.message) && !/damaged/.test(e.message));
    assert.deepEqual(await store.versionNumbers('g.bin'), []);
    await pushBytes(s, 'g.bin', b);
    assert.ok((await download(s.url, 'g.bin')).equals(b));
    assert.ok((await download(s.url, 'f.bin', 2)).equals(b));
  } finally {
    await s.stop();
  }
});
