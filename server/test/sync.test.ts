// The three-phase protocol end to end: a real server on a loopback port, the real client
// library over a real WebSocket, real files in a real store. Hundreds of random edit scripts.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EDIT_KINDS, type EditKind, Rng, applyEdits, fastRandomBytes, randomBytes, textBytes } from '../../harness/testdata.ts';
import WebSocket from 'ws';
import { HASH_LAG, type Source, offsetsOf, runHash } from '../../shared/src/chunking/chunk-index.ts';
import { strong_hash } from '../../shared/src/chunking/wasm.ts';
import { newSegmentId, segmentKey } from '../src/store/keys.ts';
import { decodeFrame } from '../../shared/src/wire/codec.ts';
import { varintSize } from '../../shared/src/wire/frame-bytes.ts';
import { Msg, hashLength } from '../../shared/src/wire/protocol.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { encodeVersion } from '../src/store/format.ts';
import { VersionSource } from '../src/store/source.ts';
import { forgeIndex } from './store-helpers.ts';
import { checkTraffic, mixed } from './sync-helpers.ts';
import { type TestServer, pullBytes, pushBytes, testServer } from '../../harness/helpers.ts';

let server: TestServer;
before(async () => {
  server = await testServer();
});
after(async () => {
  await server.stop();
});

test('hundreds of random edit scripts store exactly the client file', async () => {
  const r = new Rng(20261122);
  let syncs = 0;
  for (let file = 0; file < 30; file++) {
    const name = `edits/file-${file}.bin`;
    const size = [0, 1, 100, 2047, 5000, 70_000, 300_000, 1_000_000][r.int(8)] + r.int(3000);
    let cur = mixed(r.int(1e9), size);
    // bytes chunked per part of the Checksum List: the whole file at once, or many parts, with
    // Verdicts and Delta Bytes between them
    const sliceBytes = [undefined, 4096, 20_000, 150_000][r.int(4)];
    let rep = await pushBytes(server, name, cur, { sliceBytes });
    let version = 1;
    assert.deepEqual(await server.stored(name), Buffer.from(cur));
    checkTraffic(rep, sliceBytes);
    for (let step = 0; step < 10; step++) {
      const kind: EditKind = EDIT_KINDS[r.int(3)];
      const total = [1, 32, 256, 2048, 16_384][r.int(5)];
      const placement: [number, number, number] = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.7, 0.1, 0.2]][r.int(4)] as [number, number, number];
      const maxFragment = r.int(2) ? 256 : 1 + r.int(8);
      const prev = cur;
      cur = applyEdits(cur, r, { kind, total, placement, maxFragment });
      rep = await pushBytes(server, name, cur, { sliceBytes });
      syncs++;
      // content equal to the latest version's is unchanged: no new version
      if (!Buffer.from(prev).equals(cur)) version++;
      assert.equal(rep.version, version);
      assert.deepEqual(await server.stored(name), Buffer.from(cur), `${name} after ${kind} ${total}`);
      checkTraffic(rep, sliceBytes);
      if (cur.length > 200_000 && total <= 256 && maxFragment === 256) assert.ok(rep.traffic.delta < cur.length / 4, `small edit sent ${rep.traffic.delta} of ${cur.length}`);
    }
  }
  assert.ok(syncs >= 300);
});

test('large edits (cut, insert, inverse of 1–4 MB) on an 8 MB file', async () => {
  const r = new Rng(7);
  const base = mixed(99, 8 << 20);
  for (const kind of EDIT_KINDS) {
    for (const total of [1 << 20, 4 << 20]) {
      const name = `large-${kind}-${total}`;
      await pushBytes(server, name, base);
      const edited = applyEdits(base, r, { kind, total, maxFragment: 64 << 10 });
      const rep = await pushBytes(server, name, edited);
      assert.deepEqual(await server.stored(name), Buffer.from(edited));
      checkTraffic(rep);
    }
  }
});

test('an identical re-push sends no Delta Bytes and a single Match Token', async () => {
  const data = mixed(5, 3_000_000);
  await pushBytes(server, 'same.bin', data);
  const rep = await pushBytes(server, 'same.bin', data);
  assert.equal(rep.literalBytes, 0);
  assert.equal(rep.traffic.delta, 0);
  // one token, sent once the list is complete (the run stays open until then): type, upTo (the
  // chunk count), n (1), first (0), count (every chunk), hash; then Tokens End (type, 1, 0)
  assert.equal(rep.traffic.matchTokens, 1 + varintSize(rep.chunks) + 1 + 1 + varintSize(rep.chunks) + 32 + 3);
  // unchanged: the latest version stands, no new one
  assert.equal(rep.version, 1);
});

test('empty files, files smaller than one chunk, and a file emptied', async () => {
  for (const bytes of [new Uint8Array(0), new Uint8Array([42]), randomBytes(3, 2047), randomBytes(4, 2049)]) {
    const name = `small-${bytes.length}`;
    await pushBytes(server, name, bytes);
    assert.deepEqual(await server.stored(name), Buffer.from(bytes));
    await pushBytes(server, name, bytes);
    await pushBytes(server, name, new Uint8Array(0));
    assert.equal((await server.stored(name)).length, 0);
    await pushBytes(server, name, bytes);
    assert.deepEqual(await server.stored(name), Buffer.from(bytes));
  }
});

test('a 10 MB mixed file with 32 B … 1 MB edits: traffic is a small fraction and pulls return the exact bytes', async () => {
  const r = new Rng(11);
  const base = mixed(1234, 10 << 20);
  const rows: string[] = [];
  for (const total of [32, 256, 2048, 16_384, 131_072, 1 << 20]) {
    const name = `ten-${total}`;
    await pushBytes(server, name, base);
    const edited = applyEdits(base, r, { kind: 'insert', total });
    const rep = await pushBytes(server, name, edited);
    rows.push(`${total} B insert: traffic ${rep.traffic.total} B (${((100 * rep.traffic.total) / edited.length).toFixed(2)}% of the file), wire ${rep.traffic.wire} B`);
    // each ≤256 B fragment costs one or two chunks (8–16 KB), so scattered edits cost more
    if (total <= 2048) assert.ok(rep.traffic.total < edited.length / 20, `${total}: ${rep.traffic.total}`);
    if (total === 16_384) assert.ok(rep.traffic.total < edited.length / 4, `${total}: ${rep.traffic.total}`);
    // pull both versions back: plain, and as a delta from the other version
    const v1 = await pullBytes(server, name, null, { version: 1 });
    assert.deepEqual(v1.bytes, Buffer.from(base));
    const v2 = await pullBytes(server, name, base);
    assert.deepEqual(v2.bytes, Buffer.from(edited));
    // the delta download moves about what the upload moved (the refinement's windows start
    // where each side's Delta messages do, which differ)
    assert.ok(Math.abs(v2.report.literalBytes - rep.literalBytes) <= 0.02 * rep.literalBytes + 4096, `pull ${v2.report.literalBytes}, push ${rep.literalBytes}`);
    // refinement: scattered fragments leave most of each dirty chunk to copy
    if (total >= 2048) assert.ok(rep.refinedBytes > rep.literalBytes, `${total}: refined ${rep.refinedBytes}, literal ${rep.literalBytes}`);
  }
  console.log(rows.join('\n'));
});

test('deflate off, SHA-256 and SHA-1, other chunk sizes', async () => {
  const plain = await testServer({ 'no-deflate': true });
  try {
    const base = mixed(77, 1_500_000);
    const edited = applyEdits(base, new Rng(1), { kind: 'cut', total: 2048 });
    for (const [algo, params] of [
      [2, undefined],
      [1, undefined],
      [3, { min: 512, avg: 2048, max: 16384, op: 1, every: 32 }],
    ] as const) {
      const name = `variant-${algo}-${params ? 'small' : 'default'}`;
      await pushBytes(plain, name, base, { algo, params });
      const rep = await pushBytes(plain, name, edited, { algo, params });
      assert.deepEqual(await plain.stored(name), Buffer.from(edited));
      assert.ok(rep.literalBytes < 200_000, `${name}: ${rep.literalBytes} literal bytes`);
      // the wire carries about what the payload is, uncompressed
      assert.ok(rep.traffic.wire >= rep.traffic.total);
    }
    // a push with chunking that differs from the stored index re-chunks the basis and still deltas
    const rep = await pushBytes(plain, 'variant-2-default', edited, { algo: 3 });
    assert.equal(rep.literalBytes, 0);
  } finally {
    await plain.stop();
  }
});

test('a file that does not compress syncs without permessage-deflate; one that does, with it', async () => {
  // random bytes (as compressed media and archives are): the client picks /sync?deflate=0
  const noise = fastRandomBytes(41, 3_000_000);
  const text = textBytes(42, 3_000_000);
  const rNoise = await pushBytes(server, 'deflate/noise.bin', noise);
  const rText = await pushBytes(server, 'deflate/text.txt', text);
  assert.equal(rNoise.deflate, false);
  assert.equal(rText.deflate, true);
  assert.ok(rNoise.traffic.wire >= rNoise.traffic.total, 'uncompressed on the wire');
  assert.ok(rText.traffic.wire < rText.traffic.total / 2, 'compressed on the wire');
  assert.deepEqual(await server.stored('deflate/noise.bin'), Buffer.from(noise));
  // a pull picks the same from its old copy: the edited noise comes down uncompressed
  const edited = applyEdits(noise, new Rng(3), { kind: 'insert', total: 2048 });
  await pushBytes(server, 'deflate/noise.bin', edited);
  const pulled = await pullBytes(server, 'deflate/noise.bin', noise);
  assert.equal(pulled.report.deflate, false);
  assert.deepEqual(Buffer.from(pulled.bytes), Buffer.from(edited));
  assert.equal((await pullBytes(server, 'deflate/text.txt', text)).report.deflate, true);
  // the no-compression endpoint is also a hard "off" switch on a server that compresses
  const raw = await pushBytes(server, 'deflate/text.txt', text, { url: server.wsUrl + '?deflate=0' });
  assert.equal(raw.deflate, false);
  // and a server started with --no-deflate never compresses
  const plain = await testServer({ 'no-deflate': true });
  try {
    assert.equal((await pushBytes(plain, 'text.txt', text)).deflate, false);
  } finally {
    await plain.stop();
  }
});

test('paper-exact server mode gives the same results', async () => {
  const paper = await testServer({ 'paper-exact': true });
  try {
    const base = mixed(8, 2_000_000);
    const edited = applyEdits(base, new Rng(2), { kind: 'inverse', total: 256 });
    await pushBytes(paper, 'p', base, { algo: 1 });
    const rep = await pushBytes(paper, 'p', edited, { algo: 1 });
    assert.deepEqual(await paper.stored('p'), Buffer.from(edited));
    assert.ok(rep.literalBytes < 100_000);
  } finally {
    await paper.stop();
  }
});

/** Makes one chunk of the stored basis collide weakly with the client's, as a FastFp false
 *  positive would: the stored version gets other bytes of the same length there (a new
 *  segment, its hash in the index) under the same length and FastFp, so the weak match stands
 *  and the run's strong hash no longer matches. */
async function forgeWeakCollision(name: string, chunk: number) {
  const store = await server.storeOf('local');
  const v = await store.latest(name);
  const { index, layout } = await store.readVersion(name, v);
  const H = hashLength(index.algo);
  const offs = offsetsOf(index.lengths);
  const other = fastRandomBytes(chunk + 77, index.lengths[chunk]);
  const id = newSegmentId();
  await store.backend.putIfAbsent(segmentKey(id), other);
  const src = new VersionSource(store.backend, layout, index, name);
  const segments = [...layout.segments, id];
  const piece = (o: number, n: number) => src.slice(o, n).map((p) => ({ seg: segments.indexOf(p.segment), offset: p.offset, length: p.length }));
  const extents = [...piece(0, offs[chunk]), { seg: segments.length - 1, offset: 0, length: other.length }, ...piece(offs[chunk + 1], index.size - offs[chunk + 1])].filter((e) => e.length);
  index.hashes.set(strong_hash(index.algo, other), chunk * H);
  index.root = runHash(index.algo, index.hashes, 0, index.lengths.length);
  await forgeIndex(store, name, v, encodeVersion(index, { segments, extents }));
}

test('a failed merged run above the split threshold is split: only the colliding chunk is resent', async () => {
  const a = mixed(21, 3 << 20);
  await pushBytes(server, 'split', a);
  await forgeWeakCollision('split', 100);
  // 256 KiB per Verdict: the split round comes between Verdicts
  const rep = await pushBytes(server, 'split', a, { sliceBytes: 256 << 10 });
  assert.deepEqual(await server.stored('split'), Buffer.from(a));
  // one chunk's bytes plus the per-chunk hashes of the run
  assert.ok(rep.literalBytes > 0 && rep.literalBytes <= 65536, `literal ${rep.literalBytes}`);
  assert.ok(rep.traffic.matchTokens > 300 * 32, 'the split hashes were sent');
});

test('the Delta Bytes of the file\'s start go out while its end is still being chunked', async () => {
  // the client hashes its chunks HASH_LAG bytes behind the chunking, and a slice's Delta
  // Bytes wait for its hashes: the file is 8 MiB longer than that
  const a = mixed(41, HASH_LAG + (8 << 20));
  await pushBytes(server, 'pipelined', a);
  // every MiB changes: each 1 MiB slice of the new file has literals to send
  const b = a.slice();
  for (let o = 0; o < b.length; o += 1 << 20) b.set(fastRandomBytes(o + 1, 4096), o + 100_000);
  const events: string[] = [];
  // Once chunking started (before it, the client reads samples to decide on deflate), the
  // last 4 MiB of the file can be read only once Delta Bytes went out (or after 10 s, so that
  // a client that waits for its whole list, or for its next read, fails this test instead of
  // hanging).
  let chunking = false;
  let deltaOut!: () => void;
  let timer!: NodeJS.Timeout;
  let timedOut = false;
  const delta = new Promise<void>((r) => {
    deltaOut = r;
    timer = setTimeout(() => {
      timedOut = true;
      r();
    }, 10_000);
  });
  const source: Source = {
    size: b.length,
    read: async (o, n) => {
      if (chunking && o >= b.length - (4 << 20)) await delta;
      return b.subarray(o, o + n);
    },
  };
  class Logged extends WebSocket {
    send(data: any, ...rest: any[]) {
      // (a frame carries one or more messages: a Verdict and its Delta Bytes go in one)
      for (const { m } of decodeFrame(data)) {
        if (m.type === Msg.Verdict) events.push('verdict');
        if (m.type === Msg.Delta) {
          events.push('delta');
          deltaOut();
        }
      }
      return super.send(data, ...rest);
    }
  }
  const onProgress = (p: string) => {
    if (p === 'chunking') chunking = true;
    if (p === 'checksums-sent') events.push(p);
  };
  try {
    const rep = await push(source, { url: server.wsUrl, name: 'pipelined', WebSocket: Logged as any, sliceBytes: 1 << 20, onProgress });
    assert.deepEqual(await server.stored('pipelined'), Buffer.from(b));
    assert.ok(!timedOut, 'no Delta Bytes went out while the read of the last 4 MiB was held');
    const firstDelta = events.indexOf('delta');
    assert.ok(firstDelta >= 0 && firstDelta < events.indexOf('checksums-sent'), events.join(', '));
    const verdicts = events.filter((e) => e === 'verdict').length;
    assert.ok(verdicts >= 4, `${verdicts} Verdicts`);
    assert.ok(rep.literalBytes < b.length / 4);
  } finally {
    clearTimeout(timer);
  }
});

test('a failed merged run below the threshold is resent whole', async () => {
  const a = mixed(22, 400_000);
  await pushBytes(server, 'nosplit', a);
  await forgeWeakCollision('nosplit', 3);
  const rep = await pushBytes(server, 'nosplit', a);
  assert.deepEqual(await server.stored('nosplit'), Buffer.from(a));
  assert.equal(rep.literalBytes, a.length);
});

test('a new name that is a copy of a stored file syncs as a delta of it (similarity traits)', async () => {
  const a = mixed(31, 2_000_000);
  await pushBytes(server, 'report-v1.doc', a);
  const copy = applyEdits(a, new Rng(4), { kind: 'insert', total: 512 });
  const rep = await pushBytes(server, 'report-v1 (copy).doc', copy);
  assert.equal(rep.version, 1);
  assert.deepEqual(await server.stored('report-v1 (copy).doc'), Buffer.from(copy));
  assert.ok(rep.literalBytes < 100_000, `literal ${rep.literalBytes}`);
  // an unrelated new file finds no basis
  const other = await pushBytes(server, 'unrelated.bin', fastRandomBytes(77, 500_000));
  assert.equal(other.literalBytes, 500_000);
});
