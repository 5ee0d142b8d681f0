// The page's Source over a picked file (client/src/blob-source.ts), on Node's file-backed Blobs
// (`openAsBlob`), which read and check a file as the browser's do: a pass over the file goes
// through one stream and chunks exactly as the file read directly does, other reads are slices,
// and a file changed during a pass fails the next read.
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, openAsBlob, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import '../../shared/src/chunking/wasm.ts';
import { READ_SLICE, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import WebSocket from 'ws';
import { push } from '../../shared/src/session/delta-client.ts';
import { Rng, applyEdits, fastRandomBytes } from '../../harness/testdata.ts';
import { testServer } from '../../harness/helpers.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { nodeHashPool } from '../../shared/src/chunking/hash-workers-node.ts';
import { DENSE_GAP, NEAR_GAP, RECENT_BYTES, STREAM_STALL_MS, blobSource } from '../src/blob-source.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'dsync-blob-source-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `fn` with every `Blob.arrayBuffer` call's size recorded. */
async function readsOf<T>(fn: () => Promise<T>): Promise<{ value: T; sizes: number[] }> {
  const sizes: number[] = [];
  const original = Blob.prototype.arrayBuffer;
  Blob.prototype.arrayBuffer = function (this: Blob) {
    sizes.push(this.size);
    return original.call(this);
  };
  try {
    return { value: await fn(), sizes };
  } finally {
    Blob.prototype.arrayBuffer = original;
  }
}

test('a pass over the file goes through one stream and chunks as the file read directly; other reads are slices', async () => {
  const bytes = fastRandomBytes(3, (36 << 20) + 4321);
  const file = path.join(dir, 'a.bin');
  writeFileSync(file, bytes);
  const source = blobSource(await openAsBlob(file));
  assert.equal(source.size, bytes.length);
  const { value: index, sizes } = await readsOf(() => chunkSource(source, DEFAULT_PARAMS, DEFAULT_ALGO));
  // the only slice reads of the pass are the one-byte checks that the file is unchanged: at its
  // first read, every 16 MiB (0, 16, 32 MiB of its 4 MiB reads) and at the read that reaches
  // the file's end
  assert.deepEqual(sizes, [1, 1, 1, 1]);
  const fh = await open(file);
  try {
    const direct = await chunkSource(fileSource(fh, bytes.length), DEFAULT_PARAMS, DEFAULT_ALGO);
    assert.deepEqual(index.lengths, direct.lengths);
    assert.deepEqual(index.hashes, direct.hashes);
    assert.deepEqual(index.root, direct.root);
  } finally {
    await fh.close();
  }
  // reads elsewhere (a sample, chunks to refine) are slices, and so is one the stream passed
  const { value: some, sizes: slices } = await readsOf(() => source.read(12_345, 70_000));
  assert.deepEqual(some, bytes.subarray(12_345, 82_345));
  assert.deepEqual(slices, [70_000]);
  assert.deepEqual(await source.read(0, 1000), bytes.subarray(0, 1000));
  // a new pass from the start streams again
  const again = await readsOf(() => source.read(0, 4 << 20));
  assert.deepEqual(again.value, bytes.subarray(0, 4 << 20));
  assert.deepEqual(again.sizes, [1]);
  const slice = await source.blobSlice!(100, 50).arrayBuffer();
  assert.deepEqual(new Uint8Array(slice), bytes.subarray(100, 150));
});

test('reads that follow one another closely go through one stream, skipping the bytes between, once they are dense; others are slices', async () => {
  const bytes = fastRandomBytes(6, (12 << 20) + 777);
  const file = path.join(dir, 'near.bin');
  writeFileSync(file, bytes);
  const source = blobSource(await openAsBlob(file));
  // a sender's reads of scattered short stretches, in file order, several asked for at once,
  // the gaps between them a quarter of DENSE_GAP on average
  const reads: [number, number][] = [];
  for (let at = 1000, k = 0; at < bytes.length - 70_000; k++) {
    const length = 1 + ((k * 7919) % 60_000);
    reads.push([at, length]);
    at += length + ((k * 104_729) % (DENSE_GAP / 2));
  }
  // (every other read into a buffer of its caller's, as a sender's into its message buffer)
  const intos = reads.map(([, length], i) => (i % 2 ? new Uint8Array(length + 10) : undefined));
  const { value: got, sizes } = await readsOf(() => Promise.all(reads.map(([at, length], i) => source.read(at, length, intos[i]))));
  for (const [i, [at, length]] of reads.entries()) assert.deepEqual(got[i], bytes.subarray(at, at + length), `read ${i}`);
  assert.ok(got.filter((g, i) => intos[i] && g.buffer === intos[i]!.buffer).length > reads.length / 3, 'streamed reads fill the buffer given');
  // the first few are slices, until the gaps average DENSE_GAP; then one stream, which checks
  // the file at its first read and once per 16 MiB
  const slices = sizes.filter((n) => n > 1).length;
  assert.ok(slices >= 1 && slices <= 8, `${slices} of ${reads.length} reads as slices`);
  assert.ok(sizes.length - slices <= 1 + Math.ceil(bytes.length / (16 << 20)), `${sizes.length - slices} checks`);
  // one before the last read is a slice
  const back = await readsOf(() => source.read(reads.at(-1)![0] - 5000, 100));
  assert.deepEqual(back.value, bytes.subarray(reads.at(-1)![0] - 5000, reads.at(-1)![0] - 4900));
  assert.deepEqual(back.sizes, [100]);
  // sparse reads, each near the one before but the gaps above DENSE_GAP, are slices
  const fresh = blobSource(await openAsBlob(file));
  const sparse = await readsOf(async () => {
    for (let at = 0; at < bytes.length - 1000; at += (3 * NEAR_GAP) / 4 + 1000) assert.deepEqual(await fresh.read(at, 1000), bytes.subarray(at, at + 1000));
  });
  assert.deepEqual([...new Set(sparse.sizes)], [1000]);
});

test('a file changed while near reads stream fails them', async () => {
  const file = path.join(dir, 'near-changed.bin');
  writeFileSync(file, fastRandomBytes(7, 40 << 20));
  const source = blobSource(await openAsBlob(file));
  let at = 0;
  const dense = await readsOf(async () => {
    for (; at < 4 << 20; at += 100_000) await source.read(at, 1000);
  });
  assert.ok(dense.sizes.filter((n) => n === 1000).length < 10, 'the reads stream');
  appendFileSync(file, 'an edit made while syncing');
  // reads on, each near the one before: the stream checks the file within 16 MiB
  await assert.rejects(async () => {
    for (; at < (40 << 20) - 1000; at += 100_000) await source.read(at, 1000);
  }, { name: 'NotReadableError' });
});

test('a file changed during a pass fails the next read, streamed or not', async () => {
  const file = path.join(dir, 'b.bin');
  writeFileSync(file, fastRandomBytes(4, 12 << 20));
  const source = blobSource(await openAsBlob(file));
  await source.read(0, 4 << 20);
  appendFileSync(file, 'an edit made while syncing');
  await assert.rejects(source.read(4 << 20, 4 << 20), { name: 'NotReadableError' });
  await assert.rejects(source.read(0, 1000), { name: 'NotReadableError' });
});

test('a cancelled transfer reads no more', async () => {
  const file = path.join(dir, 'c.bin');
  writeFileSync(file, fastRandomBytes(5, 2 << 20));
  let cancelled = false;
  const source = blobSource(await openAsBlob(file), {
    check: () => {
      if (cancelled) throw new Error('cancelled');
    },
  });
  await source.read(0, 1 << 20);
  cancelled = true;
  await assert.rejects(source.read(1 << 20, 1 << 20), /cancelled/);
});

test('a stream that delivers nothing is given up after STREAM_STALL_MS: the read completes by slices, and so do later passes', async () => {
  const bytes = fastRandomBytes(5, (2 << 20) + 99);
  let streams = 0;
  // A Blob whose streams never deliver (as Chromium's now and then does): its slices are of its kind.
  class StalledBlob extends Blob {
    override slice(start?: number, end?: number): Blob {
      return new StalledBlob([super.slice(start, end)]);
    }
    override stream(): ReadableStream<Uint8Array<ArrayBuffer>> {
      streams++;
      return new ReadableStream({ type: 'bytes', pull: () => new Promise(() => {}) }) as ReadableStream<Uint8Array<ArrayBuffer>>;
    }
  }
  const source = blobSource(new StalledBlob([bytes as Uint8Array<ArrayBuffer>]));
  const t0 = performance.now();
  assert.deepEqual(await source.read(0, 2 << 20), bytes.subarray(0, 2 << 20));
  const ms = performance.now() - t0;
  // a deadline: not before it, and (generous for a loaded machine) not never
  assert.ok(ms >= STREAM_STALL_MS - 50 && ms < STREAM_STALL_MS + 30_000, `gave up after ${ms} ms`);
  assert.equal(streams, 1);
  // the source reads by slices from then on: a new pass starts no stream (so waits on none)
  assert.deepEqual(await source.read(0, bytes.length), bytes);
  assert.equal(streams, 1);
});

test("the pass's last RECENT_BYTES serve reads behind it from memory once one is asked for while it runs; older ones are slices", async () => {
  const bytes = fastRandomBytes(11, RECENT_BYTES + (13 << 20) + 777);
  const file = path.join(dir, 'recent.bin');
  writeFileSync(file, bytes);
  const source = blobSource(await openAsBlob(file));
  // a sample read before the pass keeps nothing
  assert.equal(source.holds!(0, 1000), false);
  assert.deepEqual(await source.read(5000, 100), bytes.subarray(5000, 5100));
  // the pass, as chunking reads it; a read behind it is asked for after its first slice
  await source.read(0, READ_SLICE);
  assert.equal(source.holds!(100, 1000), false, 'the slice before the first such read is not kept');
  for (let at = READ_SLICE; at < bytes.length; at += READ_SLICE) await source.read(at, Math.min(READ_SLICE, bytes.length - at));
  const from = bytes.length - RECENT_BYTES;
  const rng = new Rng(11);
  // reads anywhere in the last RECENT_BYTES, across the pass's slices too, come from memory
  const sliceEnd = from + (READ_SLICE - (from % READ_SLICE));
  const cases = [[from, 1000], [bytes.length - 10, 10], [sliceEnd - 500, 1000], [from, RECENT_BYTES]];
  for (let k = 0; k < 200; k++) {
    const length = 1 + rng.int(200_000);
    cases.push([from + rng.int(RECENT_BYTES - length), length]);
  }
  const { sizes } = await readsOf(async () => {
    for (const [offset, length] of cases) {
      assert.equal(source.holds!(offset, length), true, `holds ${offset} +${length}`);
      const into = new Uint8Array(length + 7);
      assert.deepEqual(await source.read(offset, length, into), bytes.subarray(offset, offset + length), `read ${offset} +${length}`);
    }
  });
  assert.deepEqual(sizes, [], 'no slice read');
  // older bytes are not held, and are read as slices
  assert.equal(source.holds!(from - 1, 100), false);
  const old = await readsOf(() => source.read(from - 1, 100));
  assert.deepEqual(old.value, bytes.subarray(from - 1, from + 99));
  assert.deepEqual(old.sizes, [100]);
});

test("with a hash worker, the pass's slices come back with their hashes and serve the reads behind it from memory", async () => {
  const bytes = fastRandomBytes(13, OFF_THREAD_MIN + (9 << 20) + 4321);
  const file = path.join(dir, 'handed.bin');
  writeFileSync(file, bytes);
  const pool = nodeHashPool(1)!;
  try {
    let handedOver = 0;
    const source = blobSource(await openAsBlob(file), {
      hashRun: (offset, lengths, algo, pieces, onSpent) => {
        handedOver++;
        return pool.hash(null, offset, lengths, algo, pieces, true, onSpent);
      },
    });
    // a read behind the pass is asked for after its first slice (as a sender's would be)
    const read = source.read;
    source.read = async (offset, length, into) => {
      const r = await read(offset, length, into);
      if (offset === 0) source.holds!(0, 1);
      return r;
    };
    const index = await chunkSource(source, DEFAULT_PARAMS, DEFAULT_ALGO);
    const fh = await open(file, 'r');
    try {
      const here = await chunkSource(fileSource(fh, bytes.length), DEFAULT_PARAMS, DEFAULT_ALGO);
      assert.deepEqual(index.lengths, here.lengths);
      assert.deepEqual(index.hashes, here.hashes);
    } finally {
      await fh.close();
    }
    assert.ok(handedOver > 10, `${handedOver} runs handed over`);
    // the last RECENT_BYTES, each slice's buffer back from the worker: no slice read
    const from = bytes.length - RECENT_BYTES;
    const rng = new Rng(13);
    const { sizes } = await readsOf(async () => {
      for (let k = 0; k < 100; k++) {
        const length = 1 + rng.int(READ_SLICE + 1000);
        const offset = from + rng.int(RECENT_BYTES - length);
        assert.equal(source.holds!(offset, length), true);
        assert.deepEqual(await source.read(offset, length), bytes.subarray(offset, offset + length), `read ${offset} +${length}`);
      }
    });
    assert.deepEqual(sizes, [], 'no slice read');
  } finally {
    pool.close();
  }
});

test('a push from a Blob source completes where its list is held back for the bytes kept: an unchanged file (one long run) and scattered edits, refined from memory', async () => {
  const server = await testServer();
  try {
    const v1 = fastRandomBytes(12, 80 << 20);
    const file = path.join(dir, 'held.bin');
    const pushOf = async (content: Uint8Array) => {
      writeFileSync(file, content);
      const source = blobSource(await openAsBlob(file));
      // the sender's reads (not the pass's, which go in READ_SLICE steps from the start) of
      // bytes the source does not hold: each a slice read
      const missed: number[] = [];
      const read = source.read;
      source.read = (offset, length, into) => {
        if (offset % READ_SLICE && !source.holds!(offset, length)) missed.push(offset);
        return read(offset, length, into);
      };
      return { value: await push(source, { url: server.wsUrl, name: 'held.bin', WebSocket: WebSocket as any }), missed };
    };
    assert.equal((await pushOf(v1)).value.version, 1);
    // the same bytes: the Match Tokens' frontier stays at the start of the one run until the
    // list ends, so a list held back for it would wait forever
    assert.equal((await pushOf(v1)).value.version, 1);
    // edits of up to 256 bytes, ~470 over the file: short runs of lacking chunks, each refined
    // against the receiver's Basis Checksums from the bytes the pass kept
    const v2 = applyEdits(v1, new Rng(12), { kind: 'inverse', total: 60_000, placement: [1 / 3, 1 / 3, 1 / 3] });
    const { value: r, missed } = await pushOf(v2);
    assert.equal(r.version, 2);
    assert.ok(Buffer.from(await server.stored('held.bin', 2)).equals(v2));
    assert.ok(r.refinedBytes > 1_000_000, `refined ${r.refinedBytes}`);
    // (the samples that decide on deflate, read before the pass, are 8)
    assert.ok(missed.length <= 8 + 2, `${missed.length} reads of bytes not held: ${missed.slice(0, 20)}`);
  } finally {
    await server.stop();
  }
});

test('where Blob streams have no BYOB reader (WebKitGTK, Safari before 26.4) nothing is kept: the push completes, byte-exact, with no byte held', async () => {
  const server = await testServer();
  try {
    /** a Blob whose stream is a default one (no BYOB reader) */
    class PlainStreamBlob extends Blob {
      override slice(start?: number, end?: number): Blob {
        return new PlainStreamBlob([super.slice(start, end)]);
      }
      override stream(): ReadableStream<Uint8Array<ArrayBuffer>> {
        const inner = super.stream().getReader();
        return new ReadableStream({ pull: async (c) => {
          const r = await inner.read();
          if (r.done) c.close();
          else c.enqueue(r.value);
        } }) as ReadableStream<Uint8Array<ArrayBuffer>>;
      }
    }
    const v1 = fastRandomBytes(13, 40 << 20);
    const v2 = applyEdits(v1, new Rng(13), { kind: 'inverse', total: 30_000, placement: [1 / 3, 1 / 3, 1 / 3] });
    // every answer of the source's `holds`: a run it says it holds would be refined from memory
    let held = 0;
    const pushOf = (content: Uint8Array) => {
      const source = blobSource(new PlainStreamBlob([content as Uint8Array<ArrayBuffer>]));
      const holds = source.holds!;
      source.holds = (offset, length) => {
        const h = holds(offset, length);
        if (h) held++;
        return h;
      };
      return push(source, { url: server.wsUrl, name: 'plain.bin', WebSocket: WebSocket as any });
    };
    assert.equal((await pushOf(v1)).version, 1);
    const r = await pushOf(v2);
    assert.equal(r.version, 2);
    assert.ok(Buffer.from(await server.stored('plain.bin', 2)).equals(v2));
    // (whether its short runs go whole or are read again and refined is the wire's speed's call)
    assert.equal(held, 0, 'nothing held');
  } finally {
    await server.stop();
  }
});
