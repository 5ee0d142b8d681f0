// Hash workers (shared/src/chunking/hash-pool.ts) on real worker threads reading a real file: the same
// Checksum List and strong hashes as hashing on one thread, in order across workers; a failed
// run falls back to this thread; a worker's error fails that run only.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import '../src/chunking/wasm.ts';
import { type Source, chunkParts } from '../src/chunking/chunk-index.ts';
import { type HashPool, OFF_THREAD_MIN } from '../src/chunking/hash-pool.ts';
import { nodeHashPool } from '../src/chunking/hash-workers-node.ts';
import { Algo, DEFAULT_PARAMS } from '../src/wire/protocol.ts';
import { fastRandomBytes, textBytes } from '../../harness/testdata.ts';
import { fileSource } from '../src/chunking/file-source.ts';

const dir = mkdtempSync(join(tmpdir(), 'dsync-hashpool-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// random bytes with runs of text (short chunks) so that slices hold very different numbers of chunks
const size = OFF_THREAD_MIN + (5 << 20) + 12345;
const data = fastRandomBytes(7, size);
for (let o = 0; o + (1 << 20) <= size; o += 9 << 20) data.set(textBytes(o, 1 << 20), o);
const file = join(dir, 'f.bin');
writeFileSync(file, data);

/** Runs `fn` with `path` open and a pool of `workers` hash workers, closing both after. */
async function withPool(path: string, workers: number, fn: (fh: FileHandle, pool: HashPool) => Promise<void>) {
  const fh = await open(path, 'r');
  const pool = nodeHashPool(workers)!;
  try {
    await fn(fh, pool);
  } finally {
    pool.close();
    await fh.close();
  }
}

async function listOf(source: Source, algo: number, sliceBytes?: number) {
  const lengths: number[] = [];
  const fastfps: number[] = [];
  const hashes: Buffer[] = [];
  let hashParts = 0;
  for await (const p of chunkParts(source, DEFAULT_PARAMS, algo, { sliceBytes })) {
    lengths.push(...p.lengths);
    fastfps.push(...p.fastfps);
    hashes.push(Buffer.from(p.hashes));
    if (p.hashes.length) hashParts++;
  }
  return { lengths, fastfps, hashes: Buffer.concat(hashes), hashParts };
}

test('two hash workers: the same list and hashes as one thread, for BLAKE3 and SHA-1, every run from a worker', async () => {
  await withPool(file, 2, async (fh, pool) => {
    for (const [algo, sliceBytes] of [[Algo.Blake3, undefined], [Algo.Sha1, 1 << 20]] as const) {
      const here = await listOf(fileSource(fh, size), algo, sliceBytes);
      const pooled = fileSource(fh, size, pool);
      let fromWorkers = 0;
      let runs = 0;
      const counted: Source = {
        ...pooled,
        hashRun: (o, l, a) => (runs++, pooled.hashRun!(o, l, a).then((h) => (fromWorkers++, h))),
      };
      const there = await listOf(counted, algo, sliceBytes);
      assert.ok(runs >= size / (sliceBytes ?? 4 << 20) - 1, `runs went to the workers (${runs})`);
      assert.equal(fromWorkers, runs, 'no run fell back to this thread');
      assert.equal(there.lengths.length, here.lengths.length);
      assert.deepEqual(there.lengths, here.lengths);
      assert.deepEqual(there.fastfps, here.fastfps);
      assert.ok(there.hashes.equals(here.hashes), 'the same strong hashes in the same order');
      assert.equal(there.hashes.length, here.lengths.length * (algo === Algo.Sha1 ? 20 : 32));
    }
  });
});

test("a source whose reads are new buffers (a page's File) hands each run's bytes to the worker, which reads nothing", async () => {
  await withPool(file, 1, async (fh, pool) => {
    const here = await listOf(fileSource(fh, size), Algo.Blake3);
    // 40 000-byte slices: many end inside a chunk (up to 64 KiB), so runs span several slices
    for (const sliceBytes of [undefined, 40_000]) {
      let runs = 0;
      let withBytes = 0;
      let fromWorker = 0;
      const plain = fileSource(fh, size);
      const own: Source = {
        size,
        read: (o, n) => plain.read(o, n), // without `into`: a new buffer each time
        hashRun: (o, l, a, pieces) => {
          runs++;
          if (pieces) withBytes++;
          return pool.hash(null, o, l, a, pieces, true).then((h) => (fromWorker++, h));
        },
      };
      const there = await listOf(own, Algo.Blake3, sliceBytes);
      assert.ok(runs > 10);
      assert.equal(withBytes, runs, 'every run came with its bytes');
      assert.equal(fromWorker, runs, 'and was hashed by the worker');
      assert.deepEqual(there.lengths, here.lengths);
      assert.ok(there.hashes.equals(here.hashes));
    }
  });
});

test('a worker error fails its run only; a closed pool leaves the hashing to this thread', async () => {
  await withPool(file, 1, async (fh, pool) => {
    await assert.rejects(pool.hash({ fd: fh.fd }, size - 100, Uint32Array.of(8192), Algo.Blake3), /changed size/);
    const ok = await pool.hash({ fd: fh.fd }, 0, Uint32Array.of(100, 200), Algo.Blake3);
    assert.equal(ok.length, 64, 'the worker still answers');
    const here = await listOf(fileSource(fh, size), Algo.Blake3);
    pool.close();
    await assert.rejects(pool.hash({ fd: fh.fd }, 0, Uint32Array.of(100), Algo.Blake3), /closed/);
    const fallback = await listOf(fileSource(fh, size, pool), Algo.Blake3);
    assert.ok(fallback.hashes.equals(here.hashes));
    assert.deepEqual(fallback.lengths, here.lengths);
  });
});

test('a file that shrinks while it is chunked fails the list, with hash workers too', async () => {
  const small = join(dir, 'shrinks.bin');
  writeFileSync(small, data);
  await withPool(small, 1, async (fh, pool) => {
    const source = fileSource(fh, size, pool);
    const shrinking: Source = {
      ...source,
      read: async (o, n, into) => {
        if (o >= 32 << 20) truncateSync(small, 40 << 20);
        return source.read(o, n, into);
      },
    };
    await assert.rejects(listOf(shrinking, Algo.Blake3), /changed size/);
  });
});
