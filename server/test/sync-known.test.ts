// A client that knows its basis (the version it pushed or pulled last) pushes against it: one
// round trip, refined like the three phases. Apart from sync.test.ts, whose edit scripts take
// minutes on a loaded machine, and each file has 600 s.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { EDIT_KINDS, Rng, applyEdits } from '../../harness/testdata.ts';
import { READ_SLICE } from '../../shared/src/chunking/chunk-index.ts';
import { type KnownVersion, MemoryKnown, knownKey } from '../../shared/src/session/known.ts';
import { type TestServer, pullBytes, pushBytes, testServer } from '../../harness/helpers.ts';
import { checkTraffic, mixed } from './sync-helpers.ts';

let server: TestServer;
before(async () => {
  server = await testServer();
});
after(async () => {
  await server.stop();
});

test('a client that knows the basis pushes against it in one round trip: random edits, other writers in between, exact bytes stored', async () => {
  const r = new Rng(20261124);
  const known = new MemoryKnown();
  const name = 'known/edited.bin';
  let cur = mixed(17, 2_000_000);
  let rep = await pushBytes(server, name, cur, { known });
  assert.equal(rep.knownVersion, undefined, 'the first push knows nothing');
  let version = 1;
  let refined = 0;
  for (let step = 0; step < 40; step++) {
    if (r.int(5) === 0) {
      // another writer (no memory of its own) lands a version: the next push still builds on
      // the one this client knows, and is stored as the latest
      cur = applyEdits(cur, r, { kind: EDIT_KINDS[r.int(3)], total: 2048, placement: [0.7, 0.1, 0.2], maxFragment: 256 });
      await pushBytes(server, name, cur);
      version++;
    }
    const before = known.get(knownKey(server.wsUrl, name))!.version;
    cur = applyEdits(cur, r, { kind: EDIT_KINDS[r.int(3)], total: [1, 32, 256, 2048, 16_384, 131_072][r.int(6)], placement: [0.7, 0.1, 0.2], maxFragment: 256 });
    rep = await pushBytes(server, name, cur, { known });
    version++;
    assert.equal(rep.version, version);
    assert.deepEqual(await server.stored(name), Buffer.from(cur), `step ${step}`);
    assert.equal(rep.knownVersion, before, 'pushed against the version it knew');
    // Copies messages (2–4 bytes each, 3–13 per run, and 5–7 per chunk listed before a run), no
    // Basis Checksums; the chunks the runs cover are listed by no one: with most of the file in
    // runs, the list and the Copies are shorter than all chunks' entries; the Delta Bytes
    // refined against the finer cut
    assert.equal(rep.traffic.basisChecksums, 0);
    const copies = rep.traffic.matchTokens;
    assert.ok(copies >= 2 + 3 && copies <= 4 + 20 * rep.chunks, `Copies of ${copies} bytes`);
    if (rep.literalBytes + rep.refinedBytes < rep.size / 2) assert.ok(rep.traffic.checksumList + copies < 5 * rep.chunks, `a list of ${rep.traffic.checksumList} bytes and Copies of ${copies} for ${rep.chunks} chunks, most of the file in Copies runs`);
    checkTraffic(rep, READ_SLICE, true);
    if (rep.refinedBytes > 0) refined++;
    assert.equal(known.get(knownKey(server.wsUrl, name))!.version, version, 'the pushed version is now the known one');
  }
  assert.ok(refined >= 10, `${refined} of 40 pushes refined`);
});

test('a known basis: refined like the three phases, limited without a finer cut, forgotten when the server does not hold it', async () => {
  const known = new MemoryKnown();
  const base = mixed(23, 1_500_000);
  await pushBytes(server, 'known/a.bin', base, { known });
  await pushBytes(server, 'known/b.bin', base);
  const r = new Rng(3);
  // scattered 64 KB of 256-byte edits dirty most chunks: pushed against the known version, the
  // chunks are refined against its finer cut and send no more than the three phases do
  const edited = applyEdits(base, r, { kind: 'inverse', total: 64 << 10, maxFragment: 256 });
  const viaKnown = await pushBytes(server, 'known/a.bin', edited, { known });
  const viaPhases = await pushBytes(server, 'known/b.bin', edited);
  assert.equal(viaKnown.knownVersion, 1);
  assert.equal(viaPhases.knownVersion, undefined);
  assert.ok(viaKnown.refinedBytes > edited.length / 2, `refined ${viaKnown.refinedBytes}`);
  assert.ok(viaKnown.traffic.delta <= viaPhases.traffic.delta * 1.1, `${viaKnown.traffic.delta} Delta bytes against the three phases' ${viaPhases.traffic.delta}`);
  assert.deepEqual(await server.stored('known/a.bin'), Buffer.from(edited));
  // a pulled version is known without a finer cut: a change that leaves more than
  // KNOWN_MAX_DELTA bytes unmatched runs the three phases, a small one goes against it
  const pulled = new MemoryKnown();
  const got = await pullBytes(server, 'known/a.bin', null, { known: pulled });
  assert.deepEqual(got.bytes, Buffer.from(edited));
  assert.equal(pulled.get(knownKey(server.wsUrl, 'known/a.bin'))!.fine, undefined);
  const large = applyEdits(edited, r, { kind: 'inverse', total: 64 << 10, maxFragment: 256 });
  let rep = await pushBytes(server, 'known/a.bin', large, { known: pulled });
  assert.equal(rep.knownVersion, undefined);
  assert.ok(rep.refinedBytes > 0, 'the three phases refined the dirty chunks');
  const small = applyEdits(large, r, { kind: 'insert', total: 32, maxFragment: 32 });
  rep = await pushBytes(server, 'known/a.bin', small, { known: pulled });
  assert.equal(rep.knownVersion, 3);
  assert.deepEqual(await server.stored('known/a.bin'), Buffer.from(small));
  // a root the server's version does not have, a version it does not hold (UnknownBasis), and a
  // memory whose first two chunks are swapped (the Copies it makes are refused: Inconsistent):
  // each time the three phases, and the version pushed is known from then on
  const key = knownKey(server.wsUrl, 'known/a.bin');
  const swapped = (k: KnownVersion) => {
    const hashes = k.hashes.slice();
    hashes.set(k.hashes.subarray(0, 32), 32);
    hashes.set(k.hashes.subarray(32, 64), 0);
    const lengths = k.lengths.slice();
    [lengths[0], lengths[1]] = [k.lengths[1], k.lengths[0]];
    return { ...k, hashes, lengths };
  };
  let cur = small;
  for (const wrong of [(k: KnownVersion) => ({ ...k, root: k.root.map((x) => x ^ 1) }), (k: KnownVersion) => ({ ...k, version: 99 }), swapped]) {
    known.set(key, wrong(known.get(key)!));
    cur = applyEdits(cur, r, { kind: 'cut', total: 256, placement: [0, 0, 1], maxFragment: 256 });
    rep = await pushBytes(server, 'known/a.bin', cur, { known });
    assert.equal(rep.knownVersion, undefined);
    assert.deepEqual(await server.stored('known/a.bin'), Buffer.from(cur));
    assert.equal(known.get(key)!.version, rep.version);
  }
});
