// File head guesses and the uploads mark (docs/store.md §4 step 0, §6, §12), on the local
// directory and on a real MinIO, with two servers (two processes' views: a backend each) on one
// store: a push against a known version starts from the head its server last read or wrote,
// which the other server may have changed since. Every push still lands as the next version,
// byte-exact, a stale basis is refused as before, a push of the latest bytes stores nothing, a
// known version removed and collected meanwhile is UnknownBasis, a push reads no file head its
// server holds current, and an upload cut off on one server resumes on the other although that
// one holds a stale head of the name.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConnectionLost, RemoteError } from '../../shared/src/transport/conn.ts';
import { RESUME_MIN_FILE } from '../../shared/src/base/limits.ts';
import { MemoryKnown, knownKey } from '../../shared/src/session/known.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { until } from '../../harness/wait.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { parseFileHead } from '../src/store/format.ts';
import { runCheck } from '../src/store/check.ts';
import { runGc } from '../src/store/gc.ts';
import { fileHeadKey, uploadsKey } from '../src/store/keys.ts';
import { localBackend } from '../src/store/local.ts';
import { Repo } from '../src/store/repo.ts';
import { s3Backend } from '../src/store/s3.ts';

let minio: S3Server | undefined;

/** Opens the store (a new backend each time: a process of its own) and removes it after. */
interface Place {
  open(): Promise<Backend>;
  cleanup(): void;
}
function localPlace(): Place {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-guesses-'));
  return { open: async () => localBackend(dir), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
let bucket = 0;
function minioPlace(): Place {
  const url = `s3://guesses${Date.now() % 1e6}-${bucket++}/store`;
  return { open: () => s3Backend(url, minio!.endpoint, minio!.env), cleanup: () => {} };
}

/** Reads of heads by kind of key (file head, uploads head), counted on the way to the backend. */
function counted(b: Backend, reads: Record<string, number>): Backend {
  return new Proxy(b, {
    get(target, key, recv) {
      const v = Reflect.get(target, key, recv);
      if (key !== 'getHead') return typeof v === 'function' ? v.bind(target) : v;
      return (k: string) => {
        const kind = k.split('/')[2] ?? k;
        reads[kind] = (reads[kind] ?? 0) + 1;
        return v.call(target, k);
      };
    },
  });
}

/** A real server on a loopback port over its own backend of the place's store. */
async function serve(place: Place, flags: Record<string, string> = {}) {
  const reads: Record<string, number> = {};
  const logs: Record<string, unknown>[] = [];
  const cfg = loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', 'gc-interval-ms': '0', ...flags }, {});
  const repo = new Repo(counted(await place.open(), reads), { resumeWindowMs: cfg.resumeWindowMs, keepVersions: cfg.keepVersions, keepDays: cfg.keepDays, gcWindowMs: cfg.gcWindowMs });
  const s = await startServer(cfg, (e) => logs.push(e), repo);
  return { ...s, port: Number(new URL(s.url).port), wsUrl: s.url.replace('http', 'ws') + '/sync', store: await s.storeOf('local'), reads, logs, repo };
}

const isStale = (e: unknown) => e instanceof RemoteError && e.code === ErrorCode.StaleBasis;

for (const [label, make] of [['local directory', localPlace], ['MinIO', minioPlace]] as const) {
  describe(`file head guesses, two servers on one store (${label})`, () => {
    if (label === 'MinIO') {
      before(async () => {
        minio = await startMinio();
      });
      after(() => minio?.stop());
    }

    test('pushes against a known version alternate between the servers, each from a stale guess: every one lands as the next version, a stale basis is refused, a push of the latest bytes stores nothing', async () => {
      const place = make();
      const [a, b] = [await serve(place), await serve(place)];
      let route = a;
      const proxy = await socketPipe({ to: () => route.port });
      const name = 'docs/one.bin';
      try {
        const r = new Rng(5);
        const known = new MemoryKnown();
        const key = knownKey(proxy.wsUrl, name);
        let cur = fastRandomBytes(5, 2_000_000);
        const bytes: Uint8Array[] = [cur];
        assert.equal((await pushBytes(proxy, name, cur, { known })).version, 1);
        // through b (which has never seen the head), then alternating: each server's guess is
        // the head as of its own last push, two versions behind, without the version the client
        // knows: a guess that would refuse is never believed, the head is read
        for (let v = 2; v <= 7; v++) {
          route = v % 2 === 0 ? b : a;
          cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
          const rep = await pushBytes(proxy, name, cur, { known, expect: { version: v - 1 } });
          assert.equal(rep.version, v);
          assert.equal(rep.knownVersion, v - 1, 'pushed against the version the client knows');
          bytes.push(cur);
        }
        for (const [i, want] of bytes.entries()) {
          for (const s of [a, b]) assert.ok((await pullBytes(s, name, null, { version: i + 1 })).bytes.equals(want), `version ${i + 1} through ${s === a ? 'a' : 'b'}`);
        }

        // a's guess is version 7 (its own last push): two pushes through a in a row read no file
        // head, and the second reads no uploads head either
        route = a;
        cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        assert.equal((await pushBytes(proxy, name, cur, { known, expect: { version: 7 } })).version, 8);
        bytes.push(cur);
        const before = { ...a.reads };
        cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        assert.equal((await pushBytes(proxy, name, cur, { known, expect: { version: 8 } })).version, 9);
        bytes.push(cur);
        assert.equal((a.reads.files ?? 0) - (before.files ?? 0), 0, 'no file head read: the guess is current');
        assert.equal((a.reads.uploads ?? 0) - (before.uploads ?? 0), 0, 'no uploads head read');

        const snapshot = () => {
          const m = new MemoryKnown();
          m.set(key, known.get(key)!);
          return m;
        };
        const knows9 = snapshot();

        // b's guess is 7 (its reads of the head above); the client knows 9 and claims it: the
        // guess would refuse, so b reads the head, and the push lands as version 10
        route = b;
        cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        assert.equal((await pushBytes(proxy, name, cur, { known, expect: { version: 9 } })).version, 10);
        bytes.push(cur);
        const knows10 = snapshot();

        // a's guess says 9 is the latest, and it is not: a client that knows 9 and claims it
        // pushes through a, and is refused at the swap (StaleBasis), nothing stored, as when
        // the head is read at the session's start
        route = a;
        const lost = applyEdits(bytes[8], r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        await assert.rejects(pushBytes(proxy, name, lost, { known: knows9, expect: { version: 9 } }), isStale);
        assert.deepEqual(await a.store.versionNumbers(name), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

        // b stores 11; a's guess says 10. The bytes of 11 pushed against 10 through a (a new
        // version, it would decide from its guess): the swap is refused, a read shows 11, and
        // the push stores nothing and answers 11, as with a head read at the start (the
        // client, whose Ready named 10, takes 11 for a commit that landed meanwhile)
        route = b;
        cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        assert.equal((await pushBytes(proxy, name, cur, { known })).version, 11);
        bytes.push(cur);
        route = a;
        const same = await pushBytes(proxy, name, cur, { known: knows10 });
        assert.equal(same.version, 11);
        assert.equal(same.knownVersion, 10);
        const unchanged = a.logs.filter((e) => e.op === 'push' && e.version === 11);
        assert.equal(unchanged.length, 1, 'a answered 11 once');
        assert.deepEqual(await a.store.versionNumbers(name), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        for (const [i, want] of bytes.entries()) assert.ok((await pullBytes(a, name, null, { version: i + 1 })).bytes.equals(want), `version ${i + 1}`);
      } finally {
        proxy.close();
        for (const s of [a, b]) await s.close();
        place.cleanup();
      }
    });

    test('an upload cut off on one server resumes through the other, which holds a guess of the head from before the cut', async () => {
      const place = make();
      const [a, b] = [await serve(place), await serve(place)];
      const name = 'resumed.bin';
      // b stores version 1 (so b holds the head as a guess); a takes the edit's first
      // connection and loses it after 3 MB, holding the client's bytes until its whole list is
      // out (so that a suspends the upload); the retry goes to b
      let hold: Promise<void> | null = null;
      const proxy = await socketPipe({ to: (n) => (n === 1 ? a.port : b.port), cut: (n, seen) => n === 1 && seen > 3_000_000, hold: () => hold });
      try {
        const data = fastRandomBytes(13, 8_000_000);
        assert.equal((await pushBytes(proxy, name, data)).version, 1);
        const edited = data.slice();
        edited.set(fastRandomBytes(14, 6_000_000), 1_000_000);
        let listOut!: () => void;
        hold = new Promise<void>((r) => (listOut = r));
        const phases: string[] = [];
        const onProgress = (p: string) => {
          phases.push(p);
          if (p === 'checksums-sent') {
            hold = null;
            listOut();
          }
        };
        const uploads0 = b.reads.uploads ?? 0;
        const rep = await pushBytes(proxy, name, edited, { retries: 3, onProgress });
        assert.ok(phases.includes('retrying') && proxy.connections >= 3, JSON.stringify(phases));
        assert.equal(rep.version, 2);
        const done = b.logs.find((e) => e.op === 'push' && e.version === 2)!;
        assert.ok((done.resumedChunks as number) > 50, JSON.stringify(b.logs));
        assert.equal(done.resume, true, 'the retry said it may resume');
        assert.ok(rep.literalBytes < 6_000_000, `literal ${rep.literalBytes}: less than the edit, part of which went before the cut`);
        assert.ok((b.reads.uploads ?? 0) > uploads0, 'b read the uploads head: the head it read was marked');
        assert.ok((await pullBytes(a, name, null)).bytes.equals(edited));
        // the mark a's suspend wrote stays in the head (it runs out with the upload's window)
        const got = (await (await place.open()).getHead(fileHeadKey('local', name)))!;
        assert.ok((parseFileHead(got.body, name).uploads ?? 0) > Date.now());
        // a push with the three phases that may resume reads the head (never a guess) and,
        // marked, the uploads head; one that may not starts from b's guess and reads neither
        let reads0 = { ...b.reads };
        const v3 = applyEdits(edited, new Rng(3), { kind: 'insert', total: 500 });
        assert.equal((await pushBytes(b, name, v3, { resume: true })).version, 3);
        assert.equal((b.reads.files ?? 0) - (reads0.files ?? 0), 1);
        assert.equal((b.reads.uploads ?? 0) - (reads0.uploads ?? 0), 1);
        reads0 = { ...b.reads };
        assert.equal((await pushBytes(b, name, applyEdits(v3, new Rng(4), { kind: 'insert', total: 500 }))).version, 4);
        assert.equal((b.reads.files ?? 0) - (reads0.files ?? 0), 0);
        assert.equal((b.reads.uploads ?? 0) - (reads0.uploads ?? 0), 0);
      } finally {
        proxy.close();
        for (const s of [a, b]) await s.close();
        place.cleanup();
      }
    });

    test('a known version removed and collected through the other server: the push from the stale guess is answered UnknownBasis, and the client pushes again without it', async () => {
      const place = make();
      const [a, b] = [await serve(place), await serve(place)];
      const name = 'gone.bin';
      try {
        const known = new MemoryKnown();
        const v1 = fastRandomBytes(41, 1_500_000);
        await pushBytes(a, name, v1, { known });
        const v2 = applyEdits(v1, new Rng(41), { kind: 'insert', total: 2048 });
        assert.equal((await pushBytes(a, name, v2, { known })).version, 2);
        // b removes the file and collects what it referenced; a's guess still holds 1 and 2
        await b.store.remove(name);
        const gc = await runGc(b.repo, { minAgeMs: 0, windowMs: 0, repackPercent: 20 });
        assert.ok(gc.deleted > 0, JSON.stringify(gc));
        const v3 = applyEdits(v2, new Rng(42), { kind: 'insert', total: 2048 });
        // against 2, from a's guess: what it copies is gone. The refusal is decided again from
        // a read, which finds no version 2: UnknownBasis, as a read at Hello would have said,
        // and the client pushes again without it (on the local directory the basis' segments,
        // written within the last tick, have no stamp: opening the basis already reads them and
        // finds them missing, with the same answer)
        const rep = await pushBytes(a, name, v3, { known });
        assert.equal(rep.version, 3);
        assert.equal(rep.knownVersion, undefined, 'pushed again with the three phases');
        assert.ok(a.logs.some((e) => e.op === 'push' && e.error === ErrorCode.UnknownBasis), JSON.stringify(a.logs.slice(-3)));
        assert.ok((await pullBytes(b, name, null)).bytes.equals(v3));
        assert.deepEqual(await b.store.versionNumbers(name), [3]);
      } finally {
        for (const s of [a, b]) await s.close();
        place.cleanup();
      }
    });

    test('the latest version removed and collected through the other server: a push with the three phases from the stale guess still lands, byte-exact, as the next version', async (t) => {
      const place = make();
      const [a, b] = [await serve(place), await serve(place)];
      const name = 'gone3.bin';
      try {
        const v1 = fastRandomBytes(43, 1_500_000);
        await pushBytes(a, name, v1);
        const v2 = applyEdits(v1, new Rng(43), { kind: 'insert', total: 2048 });
        assert.equal((await pushBytes(a, name, v2)).version, 2);
        // b removes the file and collects what it referenced; a's guess still holds 1 and 2
        await b.store.remove(name);
        const gc = await runGc(b.repo, { minAgeMs: 0, windowMs: 0, repackPercent: 20 });
        assert.ok(gc.deleted > 0, JSON.stringify(gc));
        // built on 2 from a's guess: what it copies is gone. Found missing when the basis is
        // opened, there is no basis (every byte goes); found at the commit's verification or
        // guard, the push is refused (UnknownBasis) and the client pushes again, from a read.
        // Either way the swap on the guess is refused and decided from a read: version 3
        const v3 = applyEdits(v2, new Rng(44), { kind: 'insert', total: 2048 });
        const rep = await pushBytes(a, name, v3);
        assert.equal(rep.version, 3);
        assert.ok((await pullBytes(b, name, null)).bytes.equals(v3));
        assert.deepEqual(await b.store.versionNumbers(name), [3]);
        const report = await runCheck(new Repo(await place.open()), { readData: true });
        assert.deepEqual(report.errors, []);
        t.diagnostic(`a's sessions of the push: ${JSON.stringify(a.logs.filter((e) => e.op === 'push' && e.name === name).slice(2).map((e) => e.error ?? `version ${e.version}`))}`);
      } finally {
        for (const s of [a, b]) await s.close();
        place.cleanup();
      }
    });

    test('stale guesses while retention drops versions and a collector loops: every push reported committed is kept as retention says, byte-exact; a refused one is retried and lands', async (t) => {
      const place = make();
      const flags = { 'keep-versions': '1' };
      const [a, b] = [await serve(place, flags), await serve(place, flags)];
      const collector = new Repo(await place.open());
      let route = a;
      const proxy = await socketPipe({ to: () => route.port });
      const name = 'kept/edits.bin';
      let collecting = true;
      let collections = 0;
      const loop = (async () => {
        while (collecting) {
          await runGc(collector, { minAgeMs: 0, windowMs: 20, repackPercent: 20 });
          collections++;
        }
      })();
      try {
        // two clients edit the file, x through a and y through b, each against the version it
        // pushed last (which its server's guess holds, stale by the other's commits since)
        const r = new Rng(51);
        const base = fastRandomBytes(51, 1_000_000);
        const x = { known: new MemoryKnown(), cur: base, via: a };
        const y = { known: new MemoryKnown(), cur: base, via: b };
        route = a;
        const committed: [number, Uint8Array][] = [[(await pushBytes(proxy, name, base, { known: x.known })).version, base]];
        route = b;
        y.cur = applyEdits(base, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        committed.push([(await pushBytes(proxy, name, y.cur, { known: y.known })).version, y.cur]);
        let refused = 0;
        for (let k = 0; k < 14; k++) {
          const c = k % 2 === 0 ? x : y;
          route = c.via;
          c.cur = applyEdits(c.cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
          for (let attempt = 0; ; attempt++) {
            try {
              const rep = await pushBytes(proxy, name, c.cur, { known: c.known });
              committed.push([rep.version, c.cur]);
              break;
            } catch (e) {
              // a collection took objects the push wrote (a collector at --min-age-ms 0): retryable
              assert.match((e as Error).message, /push again/);
              assert.ok(attempt < 3, 'a retried push lands');
              refused++;
            }
          }
        }
        collecting = false;
        await loop;
        assert.ok(collections > 0);
        const versions = committed.map(([v]) => v);
        assert.deepEqual(versions, [...new Set(versions)].sort((p, q) => p - q), 'each push a new version, in order');
        const kept = committed.slice(-1);
        assert.deepEqual(await a.store.versionNumbers(name), kept.map(([v]) => v));
        for (const [v, want] of kept) for (const s of [a, b]) assert.ok((await pullBytes(s, name, null, { version: v })).bytes.equals(want), `version ${v}`);
        await runGc(collector, { minAgeMs: 0, windowMs: 0, repackPercent: 20 });
        const report = await runCheck(collector, { readData: true });
        assert.deepEqual(report.errors, []);
        for (const [v, want] of kept) assert.ok((await pullBytes(a, name, null, { version: v })).bytes.equals(want), `version ${v} after a last collection`);
        t.diagnostic(`pushes refused retryably: ${refused}`);
      } finally {
        collecting = false;
        await loop.catch(() => {});
        proxy.close();
        for (const s of [a, b]) await s.close();
        await collector.close();
        place.cleanup();
      }
    });

    test('a push with the three phases that may resume, of a head that no upload marked, reads the file head and no uploads head', async () => {
      const place = make();
      const a = await serve(place);
      try {
        const data = fastRandomBytes(21, 1_000_000);
        await pushBytes(a, 'plain.bin', data);
        const reads0 = { ...a.reads };
        assert.equal((await pushBytes(a, 'plain.bin', applyEdits(data, new Rng(21), { kind: 'insert', total: 300 }), { resume: true })).version, 2);
        assert.equal((a.reads.files ?? 0) - (reads0.files ?? 0), 1);
        assert.equal((a.reads.uploads ?? 0) - (reads0.uploads ?? 0), 0);
      } finally {
        await a.close();
        place.cleanup();
      }
    });

    test('a push with the three phases that may not resume starts from its server\'s guess: no head read while it is current; stale (the other server committed), every push lands as the next version, byte-exact, a stale claim is refused, the latest bytes store nothing', async () => {
      const place = make();
      const [a, b] = [await serve(place), await serve(place)];
      const name = 'three/phases.bin';
      const fileReads = (s: typeof a, since: Record<string, number>) => (s.reads.files ?? 0) - (since.files ?? 0);
      const lastPush = (s: typeof a) => s.logs.filter((e) => e.op === 'push' && e.version !== undefined).at(-1)!;
      try {
        const r = new Rng(61);
        const edit = (from: Uint8Array) => applyEdits(from, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
        let cur = fastRandomBytes(61, 2_000_000);
        const bytes: Uint8Array[] = [cur];
        assert.equal((await pushBytes(a, name, cur, { expect: 'absent' })).version, 1);
        // a's guess is the head of its own commit: its next push reads no file or uploads head
        let reads0 = { ...a.reads };
        cur = edit(cur);
        assert.equal((await pushBytes(a, name, cur, { expect: { version: 1 } })).version, 2);
        bytes.push(cur);
        assert.equal(fileReads(a, reads0), 0, 'no file head read: the guess is current');
        assert.equal((a.reads.uploads ?? 0) - (reads0.uploads ?? 0), 0, 'no uploads head read');
        assert.deepEqual([lastPush(a).resume, lastPush(a).guessed], [false, true]);
        // b commits 3 (its first push of the name: no guess, it reads the head)
        cur = edit(cur);
        assert.equal((await pushBytes(b, name, cur)).version, 3);
        bytes.push(cur);
        // a's guess says 2 is the latest. No claim: the session builds on 2, its swap is refused
        // (the head moved), the head is read once, and the push lands as 4
        reads0 = { ...a.reads };
        cur = edit(cur);
        assert.equal((await pushBytes(a, name, cur)).version, 4);
        bytes.push(cur);
        assert.equal(fileReads(a, reads0), 1, 'the refused swap read the head');
        // b's guess says 3, and the client claims 4: a guess that would refuse is never
        // believed, b reads the head at Hello, and the push lands as 5
        cur = edit(cur);
        assert.equal((await pushBytes(b, name, cur, { expect: { version: 4 } })).version, 5);
        bytes.push(cur);
        // a's guess says 4 and the latest is 5: a client that claims 4 is refused at the swap
        // (StaleBasis), nothing stored, as when the head is read at the session's start
        await assert.rejects(pushBytes(a, name, edit(bytes[3]), { expect: { version: 4 } }), isStale);
        assert.deepEqual(await a.store.versionNumbers(name), [1, 2, 3, 4, 5]);
        // a commits 6 (its guess was forgotten at the refusal: it reads), b commits 7; the bytes
        // of 7 pushed through a, whose guess says 6: decided from the guess as a new version,
        // the swap is refused, a read shows 7 with these bytes: nothing stored, 7 answered
        cur = edit(cur);
        assert.equal((await pushBytes(a, name, cur)).version, 6);
        bytes.push(cur);
        cur = edit(cur);
        assert.equal((await pushBytes(b, name, cur)).version, 7);
        bytes.push(cur);
        assert.equal((await pushBytes(a, name, cur)).version, 7);
        assert.deepEqual(await a.store.versionNumbers(name), [1, 2, 3, 4, 5, 6, 7]);
        for (const [i, want] of bytes.entries()) {
          for (const s of [a, b]) assert.ok((await pullBytes(s, name, null, { version: i + 1 })).bytes.equals(want), `version ${i + 1} through ${s === a ? 'a' : 'b'}`);
        }
        const report = await runCheck(new Repo(await place.open()), { readData: true });
        assert.deepEqual(report.errors, []);
      } finally {
        for (const s of [a, b]) await s.close();
        place.cleanup();
      }
    });

    test(`a push cut off and run again by a client that keeps no record of its uploads: of ${RESUME_MIN_FILE >> 20} MiB and more it says it may resume, and resumes; smaller, it starts from the guess and sends every byte again, storing the same bytes; told an earlier push was cut off, it resumes`, async () => {
      const place = make();
      const a = await serve(place);
      // cuts connection `cut.n` once it has passed `cut.at` bytes
      const cut = { n: -1, at: 0 };
      const proxy = await socketPipe({ to: () => a.port, cut: (n, seen) => n === cut.n && seen > cut.at });
      // the uploads listed for a name, read through a backend of its own (not counted as a's)
      const plain = await place.open();
      const listed = async (name: string) => JSON.parse(Buffer.from((await plain.getHead(uploadsKey('local', name)))?.body ?? '{"uploads":[]}').toString()).uploads.length as number;
      const cutOff = async (name: string, bytes: Uint8Array, at: number) => {
        const had = await listed(name);
        Object.assign(cut, { n: proxy.connections, at });
        await assert.rejects(pushBytes(proxy, name, bytes), (e: Error) => e instanceof ConnectionLost, 'no retries: the push fails');
        // the server notices the lost connection and suspends the upload
        await until('the upload is suspended', async () => (await listed(name)) !== had, 120_000, 20);
      };
      /** pushes through the proxy; returns its report, the bytes the client sent and the server's log */
      const pushed = async (name: string, bytes: Uint8Array, o: { resume?: boolean } = {}) => {
        const sent0 = proxy.fromClient;
        const rep = await pushBytes(proxy, name, bytes, o);
        return { rep, sent: proxy.fromClient - sent0, log: a.logs.filter((e) => e.op === 'push' && e.version === rep.version).at(-1)! };
      };
      try {
        // a new file just above RESUME_MIN_FILE, cut after 10 MB (before its first checkpoint):
        // run again, a new push without a record (as `dsync push --no-known` run again), it says
        // it may resume and sends what the server lacks
        const big = fastRandomBytes(71, RESUME_MIN_FILE + (1 << 20));
        await cutOff('big.bin', big, 10_000_000);
        const again = await pushed('big.bin', big);
        assert.equal(again.rep.version, 1);
        assert.equal(again.log.resume, true);
        assert.ok((again.log.resumedChunks as number) > 0, JSON.stringify(again.log));
        assert.ok(again.sent < 0.6 * big.length, `the second run sent ${again.sent} of ${big.length} bytes`);
        assert.ok((await pullBytes(a, 'big.bin', null)).bytes.equals(big));

        // an edit of a small file cut off (its whole list went first: one slice) and run again:
        // the new push says it may not resume, starts from a's guess, reads no uploads head and
        // sends every byte again; the version is the same as a resumed one would be, and the
        // upload it missed waits listed until its window ends (gc then collects its objects)
        const small = fastRandomBytes(72, 3_000_000);
        assert.equal((await pushBytes(a, 'small.bin', small)).version, 1);
        const edited = small.slice();
        edited.set(fastRandomBytes(73, 2_000_000), 500_000);
        await cutOff('small.bin', edited, 1_500_000);
        const uploads0 = a.reads.uploads ?? 0;
        const whole = await pushed('small.bin', edited);
        assert.equal(whole.rep.version, 2);
        assert.equal(whole.log.resume, false);
        assert.ok(!whole.log.resumedChunks, JSON.stringify(whole.log));
        assert.equal((a.reads.uploads ?? 0) - uploads0, 0, 'no uploads head read');
        assert.ok(whole.sent > 2_000_000, `sent ${whole.sent}: the edit again, whole`);
        assert.ok((await pullBytes(a, 'small.bin', null)).bytes.equals(edited));
        assert.equal(await listed('small.bin'), 1, 'the missed upload stays listed');

        // the same, when the caller says an earlier push was cut off (the page's unfinished
        // uploads): it may resume, and does
        const edited2 = edited.slice();
        edited2.set(fastRandomBytes(74, 2_000_000), 500_000);
        await cutOff('small.bin', edited2, 1_500_000);
        const resumed = await pushed('small.bin', edited2, { resume: true });
        assert.equal(resumed.rep.version, 3);
        assert.equal(resumed.log.resume, true);
        assert.ok((resumed.log.resumedChunks as number) > 0, JSON.stringify(resumed.log));
        assert.ok(resumed.sent < 2_000_000, `sent ${resumed.sent}: less than the edit`);
        assert.ok((await pullBytes(a, 'small.bin', null)).bytes.equals(edited2));
        const report = await runCheck(new Repo(await place.open()), { readData: true });
        assert.deepEqual(report.errors, []);
      } finally {
        proxy.close();
        await a.close();
        place.cleanup();
      }
    });
  });
}
