// Span-parallel chunking (shared/src/vault/spans.ts, the page's chunk workers): on files of
// random, zero, periodic, repeated and text bytes (fixed seeds), cut in spans of many sizes and
// overlaps (none too: every join then cuts again) by one to three workers, the chunks, their
// keyed ids (and so the version's root, over them) are exactly the serial chunker's (a small file's), and every sealed chunk
// opens to its bytes under its id; a pull's ranges opened by a worker are checked as the vault
// checks them (a flipped bit in a nonce, a ciphertext or a tag, a chunk cut short, a wrong id),
// and node:crypto's sealing and opening (the CLI's workers) read and write WebCrypto's format;
// a push whose next batch is sealed while the one before is placed seals a chunk that repeats
// across them once (a real server on loopback).
// The workers are `serveSpans` in this thread, the very code a page's chunk worker runs, and the
// CLI's worker threads over a real file.
import assert from 'node:assert/strict';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import '../src/chunking/wasm.ts';
import { bufferSource } from '../src/chunking/chunk-index.ts';
import { Rng, randomBytes, textBytes } from '../../harness/testdata.ts';
import { chunkIds, keyedChunks, openVerified } from '../src/vault/chunks.ts';
import { CTR_OVERHEAD, ID_BYTES, Kind, NONCE_BYTES, SEAL_OVERHEAD, Seal, type SealCode, VaultError, hex } from '../src/vault/format.ts';
import { CTR_PIECE, deriveKeys, sealChunk, sealContent, sealedParts, webCipher } from '../src/vault/keys.ts';
import { type CutBatch, SPAN_BYTES, type SpanWorker, joinLists, openInWorkers, serveSpans, serialChunks, spanChunks } from '../src/vault/spans.ts';
import { nodeCipher, nodeSpanWorkers } from '../src/vault/spans-node.ts';
import { gcmContentChunk } from '../../harness/vault-legacy.ts';
import { httpVaultRemote } from '../src/vault/remote.ts';
import { createVault, memoryHeads } from '../src/vault/vault.ts';
import { testServer } from '../../harness/helpers.ts';

/** A file of runs of random bytes, zeros, a short period, text, and copies of earlier runs. */
function file(seed: number, size: number): Uint8Array {
  const r = new Rng(seed);
  const out = new Uint8Array(size);
  for (let at = 0; at < size; ) {
    const n = Math.min(size - at, 1 + r.int(r.next() < 0.3 ? 200_000 : 40_000));
    const kind = r.int(5);
    if (kind === 0) out.set(randomBytes(r.int(1e9), n), at);
    else if (kind === 1) out.fill(0, at, at + n);
    else if (kind === 2) {
      const period = randomBytes(r.int(1e9), 1 + r.int(300));
      for (let i = 0; i < n; i++) out[at + i] = period[i % period.length];
    } else if (kind === 3) out.set(textBytes(r.int(1e9), n), at);
    else if (at > 0) {
      const from = r.int(at);
      for (let i = 0; i < n; i++) out[at + i] = out[from + (i % (at - from))];
    }
    at += n;
  }
  return out;
}

const key = randomBytes(46, 32);

async function serial(bytes: Uint8Array) {
  const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
  const chunks: { offset: number; length: number; id: string }[] = [];
  for await (const batch of keyedChunks(k, bufferSource(bytes))) for (const c of batch) chunks.push({ offset: c.offset, length: c.bytes.length, id: hex(c.id) });
  return chunks;
}

/** Seals `spanned` asked for, and the distinct buffers their ciphertexts lay in (rooms used again). */
const seals = { count: 0, rooms: new Set<ArrayBufferLike>() };

/** The chunks spanChunks gives (each batch sealed whole, every other chunk, or none), and each sealed chunk checked to open to its bytes: by `workers` serveSpans in this thread,
 *  or by the workers of `pool` reading `file`. */
async function spanned<F = Uint8Array>(bytes: Uint8Array, workers: number | { pool: SpanWorker<F>[]; file: F }, span: number | undefined, overlap: number | undefined, seal: 'all' | 'odd' | 'none') {
  const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
  const { pool, file } =
    typeof workers === 'number'
      ? {
          pool: Array.from({ length: workers }, (): SpanWorker<Uint8Array> => {
            const serve = serveSpans<Uint8Array>(Promise.resolve(), async (f, from, to) => f.slice(from, to));
            void serve({ op: 'keys', keys: k });
            return { request: serve };
          }),
          file: bytes,
        }
      : workers;
  const cut = spanChunks(pool as SpanWorker<F | Uint8Array>[], file, bytes.length, { span, overlap });
  const chunks: { offset: number; length: number; id: string }[] = [];
  let n = 0;
  // as a push does (vault.ts): a batch is sealed before the one before it is placed (here:
  // opened and checked), and then that one's room is told free
  const check = async (p: { b: CutBatch; which: number[]; sealed: Promise<Uint8Array[][]> }) => {
    const sealed = await p.sealed;
    for (const [j, i] of p.which.entries()) {
      const plain = await openVerified(k, Kind.Content, p.b.ids[i], Seal.Ctr, Buffer.concat(sealed[j]));
      assert.deepEqual(plain, bytes.subarray(p.b.offsets[i], p.b.offsets[i] + p.b.lengths[i]), 'a sealed chunk opens to its bytes');
      seals.rooms.add(sealed[j][1].buffer);
    }
    if (p.which.length) seals.count++;
    p.b.placed();
  };
  let before: Parameters<typeof check>[0] | null = null;
  for await (const b of cut.batches) {
    const which = b.ids.map((_, i) => i).filter((i) => seal === 'all' || (seal === 'odd' && (n + i) % 2 === 1));
    const now = { b, which, sealed: b.seal(which) };
    if (before) await check(before);
    before = now;
    b.ids.forEach((id, i) => chunks.push({ offset: b.offsets[i], length: b.lengths[i], id: hex(id) }));
    n += b.ids.length;
  }
  if (before) await check(before);
  await cut.settled();
  return chunks;
}

test('span-parallel chunking gives the serial chunks and ids on 40 files of many kinds, in spans of many sizes', async () => {
  const r = new Rng(20261130);
  for (let f = 0; f < 40; f++) {
    const size = f === 0 ? 0 : f === 1 ? 1 : r.int(f < 10 ? 300_000 : 3_000_000);
    const bytes = file(1000 + f, size);
    const want = await serial(bytes);
    const span = [65_536, 100_001, 262_144, 1_000_000][r.int(4)];
    const overlap = [0, 1, 65_536, 70_000, 300_000][r.int(5)];
    const workers = 1 + r.int(3);
    const got = await spanned(bytes, workers, span, overlap, (['all', 'odd', 'none'] as const)[f % 3]);
    const where = `file ${f} (${size} bytes), span ${span}, overlap ${overlap}, ${workers} workers`;
    assert.equal(got.length, want.length, `${where}: chunk count`);
    assert.deepEqual(got, want, where);
  }
  // the seals' rooms were written again once their chunks were placed, and every chunk opened
  assert.ok(seals.rooms.size < seals.count / 2, `${seals.count} seals wrote into ${seals.rooms.size} rooms`);
});

test("serialChunks (a small file's, on its own thread) gives keyedChunks' chunks", async () => {
  const bytes = file(7, 2_500_000);
  const want = await serial(bytes);
  const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
  const cut = serialChunks(k, bufferSource(bytes));
  const got: { offset: number; length: number; id: string }[] = [];
  for await (const b of cut.batches) {
    const sealed = await b.seal([0]);
    assert.deepEqual(await openVerified(k, Kind.Content, b.ids[0], Seal.Ctr, Buffer.concat(sealed[0])), bytes.subarray(b.offsets[0], b.offsets[0] + b.lengths[0]));
    b.ids.forEach((id, i) => got.push({ offset: b.offsets[i], length: b.lengths[i], id: hex(id) }));
  }
  assert.deepEqual(got, want);
});

test("the CLI's chunk worker threads (spans-node.ts) reading a file through its descriptor give the serial chunks and ids on a file of several spans", async () => {
  // 40 MiB of runs of many kinds, with 2 MiB of zeros across the second span's start (no cut
  // shared within the overlap there: that span is cut again from the last true cut)
  const bytes = file(46, 40 << 20);
  bytes.fill(0, SPAN_BYTES - (1 << 20), SPAN_BYTES + (1 << 20));
  const want = await serial(bytes);
  const dir = await mkdtemp(path.join(tmpdir(), 'dsync-spans-'));
  const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
  const threads = nodeSpanWorkers(k, 2)!;
  const fh = await open(path.join(dir, 'file'), 'w+');
  try {
    await fh.writeFile(bytes);
    // the CLI's spans (16 MiB read 1 MiB into the next), then small ones: many joins and re-cuts
    for (const [span, overlap] of [[undefined, undefined], [1 << 20, 65_536]] as const) {
      const got = await spanned(bytes, { pool: threads.workers, file: { fd: fh.fd } }, span, overlap, span ? 'odd' : 'all');
      const where = `span ${span ?? SPAN_BYTES}, overlap ${overlap ?? 'default'}`;
      assert.ok(got.length > 1000, where);
      assert.equal(got.length, want.length, `${where}: chunk count`);
      assert.deepEqual(got, want, where);
    }
  } finally {
    await fh.close();
    await threads.end();
    await rm(dir, { recursive: true, force: true });
  }
});

test('joinLists goes on in the next list at the first cut both share, and gives up when there is none', () => {
  const taken: number[] = [];
  const take = (_l: unknown, i: number) => void taken.push(i);
  // serial cuts 0 10 25 40 52; the next list starts at 20: 20 25 40 52
  const at = { list: { from: 0, lengths: Uint32Array.of(10, 15, 15, 12) }, next: 0, pos: 0 };
  const next = { from: 20, lengths: Uint32Array.of(5, 15, 12) };
  assert.deepEqual(joinLists(at, next, take), { list: next, next: 1, pos: 25 });
  assert.deepEqual(taken, [0, 1]);
  // no cut shared before the list runs out: null, at its end (a true cut)
  taken.length = 0;
  const at2 = { list: { from: 0, lengths: Uint32Array.of(10, 15) }, next: 0, pos: 0 };
  assert.equal(joinLists(at2, { from: 20, lengths: Uint32Array.of(7, 9) }, take), null);
  assert.deepEqual(taken, [0, 1]);
  assert.equal(at2.pos, 25);
  // a cut at the next list's very start
  const at3 = { list: { from: 0, lengths: Uint32Array.of(20, 5) }, next: 0, pos: 0 };
  assert.deepEqual(joinLists(at3, { from: 20, lengths: Uint32Array.of(5) }, take)!.next, 0);
});

for (const where of ['serveSpans in this thread (WebCrypto)', "the CLI's worker threads (node:crypto)"]) {
  test(`openInWorkers over ${where} opens a range's content chunks as openVerified does, and refuses a flipped bit anywhere in a chunk and a chunk that is not its id's`, async () => {
    const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
    const threads = where.startsWith('serveSpans') ? null : nodeSpanWorkers(k, 2)!;
    const serve = serveSpans<Uint8Array>(Promise.resolve(), async (f, from, to) => f.slice(from, to));
    void serve({ op: 'keys', keys: k });
    const open = threads ? openInWorkers(threads.workers) : openInWorkers([{ request: serve }]);
    try {
      // AES-CTR chunks, and (the third) one an earlier dsync sealed with AES-GCM
      const plains = [randomBytes(1, 5000), randomBytes(2, 20_000), randomBytes(3, 100), randomBytes(4, 65_536)];
      const ids = plains.map((p) => chunkIds(k, p, Uint32Array.of(p.length))[0]);
      const seals: SealCode[] = [Seal.Ctr, Seal.Ctr, Seal.Gcm, Seal.Ctr];
      const sealed = await Promise.all(plains.map((p, i) => (seals[i] === Seal.Gcm ? gcmContentChunk(k, ids[i], p) : sealChunk(k, Kind.Content, ids[i], p))));
      const range = () => {
        const out = new Uint8Array(7 + sealed.reduce((n, s) => n + s.length, 0));
        let at = 7;
        const chunks = sealed.map((s, i) => {
          out.set(s, at);
          at += s.length;
          return { at: at - s.length, length: s.length, id: ids[i], seal: seals[i] };
        });
        return { out, chunks };
      };
      const refused = (e: Error) => e instanceof VaultError && /a chunk of vault [0-9a-f]+ does not verify/.test(e.message);
      // twice: each range to the next worker in turn
      for (let n = 0; n < 2; n++) {
        const r = range();
        assert.deepEqual((await open(r.out, r.chunks)).map((p) => Buffer.from(p)), plains.map((p) => Buffer.from(p)));
      }
      // a bit flipped in the counter block, the ciphertext or the last byte of any chunk (an
      // AES-GCM one's nonce, ciphertext or tag)
      for (const c of [0, 1, 2, 3]) {
        for (const at of [0, 40, sealed[c].length - 1]) {
          const flipped = range();
          flipped.out[flipped.chunks[c].at + at] ^= 1;
          await assert.rejects(open(flipped.out, flipped.chunks), refused, `chunk ${c}, byte ${at}`);
        }
      }
      // a chunk cut short, one told the wrong id, one told the wrong seal
      const r = range();
      for (const c of [0, 2]) {
        await assert.rejects(open(range().out, [{ ...r.chunks[c], length: 40 }]), refused);
        await assert.rejects(open(range().out, [{ ...r.chunks[c], id: ids[1] }]), refused);
        await assert.rejects(open(range().out, [{ ...r.chunks[c], seal: seals[c] === Seal.Gcm ? Seal.Ctr : Seal.Gcm }]), refused);
      }
      // a chunk sealed under another chunk's id opens, but its bytes are not that id's
      for (const wrong of [await sealChunk(k, Kind.Content, ids[0], plains[1]), await gcmContentChunk(k, ids[0], plains[1])]) {
        await assert.rejects(open(wrong, [{ at: 0, length: wrong.length, id: ids[0], seal: wrong.length === plains[1].length + CTR_OVERHEAD ? Seal.Ctr : Seal.Gcm }]), (e: Error) => e instanceof VaultError && /do not match its id/.test(e.message));
      }
    } finally {
      await threads?.end();
    }
  });
}

test("nodeCipher and webCipher: the same AES-CTR bytes (the counter carried over all 128 bits) and the same AES-GCM openings; what one seals the other opens", async () => {
  const k = await deriveKeys('0123456789abcdef0123456789abcdef', key);
  const data = randomBytes(9, 100);
  // counter blocks whose increments carry across the low 32 and 64 bits
  for (const counter of [new Uint8Array(16), Uint8Array.of(...new Array(12).fill(0), 0xff, 0xff, 0xff, 0xfe), Uint8Array.of(1, ...new Array(7).fill(0), ...new Array(8).fill(0xff))]) {
    const whole = Buffer.from(await webCipher.ctr(k, counter, 0, data));
    for (const skip of [0, 1, 5, 15]) {
      const web = Buffer.from(await webCipher.ctr(k, counter, skip, data.subarray(skip)));
      assert.deepEqual(Buffer.from(await nodeCipher.ctr(k, counter, skip, data.subarray(skip))), web, `counter ${Buffer.from(counter).toString('hex')}, from byte ${skip}`);
      assert.deepEqual(web, whole.subarray(skip), 'a key stream from within its first block');
    }
    // written into a room, in pieces (CTR_PIECE) across the carries: the same bytes
    const long = randomBytes(10, 3 * CTR_PIECE + 17);
    const want = Buffer.from(await webCipher.ctr(k, counter, 0, long));
    for (const cipher of [webCipher, nodeCipher]) {
      const room = new Uint8Array(long.length + 100).fill(7);
      const got = await cipher.ctr(k, counter, 0, long, room);
      assert.equal(got.buffer, room.buffer);
      assert.deepEqual(Buffer.from(got), want);
      assert.ok(room.subarray(long.length).every((b) => b === 7), 'nothing written past the data');
    }
  }
  for (const size of [1, 100, 5000, 65_536]) {
    const plains = [randomBytes(size, size), randomBytes(size + 1, 17)];
    const ids = plains.map((p) => chunkIds(k, p, Uint32Array.of(p.length))[0]);
    for (const [by, cipher] of [['webCipher', webCipher], ['nodeCipher', nodeCipher]] as const) {
      // (Buffers: an opening leaves its input as it was, though a Buffer's slice is a view)
      const [first, second] = sealedParts(await sealContent(cipher, k, ids, plains), plains.map((p) => p.length)).map((parts) => Buffer.concat(parts));
      for (const other of [webCipher, nodeCipher]) {
        assert.deepEqual(Buffer.from(await openVerified(k, Kind.Content, ids[0], Seal.Ctr, first, other)), Buffer.from(plains[0]), `${by}'s, ${size} bytes`);
        assert.deepEqual(Buffer.from(await openVerified(k, Kind.Content, ids[1], Seal.Ctr, second, other)), Buffer.from(plains[1]));
        for (const at of [0, CTR_OVERHEAD, first.length - 1]) {
          const flipped = Buffer.from(first);
          flipped[at] ^= 0x80;
          await assert.rejects(openVerified(k, Kind.Content, ids[0], Seal.Ctr, flipped, other), /does not verify/, `byte ${at} of ${size}`);
        }
      }
    }
    const gcm = await gcmContentChunk(k, ids[0], plains[0]);
    assert.deepEqual(Buffer.from((await nodeCipher.openGcm(k, ids[0], gcm))!), Buffer.from(plains[0]));
    assert.equal(nodeCipher.openGcm(k, randomBytes(size + 1, ID_BYTES), gcm), null);
    for (const at of [0, NONCE_BYTES, gcm.length - 1]) {
      const flipped = gcm.slice();
      flipped[at] ^= 0x80;
      assert.equal(nodeCipher.openGcm(k, ids[0], flipped), null, `byte ${at} of ${size}`);
    }
    assert.equal(nodeCipher.openGcm(k, ids[0], gcm.subarray(0, gcm.length - 1)), null);
    assert.equal(nodeCipher.openGcm(k, ids[0], gcm.subarray(0, SEAL_OVERHEAD - 1)), null);
  }
});

test("a push seals each distinct chunk once when a chunk repeats in the batch that is sealed while the one before is placed, and the file comes back byte-exact", async () => {
  const server = await testServer();
  try {
    const { vault } = await createVault(httpVaultRemote(server.url), 'a passphrase of the test', memoryHeads(), { m: 64, t: 1, p: 1 });
    // 300 KiB of random bytes eight times, cut in spans of 256 KiB: consecutive batches hold
    // the same chunks
    const block = randomBytes(47, 300 << 10);
    const bytes = new Uint8Array(8 * block.length);
    for (let i = 0; i < 8; i++) bytes.set(block, i * block.length);
    const pool = Array.from({ length: 2 }, (): SpanWorker<Uint8Array> => {
      const serve = serveSpans<Uint8Array>(Promise.resolve(), async (f, from, to) => f.slice(from, to));
      void serve({ op: 'keys', keys: vault.keys });
      return { request: serve };
    });
    const cut = spanChunks(pool, bytes, bytes.length, { span: 256 << 10, overlap: 128 << 10 });
    const report = await vault.push('repeats.bin', bufferSource(bytes), 1_700_000_000_000, { cut });
    const distinct = new Set<string>();
    for await (const batch of keyedChunks(vault.keys, bufferSource(bytes))) for (const c of batch) distinct.add(hex(c.id));
    assert.ok(report.chunks > 2 * distinct.size, `the chunks repeat (${report.chunks} chunks, ${distinct.size} distinct)`);
    assert.equal(report.chunks - report.reused, distinct.size, 'each distinct chunk sealed once');
    const parts: Uint8Array[] = [];
    await vault.pull('repeats.bin', async (x) => void parts.push(x.slice()));
    assert.ok(Buffer.concat(parts).equals(bytes));
  } finally {
    await server.stop();
  }
});
