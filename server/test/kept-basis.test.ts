// A kept basis (shared/src/session/kept.ts) against a real server on loopback: a client that keeps the
// bytes of the version it pushed sends each edit as copies of them and literal pieces, at byte
// granularity, in one round trip, and the server stores exactly the file; kept bytes that are
// not the version (damaged, or another version's) are never trusted: the server's root check
// refuses the push, the client forgets them and pushes again with the three phases; bytes that
// changed after the push are not kept; a source that sends file slices (the page's) refines
// every lacking chunk against them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type Source, bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { MemoryKnown, knownKey } from '../../shared/src/session/known.ts';
import { EDIT_KINDS, Rng, applyEdits, fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { push } from '../../shared/src/session/delta-client.ts';
import { LIST_BATCH } from '../../shared/src/base/limits.ts';
import { DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import WebSocket from 'ws';
import { type TestServer, pushBytes, testServer } from '../../harness/helpers.ts';

let server: TestServer;
before(async () => {
  server = await testServer();
});
after(async () => {
  await server.stop();
});

const base = (seed: number) => {
  const text = textBytes(seed, 1_200_000);
  text.set(fastRandomBytes(seed, 300_000), 400_000);
  return text;
};

test('edits go up as byte-exact copies of the kept bytes: fewer Delta Bytes than a finer cut, the exact file stored', async () => {
  const r = new Rng(20261125);
  const kept = new MemoryKnown(1 << 30, undefined, true);
  const fine = new MemoryKnown();
  let cur = base(5);
  await pushBytes(server, 'kept/a.bin', cur, { known: kept });
  await pushBytes(server, 'kept/b.bin', cur, { known: fine });
  assert.deepEqual(kept.get(knownKey(server.wsUrl, 'kept/a.bin'))!.kept, cur, 'the pushed bytes are kept');
  assert.equal(fine.get(knownKey(server.wsUrl, 'kept/b.bin'))!.kept, undefined);
  let viaKept = 0;
  let viaFine = 0;
  for (let step = 0; step < 12; step++) {
    const total = [32, 256, 2048, 16_384, 131_072][r.int(5)];
    cur = applyEdits(cur, r, { kind: EDIT_KINDS[step % 3], total, placement: [0.7, 0.1, 0.2], maxFragment: 256 });
    const a = await pushBytes(server, 'kept/a.bin', cur, { known: kept });
    const b = await pushBytes(server, 'kept/b.bin', cur, { known: fine });
    assert.equal(a.knownVersion, step + 1, 'pushed against the kept version, in one round trip');
    assert.equal(a.traffic.basisChecksums, 0);
    assert.deepEqual(await server.stored('kept/a.bin'), Buffer.from(cur), `step ${step}`);
    assert.deepEqual(await server.stored('kept/b.bin'), Buffer.from(cur));
    // the literal bytes are the edit's (a deletion has none), not whole finer chunks
    assert.ok(a.literalBytes <= total + 1024, `step ${step}: ${a.literalBytes} literal bytes for an edit of ${total}`);
    assert.deepEqual(kept.get(knownKey(server.wsUrl, 'kept/a.bin'))!.kept, cur);
    viaKept += a.traffic.delta;
    viaFine += b.traffic.delta;
  }
  assert.ok(viaKept < viaFine / 2, `Delta Bytes: ${viaKept} via the kept bytes, ${viaFine} via the finer cut`);
});

test("a source that sends Delta Runs of file slices (the page's) refines every lacking chunk against kept bytes", async () => {
  const r = new Rng(31);
  const known = new MemoryKnown(1 << 30, undefined, true);
  const v1 = base(13);
  await pushBytes(server, 'kept/slices.bin', v1, { known });
  // 128 KB of fragments of up to 256 bytes: most chunks lack, in runs, yet hold mostly old bytes
  const v2 = applyEdits(v1, r, { kind: 'inverse', total: 131_072, maxFragment: 256 });
  const blob = new Blob([v2 as BlobPart]);
  const source: Source = { ...bufferSource(v2), blobSlice: (o, n) => blob.slice(o, o + n) };
  const rep = await push(source, { url: server.wsUrl, name: 'kept/slices.bin', WebSocket: WebSocket as never, known });
  assert.equal(rep.keptBasis, true);
  assert.equal(rep.runBytes, 0, 'no chunk went unrefined as a Delta Run');
  assert.ok(rep.literalBytes <= 131_072 + 4096, `${rep.literalBytes} literal bytes for an edit of 131072`);
  assert.deepEqual(await server.stored('kept/slices.bin'), Buffer.from(v2));
});

test('kept bytes that are not the version are never trusted: refused by the root check, forgotten, pushed again', async () => {
  const r = new Rng(7);
  const known = new MemoryKnown(1 << 30, undefined, true);
  const key = knownKey(server.wsUrl, 'kept/c.bin');
  const v1 = base(9);
  await pushBytes(server, 'kept/c.bin', v1, { known });
  const v2 = applyEdits(v1, r, { kind: 'inverse', total: 4096, maxFragment: 256 });
  await pushBytes(server, 'kept/c.bin', v2, { known });
  let cur = v2;
  // kept bytes that agree with the new file where the server's version does not: the copies
  // made of them are wrong there (the new file itself, as if the kept copy were overwritten;
  // the version before with the new file's first edit in it)
  const asNew = (_: Uint8Array, next: Uint8Array) => next.slice();
  const staleAndEdited = (_: Uint8Array, next: Uint8Array) => {
    const b = v1.slice(0, next.length);
    b.set(next.subarray(0, b.length));
    return b;
  };
  // damaged bytes where the new file does not have them: never copied, the push is right
  const damaged = (kept: Uint8Array) => {
    const d = kept.slice();
    for (let i = 1000; i < d.length; i += 50_000) d[i] ^= 0x5a;
    return d;
  };
  for (const [wrong, refused] of [[asNew, true], [staleAndEdited, true], [damaged, false]] as const) {
    const k = known.get(key)!;
    const next = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 256 });
    known.set(key, { ...k, kept: wrong(k.kept!, next) });
    const rep = await pushBytes(server, 'kept/c.bin', next, { known });
    cur = next;
    assert.equal(rep.knownVersion, refused ? undefined : k.version, refused ? 'the three phases, after the refused push' : 'the damage was never copied');
    assert.deepEqual(await server.stored('kept/c.bin'), Buffer.from(cur));
    assert.equal(known.get(key)!.version, rep.version);
    assert.deepEqual(known.get(key)!.kept, cur, 'the version pushed is kept anew');
  }
});

test('a file that changed after its push is not kept', async () => {
  const known = new MemoryKnown(1 << 30, undefined, true);
  const bytes = base(11);
  const src = bufferSource(bytes);
  // the push reads the file (in one slice: it is smaller); the read after the Result, to
  // keep its bytes, finds it changed
  let reads = 0;
  const changing: Source = {
    size: src.size,
    read: async (o, n) => {
      const b = (await src.read(o, n)).slice();
      if (n === bytes.length && reads++) b[n >> 1] ^= 1;
      return b;
    },
  };
  const rep = await push(changing, { url: server.wsUrl, name: 'kept/d.bin', WebSocket: WebSocket as never, known });
  assert.deepEqual(await server.stored('kept/d.bin'), Buffer.from(bytes));
  const k = known.get(knownKey(server.wsUrl, 'kept/d.bin'))!;
  assert.equal(k.version, rep.version);
  assert.equal(k.kept, undefined);
  assert.ok(k.fine, 'known still, with its finer cut');
});

test('a long new stretch, then many runs with chunks between them: the list goes as Checksums in batches and Copies that carry the chunks between runs, and the file is stored exactly', async () => {
  // small chunks, so that the new stretch is more chunks than one message batches (LIST_BATCH)
  const params = { ...DEFAULT_PARAMS, min: 64, avg: 256, max: 1024 };
  const known = new MemoryKnown(1 << 30, undefined, true);
  const v1 = fastRandomBytes(31, 4_500_000);
  await pushBytes(server, 'kept/e.bin', v1, { known, params });
  const v2 = v1.slice();
  v2.set(fastRandomBytes(32, 3_300_000)); // ~10 000 new chunks
  const r = new Rng(33);
  for (let at = 3_400_000; at < v2.length; at += 2000 + r.int(8000)) v2[at] ^= 0xff;
  const rep = await pushBytes(server, 'kept/e.bin', v2, { known, params, sliceBytes: 1 << 20 });
  assert.equal(rep.knownVersion, 1, 'pushed against the kept version');
  assert.deepEqual(await server.stored('kept/e.bin'), Buffer.from(v2));
  assert.ok(rep.chunks > LIST_BATCH + 2000, `${rep.chunks} chunks`);
  // the new stretch's chunks in the Checksum List (5–7 bytes each); the runs after it in
  // Copies, a few bytes each with the changed chunk before each
  assert.ok(rep.traffic.checksumList >= 5 * LIST_BATCH, `a list of ${rep.traffic.checksumList} bytes`);
  assert.ok(rep.traffic.matchTokens < 20 * (rep.chunks - LIST_BATCH), `Copies of ${rep.traffic.matchTokens} bytes`);
  // and the version after it, with a change in every slice, against it
  const v3 = v2.slice();
  for (let at = 100; at < v3.length; at += 300_000) v3[at] ^= 1;
  const rep3 = await pushBytes(server, 'kept/e.bin', v3, { known, params, sliceBytes: 1 << 20 });
  assert.equal(rep3.knownVersion, 2);
  assert.deepEqual(await server.stored('kept/e.bin'), Buffer.from(v3));
  assert.ok(rep3.traffic.checksumList + rep3.traffic.matchTokens < 2000, `list ${rep3.traffic.checksumList} B, Copies ${rep3.traffic.matchTokens} B for 14 small edits`);
});
