// A vault's formats and keys (docs/vaults.md): every codec round-trips and refuses every
// truncation (and, sealed, every bit flip); a wrong passphrase, a keyfile of another vault, a
// mistyped recovery key and a chunk moved to another place are clear errors; keyed chunking
// cuts alike with one key, differently with two, and leaves the default cuts alone.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import '../src/chunking/wasm.ts';
import { DsyncChunker } from '../src/chunking/wasm.ts';
import { bufferSource } from '../src/chunking/chunk-index.ts';
import { DEFAULT_PARAMS } from '../src/wire/protocol.ts';
import { randomBytes } from '../../harness/testdata.ts';
import { gcmContentChunk } from '../../harness/vault-legacy.ts';
import { chunkIds, keyedChunks, listPieces, openVerified } from '../src/vault/chunks.ts';
import {
  CTR_OVERHEAD,
  Kind,
  Seal,
  type SealCode,
  type Ref,
  type Tree,
  VaultError,
  decodeHeadRecord,
  decodeManifest,
  decodeTree,
  encodeHeadRecord,
  encodeManifest,
  encodeTree,
  hex,
  unhex,
  padme,
} from '../src/vault/format.ts';
import { addVersion, deleteFile, renameFile, seen } from '../src/vault/tree.ts';
import { KEYFILE_BYTES, checkKey, deriveKeys, fromRecoveryKey, newVaultId, newVaultKey, openChunk, openHead, recoveryKey, sealChunk, sealContent, sealHead, sealedParts, unwrapKey, wrapKey, webCipher } from '../src/vault/keys.ts';

/** A small Argon2id for tests that are not about its cost. */
const LIGHT = { m: 64, t: 1, p: 1 };

let seed = 1;
const bytes = (n: number) => randomBytes(seed++, n);
const ref = (): Ref => ({ id: bytes(32), pack: hex(bytes(32)), offset: seed * 977, length: 29 + (seed % 70000), seal: Seal.Gcm });
/** A content chunk's Ref: sealed with AES-CTR, or (every third) AES-GCM as an earlier dsync sealed. */
let made = 0;
const contentRef = (): Ref => ({ ...ref(), seal: made++ % 3 ? Seal.Ctr : Seal.Gcm });

/** `decode` refuses every proper prefix of `b` with a VaultError. */
async function refusesTruncations(b: Uint8Array, decode: (b: Uint8Array) => unknown): Promise<void> {
  for (let n = 0; n < b.length; n++) await assert.rejects(async () => decode(b.subarray(0, n)), VaultError, `a prefix of ${n} of ${b.length} bytes`);
}

/** `decode` refuses `b` with any one bit flipped. */
async function refusesBitFlips(b: Uint8Array, decode: (b: Uint8Array) => unknown): Promise<void> {
  for (let i = 0; i < b.length; i++) {
    for (let bit = 0; bit < 8; bit++) {
      const c = b.slice();
      c[i] ^= 1 << bit;
      await assert.rejects(async () => decode(c), VaultError, `bit ${bit} of byte ${i}`);
    }
  }
}

test('PADME: sizes as the formula says, never smaller, at most 12% more, and few distinct sizes', () => {
  assert.deepEqual([0, 1, 2, 3, 9, 100, 1000, 4097].map(padme), [0, 1, 2, 3, 10, 104, 1024, 4352]);
  const seen = new Set<number>();
  for (let L = 1; L < 1 << 20; L += 1 + (L >> 7)) {
    const p = padme(L);
    assert.ok(p >= L && p <= L * 1.12 + 1, `${L} → ${p}`);
    assert.equal(padme(p), p, 'a padded size pads to itself');
    seen.add(p);
  }
  assert.equal(padme(5 << 20), 5 << 20);
  assert.equal(padme((4 << 20) + 1), (4 << 20) + (1 << 17));
});

test('manifest and tree: round trip, every truncation refused, trailing bytes refused, names, versions and ids checked', async () => {
  const file = bytes(16);
  const version = bytes(16);
  const refs = Array.from({ length: 5 }, contentRef);
  assert.ok(refs.some((r) => r.seal === Seal.Gcm) && refs.some((r) => r.seal === Seal.Ctr));
  const m = encodeManifest({ file, version, refs });
  assert.deepEqual(decodeManifest(m), { file, version, refs, packs: refs.map((r) => r.pack) });
  assert.deepEqual(decodeManifest(encodeManifest({ file, version, refs: [] })).refs, []);
  const many = Array.from({ length: 1000 }, contentRef);
  assert.deepEqual(decodeManifest(encodeManifest({ file, version, refs: many })).refs, many, 'a list that grows the writer many times');
  // a manifest counts its packs and its chunks: every truncation and every trailing byte is refused
  for (let n = 0; n < m.length; n++) assert.throws(() => decodeManifest(m.subarray(0, n)), VaultError, `${n}`);
  assert.throws(() => decodeManifest(Uint8Array.of(...m, 0)), /too many/);
  assert.throws(() => decodeManifest(Uint8Array.of(0x4e, ...file, ...version)), /unknown version/);
  // each pack once in the table, in the previous order, then new ones as they first appear
  const [p1, p2, p3] = [hex(bytes(32)), hex(bytes(32)), hex(bytes(32))];
  const chunkAt = (pack: string, offset: number): Ref => ({ id: bytes(32), pack, offset, length: 8000, seal: Seal.Ctr });
  const chunks = [chunkAt(p3, 0), chunkAt(p1, 0), chunkAt(p3, 8000), chunkAt(p2, 0), chunkAt(p1, 8000)];
  assert.deepEqual(decodeManifest(encodeManifest({ file, version, refs: chunks })).packs, [p3, p1, p2]);
  const ordered = encodeManifest({ file, version, refs: chunks }, [p2, hex(bytes(32)), p1]);
  assert.deepEqual(decodeManifest(ordered), { file, version, refs: chunks, packs: [p2, p1, p3] });
  // 1 + 16 + 16 + 1 + 3 × 32 + 1, then per chunk 32 + 1 (pack) + 2 (length) + 1 or 2 (offset)
  assert.equal(ordered.length, 34 + 96 + 1 + 5 * 35 + 7);
  // strict: a longer varint than needed, a pack index past the table, a pack twice, an unused pack
  const start = [0x4f, ...file, ...version];
  const entry = (k: number[]) => [...bytes(32), ...k, 0, 0x80, 0x01];
  assert.deepEqual(decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...entry([0]))).refs[0].length, 128);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...entry([0x80, 0]))), /longer form/);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...entry([1]))), /pack 1 of 1/);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 2, ...unhex(p1), ...unhex(p1), 1, ...entry([0]))), /a pack twice/);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 2, ...unhex(p1), ...unhex(p2), 1, ...entry([0]))), /no chunk lies in/);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...bytes(32), 0, 0, 28)), /sealed chunk of 28 bytes/);
  assert.throws(() => decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...bytes(32), 0, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x40)), /over 2\^32/);
  // 0x4f, the manifest before AES-CTR: every chunk AES-GCM; 0x50: the pack index times 2 plus the seal
  assert.equal(decodeManifest(Uint8Array.of(...start, 1, ...unhex(p1), 1, ...entry([0]))).refs[0].seal, Seal.Gcm);
  const v4 = [0x50, ...file, ...version];
  assert.deepEqual([0, 1].map((k) => decodeManifest(Uint8Array.of(...v4, 1, ...unhex(p1), 1, ...entry([k]))).refs[0].seal), [Seal.Gcm, Seal.Ctr]);
  assert.throws(() => decodeManifest(Uint8Array.of(...v4, 1, ...unhex(p1), 1, ...entry([2]))), /pack 1 of 1/);
  assert.equal(decodeManifest(Uint8Array.of(...v4, 1, ...unhex(p1), 1, ...bytes(32), 1, 0, 17)).refs[0].length, 17);
  assert.throws(() => decodeManifest(Uint8Array.of(...v4, 1, ...unhex(p1), 1, ...bytes(32), 1, 0, 16)), /sealed chunk of 16 bytes/);
  assert.throws(() => decodeManifest(Uint8Array.of(...v4, 1, ...unhex(p1), 1, ...bytes(32), 0, 0, 28)), /sealed chunk of 28 bytes/);
  assert.throws(() => encodeManifest({ file, version, refs: [{ ...chunkAt(p1, 0), length: 16 }] }), /sealed chunk of 16 bytes/);
  assert.throws(() => encodeManifest({ file: bytes(15), version, refs }), /16 bytes/);

  const v = (n: number, device = 'laptop') => ({ n, id: bytes(16), size: 12345678901 + n, root: bytes(32), mtime: 1764400000000 + n, pushed: 1764400000500 + n, device, manifest: [ref(), ref()], packs: [hex(bytes(32))] });
  const tree: Tree = {
    keep: 3,
    files: [
      // version 1 as an earlier dsync wrote it: no root (its manifest's is taken)
      { id: bytes(16), name: 'b/ü.txt', deleted: 0, versions: [{ ...v(1), root: null }, v(2, 'téléphone'), v(5)] },
      { id: bytes(16), name: 'a', deleted: 1764400009999, versions: [{ ...v(7), size: 0, manifest: [], packs: [] }] },
    ],
  };
  const t = encodeTree(tree);
  assert.equal(t[0], 0x57);
  assert.deepEqual(decodeTree(t), { keep: 3, files: [tree.files[1], tree.files[0]] }, 'in name order');
  await refusesTruncations(t, decodeTree);
  assert.throws(() => decodeTree(Uint8Array.from([...t, 0])), /too many/);
  const one = (f: Partial<Tree['files'][0]>, keep = 3) => encodeTree({ keep, files: [{ ...tree.files[0], ...f }] });
  assert.throws(() => one({ name: '../x' }), /invalid file name/);
  assert.throws(() => one({ versions: [] }), /0 versions/);
  assert.throws(() => one({}, 2), /3 versions \(1 to 2\)/);
  assert.throws(() => one({}, 0), /1 to 10000 versions/);
  assert.throws(() => one({ versions: [v(1, '')] }), /device label/);
  assert.throws(() => one({ versions: [v(1, 'a\nb')] }), /device label/);
  assert.throws(() => one({ versions: [v(1, 'x'.repeat(65))] }), /device label/);
  assert.throws(() => one({ id: bytes(15) }), /16 bytes/);

  // a hostile list, byte by byte: the prefix is the tree's version, keep and count
  const head = (keep: number, count: number) => [0x57, keep >> 8, keep & 255, 0, 0, 0, count];
  const body = (f: Tree['files'][0]) => encodeTree({ keep: 9, files: [f] }).subarray(7);
  const fa = { ...tree.files[0], name: 'a', versions: [v(1)] };
  assert.deepEqual(decodeTree(Uint8Array.from([...head(9, 1), ...body(fa)])).files, [fa]);
  assert.throws(() => decodeTree(Uint8Array.from([0x54, ...head(9, 1).slice(1), ...body(fa)])), /unknown version/);
  // a tree of the format before versions carried their root and named their packs: refused, saying so
  assert.throws(() => decodeTree(Uint8Array.from([0x55, ...head(9, 1).slice(1), ...body(fa)])), /older format .* earlier dsync/);
  assert.throws(() => one({ versions: [{ ...v(1), root: bytes(31) }] }), /root is 32 bytes/);
  // the root's flag: 1 (a root follows) or 0, nothing else
  const flagAt = 7 + 16 + 2 + 1 + 8 + 4 + 4 + 16 + 8;
  const flagged = Uint8Array.from([...head(9, 1), ...body(fa)]);
  assert.equal(flagged[flagAt], 1);
  flagged[flagAt] = 2;
  assert.throws(() => decodeTree(flagged), /bad root flag/);
  // a tree of the format whose versions carry the default chunking's root (0x56): read, the roots
  // dropped (a version's root is then its manifest's)
  const v3 = Uint8Array.from([...head(9, 1), ...body(fa)]);
  v3[0] = 0x56;
  const asV3 = Uint8Array.from([...v3.subarray(0, flagAt), ...v3.subarray(flagAt + 1)]);
  assert.deepEqual(decodeTree(asV3).files, [{ ...fa, versions: [{ ...v(1), ...fa.versions[0], root: null }] }]);
  await refusesTruncations(asV3, decodeTree);
  const twoPacks = [hex(bytes(32)), hex(bytes(32))].sort();
  assert.deepEqual(decodeTree(encodeTree({ keep: 9, files: [{ ...fa, versions: [{ ...v(1), packs: twoPacks }] }] })).files[0].versions[0].packs, twoPacks);
  assert.throws(() => one({ versions: [{ ...v(1), packs: [...twoPacks].reverse() }] }), /not ascending/);
  assert.throws(() => one({ versions: [{ ...v(1), packs: [twoPacks[0], twoPacks[0]] }] }), /not ascending/);
  const swapped = encodeTree({ keep: 9, files: [{ ...fa, versions: [{ ...v(1), packs: twoPacks }] }] });
  swapped.set(unhex(twoPacks[1]), swapped.length - 64);
  swapped.set(unhex(twoPacks[0]), swapped.length - 32);
  assert.throws(() => decodeTree(swapped), /packs out of order or twice/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(0, 1), ...body(fa)])), /bad retention/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(0xffff, 1), ...body(fa)])), /bad retention/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(9, 2), ...body(fa), ...body(fa)])), /file id twice/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(9, 2), ...body(fa), ...body({ ...fa, id: bytes(16) })])), /name order/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(9, 1), ...body({ ...fa, versions: [v(2), v(2)] })])), /out of order/);
  assert.throws(() => decodeTree(Uint8Array.from([...head(1, 1), ...body({ ...fa, versions: [v(1), v(2)] })])), /2 versions \(1 to 1\)/);
  assert.throws(() => decodeTree(Uint8Array.from([0x56, 0, 9, 0xff, 0xff, 0xff, 0xff])), /counts/);
  const raw = (name: string, patch: (b: Uint8Array) => void = () => {}) => {
    const b = Uint8Array.from([...head(9, 1), ...body({ ...fa, name: 'x'.repeat(new TextEncoder().encode(name).length) })]);
    b.set(new TextEncoder().encode(name), 7 + 16 + 2);
    patch(b);
    return b;
  };
  assert.throws(() => decodeTree(raw('a/../b')), /invalid name/);
  assert.throws(() => decodeTree(raw('ab', (b) => (b[7 + 16 + 2] = 0xff))), /not UTF-8/);
  // a version numbered 0, a device label with a control character
  const at = 7 + 16 + 2 + 1 + 8 + 4; // the first version
  assert.throws(() => decodeTree(raw('a', (b) => b.fill(0, at, at + 4))), /out of order/);
  assert.throws(() => decodeTree(raw('a', (b) => (b[at + 4 + 16 + 8 + 32 + 16 + 1] = 7))), /bad device label/);
});

test('head record: round trip, padded to a PADME size, every truncation and a non-zero padding refused', async () => {
  const h = { seq: 7, prev: bytes(32), time: 1764400000123, tree: Array.from({ length: 3 }, ref) };
  const b = encodeHeadRecord(h);
  assert.equal(b.length, padme(8 + 32 + 8 + 4 + 3 * 72));
  assert.deepEqual(decodeHeadRecord(b), h);
  await refusesTruncations(b, decodeHeadRecord);
  const c = b.slice();
  c[c.length - 1] = 1;
  assert.throws(() => decodeHeadRecord(c), /padded wrongly/);
});

test('keyfile: the passphrase opens it, a wrong one or another vault\'s id is a clear error, every truncation and bit flip refused', async () => {
  const id = newVaultId();
  const key = newVaultKey();
  const kf = await wrapKey(id, key, 'correct horse', LIGHT);
  assert.equal(kf.length, KEYFILE_BYTES);
  assert.deepEqual(await unwrapKey(id, kf, 'correct horse'), key);
  await assert.rejects(unwrapKey(id, kf, 'correct hors'), /the passphrase does not open vault/);
  await assert.rejects(unwrapKey(newVaultId(), kf, 'correct horse'), /the passphrase does not open vault/);
  await assert.rejects(unwrapKey(id, kf, ''), /empty passphrase/);
  await refusesTruncations(kf, (b) => unwrapKey(id, b, 'correct horse'));
  await refusesBitFlips(kf.subarray(0, 10), (b) => unwrapKey(id, Uint8Array.from([...b, ...kf.subarray(10)]), 'correct horse'));
  // the rest (salt, check, nonce, sealed key): one flip per byte, each bit position in turn
  for (let i = 10; i < kf.length; i++) {
    const c = kf.slice();
    c[i] ^= 1 << i % 8;
    await assert.rejects(unwrapKey(id, c, 'correct horse'), VaultError, `byte ${i}`);
  }
  // a keyfile that asks a device for more than it spends is refused before any work
  const greedy = kf.slice();
  new DataView(greedy.buffer).setUint32(1, 1 << 30);
  await assert.rejects(unwrapKey(id, greedy, 'correct horse'), /beyond what this device spends/);
});

test('the default Argon2id parameters: a wrong passphrase is refused', async () => {
  const id = newVaultId();
  const kf = await wrapKey(id, newVaultKey(), 'pass phrase');
  await assert.rejects(unwrapKey(id, kf, 'pass phrasE'), /the passphrase does not open vault/);
});

test('recovery key: round trip, case and dashes ignored, a typo and another vault\'s key refused', async () => {
  const id = newVaultId();
  const key = newVaultKey();
  const r = recoveryKey(key);
  assert.match(r, /^([A-Z2-7]{5}-){10}[A-Z2-7]{5}$/);
  assert.deepEqual(fromRecoveryKey(r.toLowerCase().replace(/-/g, ' ')), key);
  const typo = (r[0] === 'A' ? 'B' : 'A') + r.slice(1);
  assert.throws(() => fromRecoveryKey(typo), /mistyped/);
  assert.throws(() => fromRecoveryKey(r.slice(0, -1)), /mistyped/);
  assert.throws(() => fromRecoveryKey(r + '1'), /no character/);
  const kf = await wrapKey(id, key, 'p', LIGHT);
  checkKey(id, kf, key);
  assert.throws(() => checkKey(id, kf, newVaultKey()), /not vault .*'s/);
});

test('sealed chunks and heads: open with their place only; every bit flip and truncation refused', async () => {
  const id = newVaultId();
  const k = await deriveKeys(id, newVaultKey());
  const other = await deriveKeys(newVaultId(), newVaultKey());
  const plain = bytes(100);
  const cid = chunkIds(k, plain, Uint32Array.of(100))[0];
  const content = (b: Uint8Array, keys = k, seal: SealCode = Seal.Ctr, chunk = cid) => openVerified(keys, Kind.Content, chunk, seal, b);

  // a content chunk: AES-CTR, its masked counter block then its ciphertext, authenticated by its id
  const sealed = await sealChunk(k, Kind.Content, cid, plain);
  assert.equal(sealed.length, 100 + CTR_OVERHEAD);
  assert.deepEqual(await content(sealed), plain);
  assert.notDeepEqual(await sealChunk(k, Kind.Content, cid, plain), sealed, 'a random counter each time');
  await refusesBitFlips(sealed, (b) => content(b));
  await refusesTruncations(sealed, (b) => content(b));
  await assert.rejects(content(sealed, k, Seal.Ctr, bytes(32)), VaultError, 'another id');
  await assert.rejects(content(sealed, other), VaultError, 'another vault');
  const k0 = await deriveKeys(id, new Uint8Array(32));
  const sameKeyOtherId = await deriveKeys(newVaultId(), new Uint8Array(32));
  const cid0 = chunkIds(k0, plain, Uint32Array.of(100))[0];
  await assert.rejects(openVerified(sameKeyOtherId, Kind.Content, cid0, Seal.Ctr, await sealChunk(k0, Kind.Content, cid0, plain)), VaultError, 'the same key under another vault id');
  await assert.rejects(content(sealed, k, Seal.Gcm), /does not verify/, 'read as AES-GCM');
  // the highest key stream position (a counter block near 2^124, from its last byte): refused
  // as any other, a VaultError
  const last = sealed.slice();
  for (let j = 0; j < CTR_OVERHEAD; j++) last[j] = 0xff ^ cid[j];
  await assert.rejects(content(last), VaultError);

  // chunks that follow one another in one buffer are sealed by one call: each opens alone;
  // their positions, unmasked, run on from one chunk to the next, masked they show nothing of
  // it (no two differ by less than 2^32); chunks apart, each by a call of its own
  const span = bytes(1 + 15 + 16 + 17 + 8000 + 65536);
  const plains: Uint8Array[] = [];
  for (let at = 0, i = 0; at < span.length; at += [1, 15, 16, 17, 8000, 65536][i++]) plains.push(span.subarray(at, at + [1, 15, 16, 17, 8000, 65536][i]));
  plains.splice(3, 0, bytes(33), bytes(7));
  const ids = plains.map((p) => chunkIds(k, p, Uint32Array.of(p.length))[0]);
  const calls: number[] = [];
  const batch = await sealContent({ ...webCipher, ctr: (...a) => (calls.push(a[3].length), webCipher.ctr(...a)) }, k, ids, plains);
  assert.deepEqual(calls, [32, 33, 7, 17 + 8000 + 65536]);
  assert.deepEqual(batch.runs.map((r) => r.length), calls, "a run's ciphertext is its call's output");
  assert.equal(batch.heads.length, plains.length * CTR_OVERHEAD);
  const parts = sealedParts(batch, plains.map((p) => p.length));
  const heads: bigint[] = [];
  for (const [i, [head, body]] of parts.entries()) {
    assert.equal(body.length, plains[i].length);
    assert.deepEqual(await content(Buffer.concat([head, body]), k, Seal.Ctr, ids[i]), plains[i]);
    heads.push(BigInt('0x' + hex(head)));
  }
  for (const a of heads) for (const b of heads) assert.ok(a === b || (a > b ? a - b : b - a) >= 2n ** 32n, 'two masked counters close together');

  // a content chunk an earlier dsync sealed with AES-GCM (nonce, ciphertext, tag; its AAD) opens
  const gcm = await gcmContentChunk(k, cid, plain);
  assert.deepEqual(await content(gcm, k, Seal.Gcm), plain);
  await refusesBitFlips(gcm, (b) => content(b, k, Seal.Gcm));
  await refusesTruncations(gcm, (b) => content(b, k, Seal.Gcm));

  // a list piece: AES-GCM under the metadata key, bound to its kind, id and vault
  const piece = await sealChunk(k, Kind.List, cid, plain);
  assert.equal(piece.length, 128);
  assert.deepEqual(await openChunk(k, Kind.List, cid, Seal.Gcm, piece), plain);
  await refusesBitFlips(piece, (b) => openChunk(k, Kind.List, cid, Seal.Gcm, b));
  await refusesTruncations(piece, (b) => openChunk(k, Kind.List, cid, Seal.Gcm, b));
  await assert.rejects(openChunk(k, Kind.Content, cid, Seal.Gcm, piece), /does not verify/, 'another kind');
  await assert.rejects(openChunk(k, Kind.List, bytes(32), Seal.Gcm, piece), /does not verify/, 'another id');
  await assert.rejects(openChunk(other, Kind.List, cid, Seal.Gcm, piece), /does not verify/, 'another vault');
  await assert.rejects(openChunk(k, Kind.List, cid, Seal.Ctr, piece), /not sealed with AES-GCM/);

  const rec = encodeHeadRecord({ seq: 1, prev: new Uint8Array(32), time: 5, tree: [ref()] });
  const head = await sealHead(k, rec);
  assert.deepEqual(await openHead(k, head), rec);
  await refusesBitFlips(head, (b) => openHead(k, b));
  await refusesTruncations(head, (b) => openHead(k, b));
  await assert.rejects(openHead(other, head), /does not verify/);
});

test('keyed chunking: one key cuts alike, two keys differently, ids keyed; the default chunker is unchanged', async () => {
  const data = bytes(3 << 20);
  const id = newVaultId();
  const key = newVaultKey();
  const cuts = async (k: Awaited<ReturnType<typeof deriveKeys>>) => {
    const out: { offset: number; id: string }[] = [];
    for await (const b of keyedChunks(k, bufferSource(data))) for (const c of b) out.push({ offset: c.offset, id: hex(c.id) });
    return out;
  };
  const a = await cuts(await deriveKeys(id, key));
  assert.deepEqual(await cuts(await deriveKeys(id, key)), a, 'another device with the same key');
  assert.ok(a.length > 200);
  const b = await cuts(await deriveKeys(id, newVaultKey()));
  const offs = (x: { offset: number }[]) => new Set(x.map((c) => c.offset));
  const shared = [...offs(a)].filter((o) => offs(b).has(o)).length;
  assert.ok(shared * 10 < a.length, `${shared} of ${a.length} cut points shared by two keys`);
  const ids = new Set(a.map((c) => c.id));
  assert.ok(b.every((c) => !ids.has(c.id)), 'ids differ between keys');

  // the plain chunker's cuts (golden.test.ts holds them to the checked-in vectors)
  const plain = new DsyncChunker(DEFAULT_PARAMS.min, DEFAULT_PARAMS.avg, DEFAULT_PARAMS.max, DEFAULT_PARAMS.op, DEFAULT_PARAMS.every, 0);
  plain.push(data);
  plain.finish();
  const pairs = plain.take_chunks();
  plain.free();
  const plainOffs = new Set<number>();
  for (let i = 0, o = 0; i < pairs.length; i += 2) plainOffs.add((o += pairs[i]) - pairs[i]);
  assert.ok([...offs(a)].filter((o) => plainOffs.has(o)).length * 10 < a.length, 'keyed cuts are not the plain ones');

  // lists are cut finer, with the same key
  const pieces = await listPieces(await deriveKeys(id, key), data.subarray(0, 1 << 20));
  assert.ok(pieces.length > 200 && pieces.every((p) => p.bytes.length <= 16384));
  assert.throws(() => DsyncChunker.keyed(2048, 8192, 65536, 0, 16, new Uint8Array(2047)), /2048 bytes/);
});

test('the tree is stored in pieces: a new version, a delete or a rename of one file of 2 000 rewrites a few pieces', async () => {
  const k = await deriveKeys(newVaultId(), newVaultKey());
  const v = (n: number) => ({ n, id: bytes(16), size: 1000 + n, root: bytes(32), mtime: 1764400000000, pushed: 1764400000000, device: 'laptop', manifest: [ref()], packs: [] });
  const tree: Tree = { keep: 32, files: Array.from({ length: 2000 }, (_, i) => ({ id: bytes(16), name: `folder/file ${String(i).padStart(5, '0')}.txt`, deleted: 0, versions: [v(1), v(2)] })) };
  const ids = async (t: Tree) => (await listPieces(k, encodeTree(t))).map((c) => hex(c.id));
  const before = new Set(await ids(tree));
  assert.ok(before.size > 100, `${before.size} pieces`);
  const target = tree.files[1234];
  const changes: [string, Tree | null][] = [
    ['a new version', addVersion(tree, target.name, target.id, { ...v(0), id: bytes(16) })],
    ['a delete', deleteFile(tree, seen(tree, target.name), 1764400009999)],
    ['a rename', renameFile(tree, seen(tree, target.name), 'folder/file 01234 renamed.txt')],
  ];
  for (const [what, next] of changes) {
    const fresh = (await ids(next!)).filter((id) => !before.has(id));
    console.log(`${what}: ${fresh.length} new pieces of ${before.size}`);
    // one or two pieces for most keys; a random key may cut a few more before its cuts meet
    // the old ones again (4 for 0.1% of keys), never a whole tree's worth
    assert.ok(fresh.length <= 8, `${what}: ${fresh.length} new pieces of ${before.size}`);
  }
});
