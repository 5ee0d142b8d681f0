// Damage that arises after a running server verified the bytes (docs/store.md, "Integrity"), on
// the local directory and on a real MinIO: a byte of a stored segment changes under the server
// (in place on disk; an overwrite through the S3 API, which changes its ETag). No new version
// may reference the damaged bytes, a push of good bytes over damaged ones stores them, and a
// damaged latest version never blocks its name: every push ends in a good committed version.
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MemoryKnown } from '../../shared/src/session/known.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { runCheck } from '../src/store/check.ts';
import { segmentKey } from '../src/store/keys.ts';
import { RACY_FINE_MS, RACY_MS, localBackend } from '../src/store/local.ts';
import { Repo } from '../src/store/repo.ts';
import { Store } from '../src/store/store.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import * as places from './places.ts';
import type { Place } from './places.ts';

let minio: S3Server;
const localPlace = () => places.localPlace('damage');
const minioPlace = () => places.minioPlace(() => minio, 'damage');

/** A real server on a loopback port over the place's store. */
async function serve(place: Place) {
  const repo = new Repo(await place.open());
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent' }, {}), () => {}, repo);
  return { ...s, wsUrl: s.url.replace('http', 'ws') + '/sync', store: await s.storeOf('local') };
}
type Server = Awaited<ReturnType<typeof serve>>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The first segment of a version and the bytes it holds. */
async function firstSegment(s: Server, name: string, version: number) {
  return (await s.store.readVersion(name, version)).layout.segments[0];
}

/** The version pulls byte-exact, and a full check (every byte read) of a fresh process finds
 *  nothing wrong with it. */
async function assertGood(s: Server, place: Place, name: string, version: number, bytes: Uint8Array) {
  assert.equal(await s.store.latest(name), version);
  assert.ok((await pullBytes(s, name, null)).bytes.equals(bytes), `${name} v${version} pulls byte-exact`);
  const repo = new Repo(await place.open());
  try {
    const report = await runCheck(repo, { readData: true });
    const bad = report.errors.filter((e) => e.includes(`${name} version ${version} `));
    assert.deepEqual(bad, [], `check finds ${name} v${version} good`);
  } finally {
    await repo.close();
  }
}

test('a local stamp: none while a write in the same timestamp tick could go unseen; any write in place changes it', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsync-stamp-'));
  try {
    const b = localBackend(dir);
    const t0 = Date.now();
    assert.equal(await b.putIfAbsent('seg/x', fastRandomBytes(35, 10_000)), true);
    // changed a moment ago (well within RACY_FINE_MS, unless this machine stalled): no stamp,
    // so nothing is trusted without a read
    const fresh = [await b.stamp('seg/x'), (await b.getStamped('seg/x', { offset: 0, length: 100 })).stamp];
    if (Date.now() - t0 < RACY_FINE_MS / 2) assert.deepEqual(fresh, [null, null]);
    await sleep(RACY_MS + 200);
    const before = await b.stamp('seg/x');
    assert.ok(before);
    assert.equal((await b.getStamped('seg/x', { offset: 0, length: 100 })).stamp, before);
    // one byte written in place (same inode, same size): a new change time, so no stamp or
    // another one, never the old
    const fd = openSync(path.join(dir, 'seg/x'), 'r+');
    writeSync(fd, Buffer.from([1]), 0, 1, 5000);
    closeSync(fd);
    assert.notEqual(await b.stamp('seg/x'), before);
    await sleep(RACY_MS + 200);
    const after = await b.stamp('seg/x');
    assert.ok(after && after !== before);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

for (const [label, make] of [['local directory', localPlace], ['MinIO', minioPlace]] as const) {
  describe(`damage after verification (${label})`, () => {
    if (label === 'MinIO') {
      before(async () => {
        minio = await startMinio();
      });
      after(() => minio?.stop());
    }

    test('a byte flipped in a segment the server verified: the next edit pushed through it is stored good', async () => {
      const place = make();
      const s = await serve(place);
      try {
        const v1 = fastRandomBytes(31, 3_000_000);
        await pushBytes(s, 'big.bin', v1);
        await sleep(place.settleMs);
        // the server reads (and so verifies) every byte of version 1
        assert.ok((await pullBytes(s, 'big.bin', null)).bytes.equals(v1));
        await place.flip(segmentKey(await firstSegment(s, 'big.bin', 1)), 2_000_000);
        const v2 = applyEdits(v1, new Rng(31), { kind: 'insert', total: 2000 });
        const rep = await pushBytes(s, 'big.bin', v2);
        assert.equal(rep.version, 2);
        await assertGood(s, place, 'big.bin', 2, v2);
        // and the damage stays found where it is: never served, never restored as a new version
        await assert.rejects(pullBytes(s, 'big.bin', null, { version: 1 }), /damaged store: big\.bin version 1/);
        const restore = await fetch(`${s.url}/api/files/restore`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'big.bin', version: 1 }) });
        assert.equal(restore.status, 500);
        assert.match(((await restore.json()) as { error: string }).error, /damaged store: big\.bin version 1/);
        assert.deepEqual(await s.store.versionNumbers('big.bin'), [1, 2]);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });

    test('a push of the good bytes over a damaged latest version stores them (never "unchanged")', async () => {
      const place = make();
      const s = await serve(place);
      try {
        const v1 = fastRandomBytes(32, 2_000_000);
        await pushBytes(s, 'same.bin', v1);
        await sleep(place.settleMs);
        assert.ok((await pullBytes(s, 'same.bin', null)).bytes.equals(v1));
        await place.flip(segmentKey(await firstSegment(s, 'same.bin', 1)), 1_000_000);
        const rep = await pushBytes(s, 'same.bin', v1);
        assert.equal(rep.version, 2, 'a new version, not "unchanged"');
        await assertGood(s, place, 'same.bin', 2, v1);
        // once the latest is good, the same bytes are unchanged again
        assert.equal((await pushBytes(s, 'same.bin', v1)).version, 2);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });

    test('a damaged version the client knows: UnknownBasis, and the client pushes again without it, stored good', async () => {
      const place = make();
      const s = await serve(place);
      try {
        const known = new MemoryKnown();
        const v1 = fastRandomBytes(36, 2_000_000);
        await pushBytes(s, 'kn.bin', v1, { known });
        await place.flip(segmentKey(await firstSegment(s, 'kn.bin', 1)), 1_500_000);
        const v2 = applyEdits(v1, new Rng(36), { kind: 'insert', total: 500 });
        const rep = await pushBytes(s, 'kn.bin', v2, { known });
        assert.equal(rep.version, 2);
        assert.equal(rep.knownVersion, undefined, 'pushed again without the known version');
        await assertGood(s, place, 'kn.bin', 2, v2);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });

    test('a byte flipped in a segment between the basis open and the commit: no new version references it, and the push sends the good bytes again', async () => {
      const place = make();
      // the flip happens when the push puts its first segment: after the server opened the
      // basis and read what it needed of it, before the commit verifies what it copies
      const real = await place.open();
      let beforeSegmentPut: (() => Promise<void>) | null = null;
      const backend = new Proxy(real, {
        get(t, p) {
          if (p === 'putIfAbsent') {
            return async (key: string, body: Uint8Array, stamped?: (stamp: string) => void) => {
              const hook = key.startsWith('data/') ? beforeSegmentPut : null;
              beforeSegmentPut = null;
              await hook?.();
              return t.putIfAbsent(key, body, stamped);
            };
          }
          const v = Reflect.get(t, p, t);
          return typeof v === 'function' ? v.bind(t) : v;
        },
      });
      const started = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent' }, {}), () => {}, new Repo(backend));
      const s = { ...started, wsUrl: started.url.replace('http', 'ws') + '/sync', store: await started.storeOf('local') };
      try {
        const v1 = fastRandomBytes(37, 2_000_000);
        await pushBytes(s, 'mid.bin', v1);
        await sleep(place.settleMs);
        // the server verifies every byte of version 1: the next push's basis opens from that
        assert.ok((await pullBytes(s, 'mid.bin', null)).bytes.equals(v1));
        const seg = await firstSegment(s, 'mid.bin', 1);
        let flipped = false;
        beforeSegmentPut = async () => {
          await place.flip(segmentKey(seg), 1_000_000);
          flipped = true;
        };
        const v2 = applyEdits(v1, new Rng(37), { kind: 'insert', total: 2000 });
        const rep = await pushBytes(s, 'mid.bin', v2);
        assert.ok(flipped, 'the segment was damaged during the push');
        assert.equal(rep.version, 2);
        assert.ok(rep.literalBytes >= v2.length - 100_000, `pushed again without the damaged basis: ${rep.literalBytes} bytes sent`);
        assert.deepEqual(await s.store.versionNumbers('mid.bin'), [1, 2], 'the commit that found the damage added no version');
        assert.ok(!(await s.store.readVersion('mid.bin', 2)).layout.segments.includes(seg), 'version 2 does not reference the damaged segment');
        await assertGood(s, place, 'mid.bin', 2, v2);
        // and the good bytes of the damaged version are stored again when pushed
        assert.equal((await pushBytes(s, 'mid.bin', v1)).version, 3);
        await assertGood(s, place, 'mid.bin', 3, v1);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });

    test('a push basis verified while its session runs: damage found there is its error, and the process verifies that version first from then on', async () => {
      const place = make();
      let s = await serve(place);
      try {
        const v1 = fastRandomBytes(38, 3_000_000);
        await pushBytes(s, 'bg.bin', v1);
        await s.close();
        await place.flip(segmentKey(await firstSegment(s, 'bg.bin', 1)), 2_000_000);
        // a fresh process: nothing of version 1 verified, so the whole of it is read
        s = await serve(place);
        const opened = await s.store.openBasis('bg.bin', 1, undefined, { asked: false, meanwhile: true });
        await assert.rejects(opened.verified, /damaged store: bg\.bin version 1, chunk \d+/);
        await opened.close();
        // noted damaged: the next open verifies before it returns, so the version is no basis
        await assert.rejects(s.store.openBasis('bg.bin', 1, undefined, { asked: false, meanwhile: true }), /damaged store: bg\.bin version 1/);
        // and a push of an edit ends in a good version, sent whole
        const edit = applyEdits(v1, new Rng(38), { kind: 'insert', total: 1000 });
        const rep = await pushBytes(s, 'bg.bin', edit);
        assert.equal(rep.version, 2);
        assert.ok(rep.literalBytes >= edit.length - 100_000, `the damaged version was no basis: ${rep.literalBytes} bytes sent`);
        await assertGood(s, place, 'bg.bin', 2, edit);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });

    test('a basis verified meanwhile stops reading when its session closes it', async () => {
      const place = make();
      const s = await serve(place);
      const real = await place.open();
      try {
        await pushBytes(s, 'long.bin', fastRandomBytes(39, 20_000_000));
        // a fresh process over a store whose reads take 100 ms each: the verification reads the
        // 20 MB in five steps of 4 MiB
        let reads = 0;
        const slow = new Proxy(real, {
          get(t, p) {
            if (p === 'getStamped') {
              return async (key: string, range?: { offset: number; length: number }) => {
                reads++;
                await sleep(100);
                return t.getStamped(key, range);
              };
            }
            const v = Reflect.get(t, p, t);
            return typeof v === 'function' ? v.bind(t) : v;
          },
        });
        const store = new Store(new Repo(slow), 'local');
        const opened = await store.openBasis('long.bin', 1, undefined, { asked: false, meanwhile: true });
        await opened.close();
        const atClose = reads;
        await assert.rejects(opened.verified, { name: 'AbortError' });
        await sleep(500);
        assert.equal(reads, atClose, 'no read after the close');
        assert.ok(atClose <= 2, `the verification stopped at its first step (${atClose} reads)`);
      } finally {
        await real.close();
        await s.close();
        await place.cleanup();
      }
    });

    test('after a restart, a damaged latest version is no basis: pushes of other and of edited content commit', async () => {
      const place = make();
      let s = await serve(place);
      try {
        const v1 = fastRandomBytes(33, 3_000_000);
        await pushBytes(s, 'h.bin', v1);
        const seg = await firstSegment(s, 'h.bin', 1);
        await s.close();
        await place.flip(segmentKey(seg), 100);
        s = await serve(place);
        const other = fastRandomBytes(34, 1_000_000);
        const r2 = await pushBytes(s, 'h.bin', other);
        assert.equal(r2.version, 2);
        await assertGood(s, place, 'h.bin', 2, other);
        // and on another name whose latest is damaged, an edit of its content
        await s.close();
        s = await serve(place);
        await pushBytes(s, 'k.bin', v1);
        const kseg = await firstSegment(s, 'k.bin', 1);
        await s.close();
        await place.flip(segmentKey(kseg), 2_500_000);
        s = await serve(place);
        const edit = applyEdits(v1, new Rng(33), { kind: 'cut', total: 1000 });
        const r3 = await pushBytes(s, 'k.bin', edit);
        assert.equal(r3.version, 2);
        assert.ok(r3.literalBytes >= edit.length - 100_000, `the damaged version was no basis: ${r3.literalBytes} bytes sent`);
        await assertGood(s, place, 'k.bin', 2, edit);
      } finally {
        await s.close();
        await place.cleanup();
      }
    });
  });
}
