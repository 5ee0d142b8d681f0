// Several server processes on one store directory: concurrent pushes of one name through both
// lose nothing, a claimed basis is refused as stale across processes, each reads what the
// other committed right after, and an upload cut off on one resumes on the other.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { type Child, startChild } from '../../harness/child.ts';
import { pullBytes, pushBytes } from '../../harness/helpers.ts';
import { socketPipe } from '../../harness/pipe.ts';
import { download, versionsOf } from '../../harness/trials.ts';

async function two(data: string, flags: string[] = [], logs?: Record<string, unknown>[]): Promise<[Child, Child]> {
  return Promise.all([startChild(data, flags, logs && ((e) => logs.push(e))), startChild(data, flags, logs && ((e) => logs.push(e)))]);
}

test('two processes, one store: concurrent pushes of one name all land, each read back through the other', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-multi-'));
  const servers = await two(data);
  try {
    const [a, b] = servers;
    const base = fastRandomBytes(1, 1_500_000);
    await pushBytes(a, 'one.bin', base);
    // 16 pushes of distinct edits, alternating servers, all at once, none naming a basis
    const r = new Rng(2);
    const edits = Array.from({ length: 16 }, () => applyEdits(base, r, { kind: 'insert', total: 4096 }));
    const reps = await Promise.all(edits.map((e, i) => pushBytes(servers[i % 2], 'one.bin', e)));
    assert.deepEqual(reps.map((x) => x.version).sort((x, y) => x - y), Array.from({ length: 16 }, (_, i) => i + 2));
    for (const [i, rep] of reps.entries()) {
      const other = servers[(i + 1) % 2];
      assert.ok((await download(other.url, 'one.bin', rep.version)).equals(edits[i]), `version ${rep.version} through the other server`);
    }
    assert.deepEqual(await versionsOf(b.url, 'one.bin'), Array.from({ length: 17 }, (_, i) => i + 1));
    // both claim the latest as their basis, through different servers: one wins, one is stale
    const latest = 17;
    const c1 = applyEdits(edits[0], r, { kind: 'cut', total: 300 });
    const c2 = applyEdits(edits[1], r, { kind: 'cut', total: 300 });
    const results = await Promise.allSettled([pushBytes(a, 'one.bin', c1, { expect: { version: latest } }), pushBytes(b, 'one.bin', c2, { expect: { version: latest } })]);
    assert.equal(results.filter((x) => x.status === 'fulfilled').length, 1, JSON.stringify(results.map((x) => x.status)));
    const lost = results.find((x) => x.status === 'rejected') as PromiseRejectedResult;
    assert.ok(lost.reason instanceof RemoteError && lost.reason.code === ErrorCode.StaleBasis, String(lost.reason));
    // a pull through b of what a just committed, as a delta of the old basis
    const c3 = applyEdits(c1, r, { kind: 'insert', total: 2000 });
    const rep3 = await pushBytes(a, 'one.bin', c3);
    const { bytes, report } = await pullBytes(b, 'one.bin', base);
    assert.deepEqual(bytes, Buffer.from(c3));
    assert.equal(report.version, rep3.version);
    assert.ok(report.literalBytes < 200_000, `pulled ${report.literalBytes} literal bytes`);
  } finally {
    for (const s of servers) await s.kill();
    rmSync(data, { recursive: true, force: true });
  }
});

test('an upload cut off on one process resumes on another', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-multi-'));
  const logs: Record<string, unknown>[] = [];
  const servers = await two(data, [], logs);
  // a proxy that sends the first connection to server 0 and cuts it after 3 MB, later ones to server 1
  const proxy = await socketPipe({ to: (n) => Number(new URL(servers[Math.min(n, 1)].url).port), cut: (n, seen) => n === 0 && seen > 3_000_000 });
  try {
    const bytes = fastRandomBytes(11, 8_000_000);
    const rep = await pushBytes(proxy, 'resumed.bin', bytes, { retries: 3, sliceBytes: 1 << 20 });
    assert.equal(rep.version, 1);
    assert.ok(proxy.connections >= 2);
    assert.ok((await download(servers[0].url, 'resumed.bin')).equals(bytes));
    const done = logs.find((e) => e.op === 'push' && e.version === 1)!;
    assert.ok((done.resumedChunks as number) > 50, JSON.stringify(done));
  } finally {
    proxy.close();
    for (const s of servers) await s.kill();
    rmSync(data, { recursive: true, force: true });
  }
});
