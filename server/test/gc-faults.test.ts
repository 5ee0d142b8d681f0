// A version the server reported committed is never deleted by gc, whatever the delays of the
// store (docs/store.md §8): real pushes through a real server whose store — a local directory,
// and MinIO — is wrapped to delay chosen calls at every step of a commit and of a collection, or
// to lose a write's answer after it landed (an SDK retry), while a collector loops with a minimum
// age of 0 and a short window, and versions the pushes build on are removed under them. Every
// push reported committed reads back byte for byte after it all; a failed push leaves no version;
// gc never finds a head it cannot read. The collector repacks mostly dead segments as it goes
// (repack.ts), under faults of its own in one scenario.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { type IncomingMessage, createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MemoryKnown } from '../../shared/src/session/known.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { runCheck } from '../src/store/check.ts';
import { type GcReport, runGc, unreferenced } from '../src/store/gc.ts';
import { localBackend } from '../src/store/local.ts';
import { repackHooks } from '../src/store/repack.ts';
import { Store } from '../src/store/store.ts';
import { Repo } from '../src/store/repo.ts';
import { s3Backend } from '../src/store/s3.ts';
import { type Fault, FaultyBackend } from '../../harness/faulty-backend.ts';
import { pushBytes } from '../../harness/helpers.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';

const FILE_HEAD = /^ns\/[^/]+\/files\//;
const GC_STATE = /^gc\/state$/;
const SEGMENT = /^data\//;
const INDEX = /^index\//;
const ANY = /./;

/** Faults for the server's store (`commit`) and the collector's (`gc`), given a delay in ms. */
interface Scenario {
  name: string;
  commit: (ms: number) => Fault[];
  gc: (ms: number) => Fault[];
  /** the collector pauses up to this many ms between the steps of each repack (repack.ts) */
  repackPause?: (ms: number) => number;
  /** each round first removes every version of each file but the latest two (segments go
   *  mostly dead, so the collector repacks them while the pushes copy from them) */
  prune?: boolean;
}
const none = () => [];
const SCENARIOS: Scenario[] = [
  { name: 'file head writes land late', commit: (ms) => [{ op: 'putHead', key: FILE_HEAD, before: ms }], gc: none },
  { name: 'segment and index writes land late', commit: (ms) => [{ op: 'putIfAbsent', key: SEGMENT, before: ms }, { op: 'putIfAbsent', key: INDEX, before: ms }], gc: none },
  { name: "the commit's gc/state reads are answered late", commit: (ms) => [{ op: 'getHead', key: GC_STATE, after: ms }], gc: none },
  { name: 'a file head write lands late, its answer is lost and the SDK retry refused', commit: (ms) => [{ op: 'putHead', key: FILE_HEAD, before: ms, lost: 'retry' }], gc: none },
  { name: 'a file head write lands late and its answer is lost', commit: (ms) => [{ op: 'putHead', key: FILE_HEAD, before: ms, lost: 'throw' }], gc: none },
  {
    name: 'a collector paused at each change of its state, with slow marks and deletes, against late head writes',
    commit: (ms) => [{ op: 'putHead', key: FILE_HEAD, before: ms / 2 }],
    gc: (ms) => [{ op: 'putHead', key: GC_STATE, before: ms }, { op: 'delete', key: ANY, before: ms / 4 }, { op: 'list', key: /^ns\//, before: ms / 4 }],
  },
  {
    name: "a repack's segment, index and file head writes land late, head answers are lost, and the collector pauses between its steps",
    commit: (ms) => [{ op: 'putHead', key: FILE_HEAD, before: ms / 2 }],
    gc: (ms) => [
      { op: 'putIfAbsent', key: SEGMENT, before: ms },
      { op: 'putIfAbsent', key: INDEX, before: ms },
      { op: 'putHead', key: FILE_HEAD, before: ms, lost: 'throw' },
      { op: 'putHead', key: FILE_HEAD, before: ms / 2, lost: 'retry' },
      { op: 'getHead', key: GC_STATE, after: ms / 2 },
    ],
    repackPause: (ms) => ms,
    prune: true,
  },
];

/** Rounds per scenario (each pushes every file once); GC_FAULT_ROUNDS runs longer trials. */
const ROUNDS = Number(process.env.GC_FAULT_ROUNDS ?? 3);
const FILES = ['a.bin', 'dir/b.bin', 'c.bin'];

/** `known`: the pushes go against the version the client pushed last (Hello's `known`), which
 *  the server starts from its guess of the head (docs/store.md §4 "Starting from a guess"): the
 *  collector's retention and repack swaps, through a backend of its own, leave that guess stale. */
async function trial(make: () => Promise<{ server: Backend; collector: Backend; cleanup: () => Promise<void> }>, seed: number, o: { known?: boolean } = {}) {
  const { server: serverSide, collector: collectorSide, cleanup } = await make();
  const commitFaults = new FaultyBackend(serverSide);
  const gcFaults = new FaultyBackend(collectorSide);
  const repo = new Repo(commitFaults, { gcWindowMs: 200 });
  const gcRepo = new Repo(gcFaults);
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-gcfaults-'));
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: dir, 'gc-interval-ms': '0' }, {}), () => {}, repo);
  const srv = { wsUrl: s.url.replace('http', 'ws') + '/sync' };
  const store = new Store(repo, 'local');
  const r = new Rng(seed);
  const pushOpts = o.known ? { known: new MemoryKnown() } : {};
  // what each push reported committed; versions a removal was tried on; pushes that failed
  const committed = new Map<string, Map<number, Buffer>>(FILES.map((f) => [f, new Map()]));
  const removing = new Map<string, Set<number>>(FILES.map((f) => [f, new Set()]));
  const failures: string[] = [];
  const twice: string[] = [];
  let restores = 0;
  // the collector, looping until told to stop
  const reports: GcReport[] = [];
  const gcErrors: string[] = [];
  let collecting = true;
  const collector = (async () => {
    while (collecting) {
      try {
        reports.push(await runGc(gcRepo, { minAgeMs: 0, windowMs: 50 + r.int(150), staleMs: 10_000, repackPercent: 5 }));
      } catch (e) {
        gcErrors.push((e as Error).message);
      }
      await new Promise((res) => setTimeout(res, r.int(400)));
    }
  })();
  let current = new Map(FILES.map((f, i) => [f, fastRandomBytes(seed + i, 100_000 + r.int(400_000))]));
  try {
    for (const sc of SCENARIOS) {
      for (let round = 0; round < ROUNDS; round++) {
        // the faults apply to two calls of each kind a round, so that some pushes run clear
        const ms = 200 + r.int(1000);
        commitFaults.faults = sc.commit(ms).map((f) => ({ times: 2, ...f }));
        gcFaults.faults = sc.gc(ms).map((f) => ({ times: 2, ...f }));
        const pause = sc.repackPause?.(ms);
        if (sc.prune) {
          for (const f of FILES) {
            const vs = await store.versionNumbers(f);
            for (const v of vs.slice(0, -2)) {
              removing.get(f)!.add(v);
              await store.remove(f, v).catch(() => {});
            }
          }
        }
        repackHooks.step = pause ? () => new Promise((res) => setTimeout(res, r.int(pause))) : undefined;
        const next = new Map(FILES.map((f) => [f, applyEdits(current.get(f)!, r, { kind: (['cut', 'insert', 'inverse'] as const)[r.int(3)], total: [256, 16_384, 100_000][r.int(3)], maxFragment: 4096 })]));
        await Promise.all(
          FILES.map(async (f) => {
            // now and then the version this push builds on is removed under it
            const remover = r.int(2)
              ? (async () => {
                  await new Promise((res) => setTimeout(res, r.int(400)));
                  const latest = await store.latest(f);
                  if (!latest) return;
                  removing.get(f)!.add(latest);
                  await store.remove(f, latest).catch(() => {});
                })()
              : null;
            // and now and then an older version is restored while it is removed (a restore adds
            // references too)
            const older = [...committed.get(f)!.keys()].filter((v) => !removing.get(f)!.has(v));
            const restorer = older.length && r.int(3) === 0
              ? (async () => {
                  const v = older[r.int(older.length)];
                  const race = r.int(2) === 0;
                  if (race) removing.get(f)!.add(v);
                  const gone = race ? new Promise((res) => setTimeout(res, r.int(300))).then(() => store.remove(f, v)).catch(() => {}) : null;
                  try {
                    const restored = await store.restore(f, v);
                    committed.get(f)!.set(restored, committed.get(f)!.get(v)!);
                    restores++;
                  } catch (e) {
                    failures.push(`${sc.name}: restore ${f} v${v}: ${(e as Error).message}`);
                  }
                  await gone;
                })()
              : null;
            try {
              const rep = await pushBytes(srv, f, next.get(f)!, pushOpts);
              // a number reported twice holds the same bytes (a push of the latest's content is
              // answered "unchanged" with it: a file cut down to nothing stays empty)
              const had = committed.get(f)!.get(rep.version);
              if (had && !had.equals(next.get(f)!)) twice.push(`${sc.name}: ${f} v${rep.version} reported committed twice, with other bytes`);
              committed.get(f)!.set(rep.version, Buffer.from(next.get(f)!));
            } catch (e) {
              failures.push(`${sc.name}: ${f}: ${(e as Error).message}`);
            }
            await remover;
            await restorer;
          }),
        );
        current = next;
      }
    }
    // with the faults gone and the collector still running, a restore of a version nobody
    // removes always commits
    commitFaults.faults = [];
    gcFaults.faults = [];
    for (const f of FILES) {
      const kept = await store.versionNumbers(f);
      const v = [...committed.get(f)!.keys()].find((x) => kept.includes(x) && !removing.get(f)!.has(x));
      assert.ok(v !== undefined, `${f}: a committed version nobody removed is kept`);
      const restored = await store.restore(f, v);
      committed.get(f)!.set(restored, committed.get(f)!.get(v)!);
      restores++;
    }
  } finally {
    collecting = false;
    await collector;
    commitFaults.faults = [];
    gcFaults.faults = [];
    repackHooks.step = undefined;
  }
  try {
    // a collection may find a version whose objects it took before the version's commit
    // withdrew it (it skips that run); never a version a push was told is committed
    for (const x of reports) {
      if (!x.skipped || !/unreadable/.test(x.skipped)) continue;
      for (const item of x.skipped.replace(/^unreadable heads or indexes \(run check\): /, '').split('; ')) {
        const m = /^ns\/\S+: damaged store: (\S+) version (\d+): its index \w+ is missing$/.exec(item);
        assert.ok(m, item);
        assert.ok(!committed.get(m[1])?.has(Number(m[2])), `gc found ${m[1]} v${m[2]}, reported committed, broken`);
      }
    }
    // a collection stops, and says so, only where it cannot know what it did: a change of its
    // state whose SDK retry was refused while another change landed (requests held in transit)
    assert.deepEqual(gcErrors.filter((e) => !/the outcome of a compare-and-swap of gc\/state is unknown/.test(e)), []);
    assert.deepEqual(twice, []);
    assert.ok(reports.some((x) => x.deleted > 0), 'the collector deleted garbage while pushes ran');
    assert.ok(reports.some((x) => x.repacked > 0), 'the collector repacked segments while pushes ran');
    let n = 0;
    for (const f of FILES) {
      const kept = await store.versionNumbers(f);
      // a failed push left no version; no push committed two
      for (const v of kept) assert.ok(committed.get(f)!.has(v), `${f} v${v} is in the head, but no push reported it committed (${failures.filter((x) => x.includes(f)).join(" / ")})`);
      for (const [v, bytes] of committed.get(f)!) {
        if (!kept.includes(v)) {
          assert.ok(removing.get(f)!.has(v), `${f} v${v} was reported committed and is gone`);
          continue;
        }
        assert.ok((await store.bytes(f, v)).equals(bytes), `${f} v${v} reads back exactly`);
        n++;
      }
    }
    assert.ok(n >= FILES.length, `${n} committed versions kept`);
    // once it all stops, collections (until one repacks nothing more) leave exactly what the kept versions need, and check
    // finds nothing wrong
    let report;
    for (let k = 0; (report = await runGc(gcRepo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 1000 })).skipped || report.repackedVersions; k++) assert.ok(k < 4, JSON.stringify(report));
    assert.deepEqual(await unreferenced(gcRepo), []);
    assert.deepEqual((await runCheck(gcRepo, { readData: true })).errors, []);
    const pushes = SCENARIOS.length * ROUNDS * FILES.length;
    const failed = failures.filter((x) => !/: restore /.test(x)).length;
    // the faults and a collector with a 10 ms window refuse many pushes retryably by design
    // ("push again": 19–31 of 63 here at load 1, 35 at a loaded CI's); what this bounds is that
    // the trials still commit most of the time
    assert.ok(failed < (pushes * 3) / 4, `${failed} of ${pushes} pushes failed`);
    console.log(`${pushes} pushes, ${failed} failed; ${restores} restores committed, ${failures.length - failed} failed; ${reports.length} collections deleted ${reports.reduce((a, x) => a + x.deleted, 0)} objects and repacked ${reports.reduce((a, x) => a + x.repacked, 0)} bytes out of ${reports.reduce((a, x) => a + x.repackedSegments, 0)} segments (${reports.filter((x) => x.repackFailed).length} repacks stopped by a fault); faults applied: ${JSON.stringify(Object.fromEntries(commitFaults.hit))} (server), ${JSON.stringify(Object.fromEntries(gcFaults.hit))} (collector)`);
    for (const m of new Set(failures.map((x) => x.replace(/(data|index)\/[0-9a-f/]+/g, '…')))) console.log(`  failed: ${m}`);
  } finally {
    await s.close();
    await repo.close();
    await gcRepo.close();
    rmSync(dir, { recursive: true, force: true });
    await cleanup();
  }
}

/** Faults on one step of a repack (repack.ts), set when the collector reaches `at` (`start`:
 *  from the beginning); `other`: another collector runs a whole collection there. */
const REPACK_CASES: { name: string; at: 'start' | 'written' | 'pending' | 'confirmed'; faults: Fault[]; other?: boolean }[] = [
  { name: 'its new segments and index land late', at: 'start', faults: [{ op: 'putIfAbsent', key: SEGMENT, before: 400 }, { op: 'putIfAbsent', key: INDEX, before: 400 }] },
  { name: 'another collection runs before its new index goes beside the old', at: 'written', faults: [], other: true },
  { name: 'its new index beside the old lands late and the answer is lost', at: 'written', faults: [{ op: 'putHead', key: FILE_HEAD, before: 400, lost: 'throw', times: 1 }] },
  { name: 'its new index beside the old lands, the answer is lost and the SDK retry refused', at: 'written', faults: [{ op: 'putHead', key: FILE_HEAD, lost: 'retry', times: 1 }] },
  { name: 'another collection runs while its new index is beside the old', at: 'pending', faults: [], other: true },
  { name: "its confirmation's gc/state reads fail", at: 'pending', faults: [{ op: 'getHead', key: GC_STATE, fail: true }] },
  { name: 'its confirmation reads gc/state late, while another collection runs', at: 'pending', faults: [{ op: 'getHead', key: GC_STATE, after: 400, times: 2 }], other: true },
  { name: 'the swap-in lands late and its answer is lost', at: 'confirmed', faults: [{ op: 'putHead', key: FILE_HEAD, before: 400, lost: 'throw', times: 1 }] },
  { name: 'the swap-in lands, its answer is lost and the SDK retry refused', at: 'confirmed', faults: [{ op: 'putHead', key: FILE_HEAD, lost: 'retry', times: 1 }] },
  { name: 'the swap-in fails', at: 'confirmed', faults: [{ op: 'putHead', key: FILE_HEAD, fail: true }] },
];

/**
 * Each step of a repack under faults, with a push building on the version being repacked at
 * that step: no version is lost or reads back wrong, the collections after it finish or drop
 * the repack, and the store ends with exactly what the kept versions need.
 */
async function repackTrial(make: () => Promise<{ server: Backend; collector: Backend; other: Backend; cleanup: () => Promise<void> }>) {
  for (const c of REPACK_CASES) {
    const { server, collector, other, cleanup } = await make();
    const repo = new Repo(server, { gcWindowMs: 200 });
    const faulty = new FaultyBackend(collector);
    const gcRepo = new Repo(faulty);
    const otherRepo = new Repo(other);
    const dir = mkdtempSync(path.join(tmpdir(), 'dsync-repackfaults-'));
    const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: dir, 'gc-interval-ms': '0' }, {}), () => {}, repo);
    const srv = { wsUrl: s.url.replace('http', 'ws') + '/sync' };
    const store = new Store(repo, 'local');
    try {
      // f.bin v2 holds two thirds of v1's segment; v1 removed: the segment is 35% dead
      const a = fastRandomBytes(21, 1_000_000);
      await pushBytes(srv, 'f.bin', a);
      const b = Buffer.concat([a.subarray(0, 300_000), a.subarray(650_000)]);
      await pushBytes(srv, 'f.bin', b);
      await store.remove('f.bin', 1);
      const before = (await store.head('f.bin'))!.versions[0].index;
      const c3 = Buffer.concat([b.subarray(0, 500_000), Buffer.from('edit'), b.subarray(500_000)]);
      let pushed = 0;
      let reached = false;
      const atStep = async () => {
        reached = true;
        faulty.faults = c.faults.map((f) => ({ ...f }));
        if (c.other) assert.equal((await runGc(otherRepo, { minAgeMs: 0, windowMs: 10, repackPercent: 100 })).skipped, undefined);
        pushed = (await pushBytes(srv, 'f.bin', c3)).version;
      };
      if (c.at === 'start') faulty.faults = c.faults.map((f) => ({ ...f }));
      repackHooks.step = async (step) => {
        if (step === c.at || (c.at === 'start' && step === 'written')) await atStep();
      };
      const report = await runGc(gcRepo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 5000 });
      repackHooks.step = undefined;
      faulty.faults = [];
      assert.ok(reached, `${c.name}: the repack reached its step (${JSON.stringify(report)})`);
      assert.ok(report.repacked > 600_000 || report.repackFailed, `${c.name}: ${JSON.stringify(report)}`);
      assert.ok(faulty.hit.size > 0 || c.faults.length === 0, `${c.name}: the faults applied`);
      assert.ok((await store.bytes('f.bin', 2)).equals(b), `${c.name}: v2 reads back exactly`);
      assert.ok((await store.bytes('f.bin', pushed)).equals(c3), `${c.name}: the push built on it reads back exactly`);
      let r;
      for (let k = 0; (r = await runGc(gcRepo, { minAgeMs: 0, windowMs: 10, repackPercent: 20, staleMs: 5000 })).skipped || r.repackedVersions; k++) assert.ok(k < 4, `${c.name}: ${JSON.stringify(r)}`);
      const head = (await store.head('f.bin'))!;
      assert.deepEqual(head.versions.filter((v) => v.repack), [], `${c.name}: no repack left under way`);
      assert.notEqual(head.versions[0].index, before, `${c.name}: v2 repacked in the end`);
      assert.ok((await store.bytes('f.bin', 2)).equals(b), `${c.name}: v2 reads back exactly in the end`);
      assert.ok((await store.bytes('f.bin', pushed)).equals(c3), `${c.name}: the push built on it reads back exactly in the end`);
      assert.deepEqual(await unreferenced(gcRepo), [], c.name);
      assert.deepEqual((await runCheck(gcRepo, { readData: true })).errors, [], c.name);
      console.log(`${c.name}: first collection ${JSON.stringify({ repacked: report.repacked, versions: report.repackedVersions, failed: report.repackFailed ?? null })}; faults applied ${JSON.stringify(Object.fromEntries(faulty.hit))}`);
    } finally {
      repackHooks.step = undefined;
      await s.close();
      await repo.close();
      await gcRepo.close();
      await otherRepo.close();
      rmSync(dir, { recursive: true, force: true });
      await cleanup();
    }
  }
}

/**
 * An HTTP proxy in front of MinIO that holds chosen requests in transit: it cuts the client's
 * connection at once, so the S3 SDK sends the request again (and that attempt passes), and
 * forwards the held one `hold` ms later, so that it lands after its own retry, as a request
 * stuck in a slow network or a load balancer does. `late` records what MinIO answered them.
 */
async function holdingProxy(target: string, hold: (method: string, path: string) => number) {
  const late: { method: string; path: string; status: number }[] = [];
  const held = new Set<string>();
  const forward = (req: IncomingMessage, body: Buffer, answer: (up: IncomingMessage | null) => void) => {
    const t = new URL(target);
    // the Host header goes as it is: the request's signature covers it
    const up = request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, answer);
    up.on('error', () => answer(null));
    up.end(body);
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const id = `${req.method} ${req.url}`;
      const ms = held.has(id) ? 0 : hold(req.method!, req.url!.split('?')[0]);
      if (ms) {
        held.add(id);
        res.destroy();
        setTimeout(() => forward(req, Buffer.concat(chunks), (up) => {
          held.delete(id);
          up?.resume();
          late.push({ method: req.method!, path: req.url!.split('?')[0], status: up?.statusCode ?? 0 });
        }), ms);
        return;
      }
      forward(req, Buffer.concat(chunks), (up) => {
        if (!up) return void res.destroy();
        res.writeHead(up.statusCode!, up.headers);
        up.pipe(res);
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, late, close: () => new Promise((r) => (server.closeAllConnections(), server.close(r))) };
}

describe('gc under delays and lost answers', () => {
  let minio: S3Server;
  before(async () => (minio = await startMinio()));
  after(() => minio?.stop());

  test('on a local directory', { timeout: 600_000 }, async () => {
    await trial(async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'dsync-gcfaults-store-'));
      return { server: localBackend(dir), collector: localBackend(dir), cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
    }, 11);
  });

  test('on a local directory, pushes against the version the client knows (from guesses of the heads)', { timeout: 600_000 }, async () => {
    await trial(
      async () => {
        const dir = mkdtempSync(path.join(tmpdir(), 'dsync-gcfaults-store-'));
        return { server: localBackend(dir), collector: localBackend(dir), cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
      },
      21,
      { known: true },
    );
  });

  test('on MinIO, pushes against the version the client knows (from guesses of the heads)', { timeout: 600_000 }, async () => {
    await trial(
      async () => {
        const url = `s3://gck-${randomBytes(6).toString('hex')}/store`;
        return { server: await s3Backend(url, minio.endpoint, minio.env), collector: await s3Backend(url, minio.endpoint, minio.env), cleanup: async () => {} };
      },
      22,
      { known: true },
    );
  });

  test('the steps of a repack, on a local directory', { timeout: 600_000 }, async () => {
    await repackTrial(async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'dsync-repackfaults-store-'));
      return { server: localBackend(dir), collector: localBackend(dir), other: localBackend(dir), cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
    });
  });

  test('the steps of a repack, on MinIO', { timeout: 600_000 }, async () => {
    await repackTrial(async () => {
      const url = `s3://gcr-${randomBytes(6).toString('hex')}/store`;
      return { server: await s3Backend(url, minio.endpoint, minio.env), collector: await s3Backend(url, minio.endpoint, minio.env), other: await s3Backend(url, minio.endpoint, minio.env), cleanup: async () => {} };
    });
  });

  test('on MinIO', { timeout: 600_000 }, async () => {
    await trial(async () => {
      const url = `s3://gcf-${randomBytes(6).toString('hex')}/store`;
      return { server: await s3Backend(url, minio.endpoint, minio.env), collector: await s3Backend(url, minio.endpoint, minio.env), cleanup: async () => {} };
    }, 12);
  });

  test('on MinIO, with requests held in transit while the S3 SDK retries them', { timeout: 600_000 }, async () => {
    // a third of the writes and every delete in its phase lands 0.3–1.5 s after its retry did:
    // head writes (file heads, gc/state) at any time; writes of segments and indexes, and
    // DELETEs, in phases 2 s apart (a late PUT re-creating an object gc deleted, followed by a
    // late DELETE of it from that same collection, is the case docs/store.md §8 leaves out).
    // (A collection deletes few objects: held at a third, none landed late in one run of 14.)
    const r = new Rng(5);
    const t0 = Date.now();
    const phase = () => [5000, 7000, 12000, 14000].findIndex((t) => (Date.now() - t0) % 14000 < t);
    const proxy = await holdingProxy(minio.endpoint, (method, p) => {
      const kind = p.split('/')[3];
      const held = method === 'PUT' ? (kind === 'ns' || kind === 'gc' || ((kind === 'data' || kind === 'index') && phase() === 0)) : method === 'DELETE' && phase() === 2;
      return held && (method === 'DELETE' || r.int(3) === 0) ? 300 + r.int(1200) : 0;
    });
    try {
      await trial(async () => {
        const url = `s3://gch-${randomBytes(6).toString('hex')}/store`;
        return { server: await s3Backend(url, proxy.url, minio.env), collector: await s3Backend(url, proxy.url, minio.env), cleanup: async () => {} };
      }, 13);
      // held requests landed late: a conditional write after its retry is refused (412), a
      // DELETE finds the object gone or deletes it (204)
      await new Promise((res) => setTimeout(res, 1600));
      const by = (m: string) => proxy.late.filter((x) => x.method === m);
      assert.ok(by('PUT').length > 10 && by('DELETE').length > 0, JSON.stringify(proxy.late.slice(0, 5)));
      const kinds = new Map<string, number>();
      for (const x of proxy.late) kinds.set(`${x.method} ${x.path.split('/')[3]} ${x.status}`, (kinds.get(`${x.method} ${x.path.split('/')[3]} ${x.status}`) ?? 0) + 1);
      console.log(`held in transit, landed late: ${JSON.stringify(Object.fromEntries(kinds))}`);
    } finally {
      await proxy.close();
    }
  });
});
