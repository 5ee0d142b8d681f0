// The store keeps what a version shares with its basis by reference: a small edit of a large
// file costs a segment the size of the Delta Bytes, every version still reads back exactly,
// and data directories written before layouts existed (format 1) still work.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { strong_hash } from '../../shared/src/wasm.ts';
import { hashLength } from '../../shared/src/protocol.ts';
import { Rng, applyEdits, fastRandomBytes, textBytes } from '../../shared/src/testdata.ts';
import { loadConfig } from '../src/config.ts';
import { startServer } from '../src/server.ts';
import { encodeName, encodeVersion, fileSource } from '../src/store.ts';
import { bufferSource, chunkSource } from '../../shared/src/chunk-index.ts';
import { DEFAULT_PARAMS } from '../../shared/src/protocol.ts';
import { open } from 'node:fs/promises';
import { download } from './trials.ts';
import { type TestServer, pullBytes, pushBytes, testServer } from './helpers.ts';

let server: TestServer;
before(async () => (server = await testServer()));
after(() => server.stop());

const segment = (name: string, v: number) => path.join(server.data, 'ns/local/files', encodeName(name), `v${v}.dat`);

test('a small edit of a large file stores only its Delta Bytes; every version reads back exactly', async () => {
  const r = new Rng(5);
  const versions = [fastRandomBytes(5, 8 << 20)];
  await pushBytes(server, 'big.bin', versions[0]);
  assert.equal(statSync(segment('big.bin', 1)).size, 8 << 20);
  for (let k = 0; k < 6; k++) {
    const next = applyEdits(versions[versions.length - 1], r, { kind: (['cut', 'insert', 'inverse'] as const)[k % 3], total: 2048 });
    const report = await pushBytes(server, 'big.bin', next);
    versions.push(next);
    const v = versions.length;
    // the new segment holds exactly the chunks sent as Delta Bytes (what refined chunks copy
    // from the basis included: the store keeps whole chunks)
    assert.ok(report.literalBytes > 0 && report.literalBytes < 1 << 20, `literal ${report.literalBytes}`);
    assert.equal(statSync(segment('big.bin', v)).size, report.literalBytes + report.refinedBytes);
  }
  // an identical re-push references everything and writes no segment
  await pushBytes(server, 'big.bin', versions[versions.length - 1]);
  assert.ok(!existsSync(segment('big.bin', versions.length + 1)));
  versions.push(versions[versions.length - 1]);
  const store = await server.storeOf('local');
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
  const report = await pushBytes(server, 'orig (copy).txt', copy);
  assert.ok(report.literalBytes < 64 << 10);
  assert.equal(statSync(segment('orig (copy).txt', 1)).size, report.literalBytes + report.refinedBytes);
  assert.deepEqual(await server.stored('orig (copy).txt'), Buffer.from(copy));
});

test('format-1 data (whole-file .dat, no layout) reads, serves as a basis, and crash leftovers are removed', async () => {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-store-'));
  const start = async () => {
    const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', data }, {}));
    return { ...s, wsUrl: s.url.replace('http', 'ws') + '/sync', store: await s.storeOf('local') };
  };
  try {
    // version 1 in the current format, its index then rewritten as format 1
    let s = await start();
    const v1 = textBytes(3, 300_000);
    await pushBytes(s, 'old.txt', v1);
    const { index } = await s.store.readVersion('old.txt', 1);
    const H = hashLength(index.algo);
    const full = encodeVersion(index, { segments: ['old%2Etxt/v1.dat'], extents: [{ seg: 0, offset: 0, length: v1.length }] });
    const body = Buffer.from(full.subarray(0, 32 + H + index.lengths.length * (8 + H)));
    body[4] = 1;
    const dir = path.dirname(s.store.indexPath('old.txt', 1));
    await s.close();
    writeFileSync(path.join(dir, 'v1.idx'), Buffer.concat([body, strong_hash(index.algo, body)]));
    // leftovers of an interrupted commit: a segment without its index (format 2), an index
    // without its data (format 1)
    writeFileSync(path.join(dir, 'v2.dat'), 'orphan segment');
    writeFileSync(path.join(dir, 'v3.idx'), readFileSync(path.join(dir, 'v1.idx')));
    s = await start();
    try {
      assert.ok(!existsSync(path.join(dir, 'v2.dat')) && !existsSync(path.join(dir, 'v3.idx')));
      assert.deepEqual(await s.store.versionNumbers('old.txt'), [1]);
      assert.deepEqual(await s.store.bytes('old.txt', 1), Buffer.from(v1));
      const v2 = applyEdits(v1, new Rng(4), { kind: 'cut', total: 32 });
      const report = await pushBytes(s, 'old.txt', v2);
      assert.ok(report.literalBytes < 40_000);
      assert.equal(statSync(path.join(dir, 'v2.dat')).size, report.literalBytes + report.refinedBytes);
      assert.deepEqual(await s.store.bytes('old.txt', 2), Buffer.from(v2));
    } finally {
      await s.close();
    }
  } finally {
    rmSync(data, { recursive: true, force: true });
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
      const b = await chunkSource(bufferSource(bytes), DEFAULT_PARAMS, 3);
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
