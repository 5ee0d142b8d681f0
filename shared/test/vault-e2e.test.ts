// Vaults end to end (docs/vaults.md): a real server on a loopback port over a local directory,
// the client's httpVaultRemote with the bytes on the wire counted. A 20 MB file is pushed and
// pulled; an 8-byte edit uploads a few KB and padding, and a pull against the old copy fetches
// as little; the server's store holds no plaintext and no name. A hostile server (a remote that
// changes what the real one answers) is refused with a clear error and nothing is written: a
// flipped bit, a swapped range, a replayed older head, a forked head, a counter that lies, a
// manifest moved to another file or version. Versions are pulled by number byte-exact, a
// delete keeps the history for a restore, a rename carries it, and two devices changing the
// tree at once (the second one's change landing between the first one's read and write) both
// land, a push racing a delete kept either way. A device that synced a 10 MiB file keeps its
// list pieces (a PieceCache): a 2 KiB edit costs it under 64 KiB each way and no unchanged
// piece is fetched; a damaged or another vault's cache entry is refused and fetched again.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import '../src/chunking/wasm.ts';
import { createHash } from 'node:crypto';
import { blake3 } from '@noble/hashes/blake3';
import { bufferSource, chunkSource } from '../src/chunking/chunk-index.ts';
import { Algo, DEFAULT_PARAMS } from '../src/wire/protocol.ts';
import { keyedChunks } from '../src/vault/chunks.ts';
import { randomBytes } from '../../harness/testdata.ts';
import { storedFiles } from '../../harness/stored-files.ts';
import { Kind, type Tree, VaultError, decodeHeadRecord, decodeTree, encodeHeadRecord, encodeTree, padme } from '../src/vault/format.ts';
import { listPieces } from '../src/vault/chunks.ts';
import { openChunk, openHead, sealHead } from '../src/vault/keys.ts';
import { PackWriter } from '../src/vault/packs.ts';
import { type PieceCache, memoryPieceCache } from '../src/vault/cache.ts';
import { last, packsInUse } from '../src/vault/tree.ts';
import { sha256 } from '@noble/hashes/sha2';
import { type VaultRemote, httpVaultRemote } from '../src/vault/remote.ts';
import { type HeadMemory, type Vault, createVault, memoryHeads, openVault } from '../src/vault/vault.ts';
import { loadConfig } from '../../server/src/config.ts';
import { addUser } from '../../server/src/http/auth.ts';
import { type RunningServer, startServer } from '../../server/src/server.ts';
import { localBackend } from '../../server/src/store/local.ts';
import { Repo } from '../../server/src/store/repo.ts';

const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b));
const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'a passphrase of the test';

let dir: string;
let server: RunningServer;
let token: string;
/** bytes sent and received by the remote (bodies), since the last reset */
const wire = { up: 0, down: 0 };
/** every request body and header the remotes sent */
const sent: Buffer[] = [];

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-e2e-'));
  const users = path.join(dir, 'users.json');
  token = addUser(users, 'alice');
  server = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: path.join(dir, 'store'), users }, {}), () => {}, new Repo(await localBackend(path.join(dir, 'store'))));
});
after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The real remote, its request and answer bodies counted. */
function remote(): VaultRemote {
  const counting: typeof fetch = async (input, init) => {
    const body = init?.body;
    if (body instanceof Uint8Array) wire.up += body.length;
    else if (typeof body === 'string') wire.up += Buffer.byteLength(body);
    sent.push(Buffer.from(String(input)), Buffer.from(JSON.stringify(init?.headers ?? {})), Buffer.from((body as Uint8Array | string | undefined) ?? ''));
    const res = await fetch(input, init);
    const bytes = new Uint8Array(await res.arrayBuffer());
    wire.down += bytes.length;
    return new Response(bytes.length || res.status === 200 ? bytes : null, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return httpVaultRemote(server.url, counting, { Authorization: `Bearer ${token}` });
}

/** Pulls `name` into memory, as a device writes it to a temporary file before renaming it. */
async function pulled(v: Vault, name: string, local?: Uint8Array): Promise<{ bytes: Uint8Array; report: Awaited<ReturnType<Vault['pull']>> }> {
  const parts: Uint8Array[] = [];
  const report = await v.pull(name, async (b) => void parts.push(b.slice()), local && bufferSource(local));
  return { bytes: Buffer.concat(parts), report };
}

/** Every file the store holds, with its bytes. */
const stored = () => storedFiles(path.join(dir, 'store')).map((f) => ({ name: path.join('store', f.file), bytes: f.bytes }));

test('push, pull, an 8-byte edit of a 20 MB file: a few KB up and down, the store holds no plaintext and no name', async () => {
  const heads = memoryHeads();
  const { vault, recoveryKey } = await createVault(remote(), PASS, heads, LIGHT);
  const data = randomBytes(46, 20_000_000);
  const name = 'secret-plans/Quarterly report.bin';

  wire.up = wire.down = 0;
  const first = await vault.push(name, bufferSource(data), 1764400000000);
  assert.equal(first.reused, 0);
  assert.ok(wire.up >= data.length && wire.up < data.length * 1.15, `first push: ${wire.up} bytes up`);

  // another device, with the passphrase
  const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
  assert.deepEqual(await other.ls(), [{ name, size: data.length, mtime: 1764400000000 }]);
  const got = await pulled(other, name);
  assert.ok(Buffer.from(got.bytes).equals(data));

  // an edit of 8 bytes in the middle
  const edited = data.slice();
  edited.set(new TextEncoder().encode('EDITED!!'), 12_345_678);
  wire.up = wire.down = 0;
  const second = await vault.push(name, bufferSource(edited), 1764400001000);
  // exactly the chunks the edit made (usually one; the vault's random key may cut a few more
  // around it before its cuts meet the old ones again), and their bytes with a few KB
  const made = await newChunks(vault, data, edited);
  assert.equal(second.chunks - second.reused, made.count, 'the push sealed chunks the vault held');
  assert.ok(made.count <= 8, `an 8-byte edit made ${made.count} new chunks`);
  assert.ok(wire.up < made.bytes + 100_000, `an 8-byte edit sent ${wire.up} bytes up (${second.packs} packs, ${made.bytes} bytes of new chunks)`);
  console.log(`8-byte edit of 20 MB: ${wire.up} bytes up, ${wire.down} down, ${second.packs} packs, ${second.chunks - second.reused} new chunks of ${second.chunks}`);

  // the other device pulls against its old copy: a few ranges
  wire.up = wire.down = 0;
  const again = await pulled(other, name, got.bytes);
  assert.ok(Buffer.from(again.bytes).equals(edited));
  assert.equal(again.report.local, made.held, `${again.report.local} of ${again.report.chunks} from the device`);
  assert.ok(wire.down < made.bytes + 100_000, `the pull of the edit fetched ${wire.down} bytes`);
  console.log(`pull of the edit: ${wire.down} bytes down in ${again.report.ranges} ranges`);

  // a third device with the recovery key
  const third = await openVault(remote(), vault.id, { recoveryKey }, memoryHeads());
  assert.ok(Buffer.from((await pulled(third, name)).bytes).equals(edited));

  // what the server keeps: no 16-byte run of the plaintext, no name, padded packs
  const objects = stored();
  // (the server's sums of a pack, a SHA-256 per 64 KiB block, are a function of its padded size)
  const packs = objects.filter((o) => !o.name.includes('/sums/') && (o.name.includes(`/packs/`) || /[0-9a-f]{64}$/.test(o.name)));
  assert.ok(packs.length > 0, `${objects.length} objects stored`);
  const needles = [Buffer.from(name), Buffer.from('Quarterly'), ...[0, 5_000_000, 12_345_670, 19_999_000].map((o) => Buffer.from(edited.subarray(o, o + 16)))];
  for (const o of objects) for (const n of needles) assert.equal(o.bytes.indexOf(n), -1, `${o.name} holds a plaintext run or a name`);
  for (const p of packs) assert.equal(padme(p.bytes.length), p.bytes.length, `${p.name}: ${p.bytes.length} bytes is no padded size`);
  // nor an unkeyed hash of a file or of a chunk (cut as plain Dsync cuts, and as the vault
  // does): not in the store, not in anything sent
  const digests: Buffer[] = [];
  for (const f of [data, edited]) {
    digests.push(createHash('sha256').update(f).digest(), Buffer.from(blake3(f)));
    const ix = await chunkSource(bufferSource(f), DEFAULT_PARAMS, Algo.Blake3);
    for (let i = 0; i < ix.lengths.length; i += 97) digests.push(Buffer.from(ix.hashes.subarray(i * 32, i * 32 + 32)));
  }
  for await (const batch of keyedChunks(vault.keys, bufferSource(edited))) {
    for (const c of batch.slice(0, 3)) digests.push(createHash('sha256').update(c.bytes).digest(), Buffer.from(blake3(c.bytes)));
  }
  const everything = [...objects.map((o) => o.bytes), ...sent];
  for (const d of digests) {
    for (const b of everything) {
      assert.equal(b.indexOf(d.subarray(0, 16)), -1, 'an unkeyed hash of plaintext on the server');
      assert.equal(b.indexOf(Buffer.from(d.toString('hex').slice(0, 32))), -1, 'an unkeyed hash in hex');
    }
  }
  for (const n of needles) for (const b of sent) assert.equal(b.indexOf(n), -1, 'plaintext or a name sent');
});

test('a wrong passphrase and a wrong recovery key are refused, and the vault still opens', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  await assert.rejects(openVault(remote(), vault.id, { passphrase: PASS + '!' }, memoryHeads()), /the passphrase does not open vault/);
  const { recoveryKey: otherKey } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  await assert.rejects(openVault(remote(), vault.id, { recoveryKey: otherKey }, memoryHeads()), /not vault .*'s/);
  await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
});

/** A remote that changes what the real one answers. */
function hostile(real: VaultRemote, o: Partial<VaultRemote>): VaultRemote {
  return { ...real, ...o };
}

test('a hostile server: a flipped bit, a swapped range, a replayed head, a fork, a lying counter: each refused, nothing written', async () => {
  const heads = memoryHeads();
  const real = remote();
  const { vault } = await createVault(real, PASS, heads, LIGHT);
  const a = randomBytes(47, 300_000);
  const b = randomBytes(48, 300_000);
  await vault.push('a', bufferSource(a), 1);
  await vault.push('b', bufferSource(b), 2);
  const old = (await real.head(vault.id))!;
  await vault.push('a', bufferSource(b), 3);

  /** Opens the vault through `r` with `mem` and pulls `name`: nothing may be written. */
  const refused = async (r: VaultRemote, mem: HeadMemory, name: string, why: RegExp) => {
    const v = await openVault(r, vault.id, { passphrase: PASS }, mem);
    let written = 0;
    await assert.rejects(
      v.pull(name, async (x) => void (written += x.length)),
      (e: Error) => e instanceof VaultError && why.test(e.message),
    );
    assert.equal(written, 0, 'nothing written');
  };
  const seen = async () => {
    const m = memoryHeads();
    await (await openVault(real, vault.id, { passphrase: PASS }, m)).ls();
    return m;
  };

  // a flipped bit in any range the pull reads (list pieces and contents alike)
  for (const at of [0, 100, 5000]) {
    await refused(
      hostile(real, {
        async readPack(id, pack, offset, length, o) {
          const got = await real.readPack(id, pack, offset, length, o);
          if (length > at) got[at] ^= 0x10;
          return got;
        },
      }),
      memoryHeads(),
      'b',
      /does not verify|does not match/,
    );
  }
  // a range of another place (another file's chunk or manifest) in place of the one asked
  let first: Uint8Array | null = null;
  await refused(
    hostile(real, {
      async readPack(id, pack, offset, length, o) {
        const got = await real.readPack(id, pack, offset, length, o);
        if (!first) first = got; // the tree's piece, handed out again for everything else
        return first.length >= length ? first.subarray(0, length) : got.map((x) => x ^ 1);
      },
    }),
    memoryHeads(),
    'b',
    /does not verify/,
  );
  // the older head again, to a device that saw the newer one
  await refused(hostile(real, { head: async () => old }), await seen(), 'a', /a rollback/);
  // no head at all, to a device that saw one
  await assert.rejects(openVault(hostile(real, { head: async () => null }), vault.id, { passphrase: PASS }, await seen()).then((v) => v.ls()), /a rollback/);
  // a counter that is not the head's own
  const now = (await real.head(vault.id))!;
  await assert.rejects(
    openVault(hostile(real, { head: async () => ({ ...now, counter: now.counter + 5 }) }), vault.id, { passphrase: PASS }, memoryHeads()).then((v) => v.ls()),
    /is not the head's own/,
  );
  // a fork: the server keeps another head for another device, which writes its own head
  // number N+1; a device that saw the real head N+1 is shown the forked one
  let forked = { counter: now.counter, body: now.body, packs: now.packs };
  const fork = hostile(real, {
    head: async () => forked,
    putHead: async (_id, body, counter, packs) => (counter === forked.counter ? ((forked = { counter: counter + 1, body, packs }), { ok: true, counter: counter + 1 }) : { ok: false, counter: forked.counter }),
  });
  await (await openVault(fork, vault.id, { passphrase: PASS }, memoryHeads())).push('c', bufferSource(a), 4);
  const mine = memoryHeads();
  await (await openVault(real, vault.id, { passphrase: PASS }, mine)).push('d', bufferSource(b), 5);
  await refused(fork, mine, 'a', /a fork/);
  // the vault itself is fine
  const v = await openVault(real, vault.id, { passphrase: PASS }, mine);
  assert.deepEqual((await v.ls()).map((e) => e.name), ['a', 'b', 'd']);
  assert.ok(Buffer.from((await pulled(v, 'a')).bytes).equals(b));
});

test('two devices push at once: the compare-and-swap keeps both files', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
  await Promise.all([vault.push('x', bufferSource(randomBytes(49, 100_000)), 1), other.push('y', bufferSource(randomBytes(50, 100_000)), 2)]);
  assert.deepEqual((await vault.ls()).map((e) => e.name), ['x', 'y']);
});

test('an empty file and a one-byte file', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  await vault.push('empty', bufferSource(new Uint8Array(0)), 1);
  await vault.push('one', bufferSource(Uint8Array.of(7)), 2);
  const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
  assert.equal((await pulled(other, 'empty')).bytes.length, 0);
  assert.deepEqual([...(await pulled(other, 'one')).bytes], [7]);
  await assert.rejects(pulled(other, 'none'), /has no file "none"/);
});

// ---------------------------------------------------------------------------------------------
// A device's cache of list pieces (docs/vaults.md, "Push and pull")

/** The real remote, recording every pack range it reads. */
function recording(reads: { pack: string; offset: number; length: number }[]): VaultRemote {
  const real = remote();
  return hostile(real, {
    async readPack(id, pack, offset, length, o) {
      reads.push({ pack, offset, length });
      return real.readPack(id, pack, offset, length, o);
    },
  });
}

test('a device that synced v1 keeps its pieces: a 2 KiB edit of 10 MiB costs under 64 KiB both ways (or the bytes of its new chunks and 40 KiB, where the key cuts large ones) and fetches no unchanged piece', async () => {
  const laptopCache = memoryPieceCache();
  const phoneCache = memoryPieceCache();
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT, { cache: laptopCache });
  const v1 = randomBytes(70, 10 << 20);
  await vault.push('big.bin', bufferSource(v1), 1);
  const phoneHeads = memoryHeads();
  const phone = await openVault(remote(), vault.id, { passphrase: PASS }, phoneHeads, { cache: phoneCache });
  assert.ok(same((await pulled(phone, 'big.bin')).bytes, v1));
  const before = new Set((await remote().packs(vault.id)).map((p) => p.id));

  // the laptop again, as a new process with its cache: reads no piece, sends a few KB
  const v2 = v1.slice();
  v2.set(randomBytes(71, 2048), 5_000_000);
  const reads: { pack: string; offset: number; length: number }[] = [];
  const laptop = await openVault(recording(reads), vault.id, { passphrase: PASS }, memoryHeads(), { cache: laptopCache });
  wire.up = wire.down = 0;
  const pushed = await laptop.push('big.bin', bufferSource(v2), 2);
  console.log(`2 KiB edit of 10 MiB, pushed with the cache: ${wire.up} bytes up, ${wire.down} down, ${reads.length} ranges read, ${pushed.chunks - pushed.reused} new chunks`);
  assert.equal(reads.length, 0, 'the push read pieces it holds');
  // under 64 KiB where the edit's chunks are of usual sizes; the vault's random key may cut
  // larger ones there (up to 64 KiB each), which the bound then carries
  const fresh = (await newChunks(vault, v1, v2)).bytes;
  const bound = Math.max(64 << 10, fresh + (40 << 10));
  assert.ok(wire.up + wire.down < bound, `the push of the edit: ${wire.up} up, ${wire.down} down (${fresh} bytes of new chunks)`);

  // the phone again, with its cache and its old copy: only what the push wrote
  const phoneAgain = await openVault(recording(reads), vault.id, { passphrase: PASS }, phoneHeads, { cache: phoneCache });
  wire.up = wire.down = 0;
  const got = await pulled(phoneAgain, 'big.bin', v1);
  console.log(`its pull with the cache: ${wire.up} bytes up, ${wire.down} down, ${reads.length} ranges read`);
  assert.ok(same(got.bytes, v2));
  assert.ok(reads.length > 0);
  for (const r of reads) assert.ok(!before.has(r.pack), `the pull read ${r.length} bytes of a pack v1 had: an unchanged piece`);
  assert.ok(wire.up + wire.down < bound, `the pull of the edit: ${wire.up} up, ${wire.down} down (${fresh} bytes of new chunks)`);
});

/** The chunks of `v2` as the vault's keyed chunker cuts them, against `v1`'s: how many `v1`
 *  lacks (each distinct one once) and their bytes, and how many of `v2`'s (each where it is)
 *  `v1` holds: what a pull of `v2` over a copy of `v1` reads from the copy. */
async function newChunks(v: Vault, v1: Uint8Array, v2: Uint8Array): Promise<{ count: number; bytes: number; held: number }> {
  const had = new Set<string>();
  for await (const batch of keyedChunks(v.keys, bufferSource(v1))) for (const c of batch) had.add(Buffer.from(c.id).toString('hex'));
  const made = new Set<string>();
  const out = { count: 0, bytes: 0, held: 0 };
  for await (const batch of keyedChunks(v.keys, bufferSource(v2)))
    for (const c of batch) {
      const id = Buffer.from(c.id).toString('hex');
      if (had.has(id)) out.held++;
      else if (!made.has(id)) {
        made.add(id);
        out.count++;
        out.bytes += c.bytes.length;
      }
    }
  return out;
}

test('a damaged or foreign cache entry is refused and fetched again: byte-exact, and the entry mended', async () => {
  const pieces = new Map<string, Uint8Array>();
  const base = memoryPieceCache();
  const cache: PieceCache = { ...base, put: async (id, b) => (pieces.set(id, b), base.put(id, b)) };
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT, { cache });
  const data = randomBytes(72, 1 << 20);
  await vault.push('f.bin', bufferSource(data), 1);
  const ids = [...pieces.keys()];
  // a manifest and a tree, a piece each at least (how many more: where the key cuts them)
  assert.ok(ids.length >= 2, `${ids.length} pieces cached`);
  // another vault's piece under one id, a flipped bit in every other
  const foreignPieces = new Map<string, Uint8Array>();
  const { vault: foreign } = await createVault(remote(), PASS, memoryHeads(), LIGHT, { cache: { ...memoryPieceCache(), put: async (id, b) => void foreignPieces.set(id, b) } });
  await foreign.push('f.bin', bufferSource(data), 1);
  await base.put(ids[0], [...foreignPieces.values()][0]);
  for (const id of ids.slice(1)) {
    const b = (await base.get(id))!;
    b[b.length >> 1] ^= 1;
    await base.put(id, b);
  }
  const reads: { pack: string; offset: number; length: number }[] = [];
  const again = await openVault(recording(reads), vault.id, { passphrase: PASS }, memoryHeads(), { cache });
  assert.ok(same((await pulled(again, 'f.bin')).bytes, data));
  // the damaged pieces fetched again (pieces of one list in one pack share a read)
  assert.ok(reads.length >= 2, `${reads.length} ranges read for ${ids.length} damaged pieces`);
  // the entries were replaced by the fetched pieces: a third reader reads no piece
  reads.length = 0;
  const third = await openVault(recording(reads), vault.id, { passphrase: PASS }, memoryHeads(), { cache });
  assert.deepEqual(await third.ls(), [{ name: 'f.bin', size: data.length, mtime: 1 }]);
  assert.equal(reads.length, 0);
});

// ---------------------------------------------------------------------------------------------
// Versions, deletes, renames (docs/vaults.md, "Versions, deletes and renames")

/** `n` versions of a 300 KB file, each an edit of the one before. */
function versionsOf(seed: number, n: number): Uint8Array[] {
  const out = [randomBytes(seed, 300_000)];
  for (let i = 1; i < n; i++) {
    const next = out[i - 1].slice();
    next.set(randomBytes(seed * 100 + i, 64), (i * 70_001) % 299_000);
    out.push(next);
  }
  return out;
}

test('versions: every push adds one, each pulled by number byte-exact, log names size, times and device, retention forgets the oldest', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT, { device: 'laptop' });
  const phone = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads(), { device: 'téléphone' });
  const v = versionsOf(60, 4);
  const reports = [];
  for (let i = 0; i < 3; i++) reports.push(await vault.push('doc.bin', bufferSource(v[i]), 1764400000000 + i));
  reports.push(await phone.push('doc.bin', bufferSource(v[3]), 1764400000003));
  assert.deepEqual(reports.map((r) => r.version), [1, 2, 3, 4]);
  const log = await vault.log('doc.bin');
  assert.equal(log.deleted, 0);
  assert.equal(log.keep, 32);
  assert.deepEqual(log.versions.map((x) => [x.n, x.size, x.mtime, x.device]), [0, 1, 2, 3].map((i) => [i + 1, 300_000, 1764400000000 + i, i === 3 ? 'téléphone' : 'laptop']));
  assert.ok(log.versions.every((x, i) => x.pushed > 1764400000000 && (i === 0 || x.pushed >= log.versions[i - 1].pushed)));
  // every version byte-exact, from a third device and against another version's copy
  const third = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
  for (let i = 0; i < 4; i++) {
    const got = await pulled2(third, 'doc.bin', { version: i + 1 });
    assert.ok(same(got.bytes, v[i]), `version ${i + 1}`);
    assert.equal(got.report.version, i + 1);
    const against = await pulled2(third, 'doc.bin', { version: i + 1 }, v[(i + 1) % 4]);
    assert.ok(same(against.bytes, v[i]), `version ${i + 1} against another`);
    assert.equal(against.report.local, (await newChunks(vault, v[(i + 1) % 4], v[i])).held, `version ${i + 1}: the chunks the other copy holds read from it`);
  }
  assert.equal((await pulled(third, 'doc.bin')).report.version, 4, 'the newest by default');
  await assert.rejects(pulled2(third, 'doc.bin', { version: 5 }), /has no version 5 \(kept: 1, 2, 3, 4\)/);

  // retention: keep 2 forgets versions 1 and 2 now; numbers go on
  await assert.rejects(vault.keep(0), /1 to 10000 versions/);
  await vault.keep(2);
  assert.deepEqual((await phone.log('doc.bin')).versions.map((x) => x.n), [3, 4]);
  await assert.rejects(pulled2(phone, 'doc.bin', { version: 1 }), /has no version 1 \(kept: 3, 4\)/);
  assert.equal((await phone.push('doc.bin', bufferSource(v[0]), 5)).version, 5);
  assert.deepEqual((await vault.log('doc.bin')).versions.map((x) => x.n), [4, 5]);
  assert.ok(same((await pulled2(third, 'doc.bin', { version: 5 })).bytes, v[0]));
});

/** As `pulled`, with options. */
async function pulled2(v: Vault, name: string, o: { version?: number }, local?: Uint8Array) {
  const parts: Uint8Array[] = [];
  const report = await v.pull(name, async (b) => void parts.push(b.slice()), local && bufferSource(local), o);
  return { bytes: Buffer.concat(parts), report };
}

test('rm keeps the history, restore brings a version back without its contents, mv carries the history', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
  const v = versionsOf(61, 2);
  await vault.push('a.txt', bufferSource(v[0]), 10);
  await vault.push('a.txt', bufferSource(v[1]), 11);
  await vault.push('keep.txt', bufferSource(Uint8Array.of(1, 2, 3)), 12);
  await vault.rm('a.txt');
  assert.deepEqual((await other.ls()).map((f) => f.name), ['keep.txt']);
  const gone = await other.ls({ deleted: true });
  assert.deepEqual(gone.map((f) => [f.name, f.size, f.mtime]), [['a.txt', 300_000, 11]]);
  assert.ok(gone[0].deleted > 0);
  let written = 0;
  await assert.rejects(other.pull('a.txt', async (b) => void (written += b.length)), /no file "a.txt" \(it was deleted/);
  assert.equal(written, 0);
  assert.ok(same((await pulled2(other, 'a.txt', { version: 1 })).bytes, v[0]), 'a deleted file\'s version');
  assert.ok((await other.log('a.txt')).deleted > 0);
  await assert.rejects(other.rm('a.txt'), /no file "a.txt" \(it was deleted/);
  await assert.rejects(other.rm('none'), /no file "none"/);

  // restore: a new version with version 1's chunks; nothing but list pieces uploaded
  wire.up = 0;
  const r = await other.restore('a.txt', 1);
  assert.equal(r.version, 3);
  console.log(`restore of a 300 KB version: ${wire.up} bytes up`);
  assert.ok(wire.up < 40_000, `a restore of 300 KB sent ${wire.up} bytes`);
  assert.deepEqual((await vault.ls()).map((f) => [f.name, f.size, f.mtime]), [['a.txt', 300_000, 10], ['keep.txt', 3, 12]]);
  assert.ok(same((await pulled(vault, 'a.txt')).bytes, v[0]));
  await assert.rejects(other.restore('a.txt', 9), /has no version 9/);

  // mv: the history travels; the old name is free, a taken name is refused
  await vault.mv('a.txt', 'docs/b.txt');
  assert.deepEqual((await other.ls()).map((f) => f.name), ['docs/b.txt', 'keep.txt']);
  assert.deepEqual((await other.log('docs/b.txt')).versions.map((x) => x.n), [1, 2, 3]);
  for (const [n, want] of [[1, v[0]], [2, v[1]], [3, v[0]]] as const) assert.ok(same((await pulled2(other, 'docs/b.txt', { version: n })).bytes, want), `v${n} after mv`);
  await assert.rejects(other.log('a.txt'), /no file "a.txt"/);
  await assert.rejects(other.mv('docs/b.txt', 'keep.txt'), /"keep.txt" exists: nothing renamed/);
  await assert.rejects(other.mv('docs/b.txt', '../x'), /invalid file name/);
  // onto a deleted file's name: the moved file's newest version joins that file's history, and
  // the old name is deleted with its own
  await other.rm('keep.txt');
  await other.mv('docs/b.txt', 'keep.txt');
  assert.deepEqual((await vault.log('keep.txt')).versions.map((x) => x.n), [1, 2]);
  assert.ok(same((await pulled(vault, 'keep.txt')).bytes, v[0]));
  assert.ok(same((await pulled2(vault, 'keep.txt', { version: 1 })).bytes, Uint8Array.of(1, 2, 3)));
  assert.deepEqual((await vault.ls({ deleted: true })).map((f) => f.name), ['docs/b.txt']);
  assert.deepEqual((await vault.log('docs/b.txt')).versions.map((x) => x.n), [1, 2, 3]);
  // a new file under a deleted name continues its history
  assert.equal((await other.push('docs/b.txt', bufferSource(Uint8Array.of(4)), 13)).version, 4);
  assert.deepEqual(await vault.ls({ deleted: true }), []);
});

/** A remote whose next head write first lets `meanwhile` run to its end: another device's
 *  change lands between this device's read of the head and its write. */
function racing(meanwhile: () => Promise<unknown>): VaultRemote {
  const real = remote();
  let once = true;
  return hostile(real, {
    async putHead(id, body, counter, packs) {
      if (once) {
        once = false;
        await meanwhile();
      }
      return real.putHead(id, body, counter, packs);
    },
  });
}

test('two devices at once: versions merge, a push racing a delete is kept either way, a rename racing a push keeps both, a landed head told 412 adds nothing twice', async () => {
  const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
  const v = versionsOf(62, 3);
  const open = (r: VaultRemote, device: string) => openVault(r, vault.id, { passphrase: PASS }, memoryHeads(), { device });
  const b = await open(remote(), 'B');
  const names = async () => (await vault.ls()).map((f) => f.name);

  // two pushes of one name: both versions kept
  await vault.push('p', bufferSource(v[0]), 1);
  const a1 = await open(racing(() => b.push('p', bufferSource(v[1]), 2)), 'A');
  assert.equal((await a1.push('p', bufferSource(v[2]), 3)).version, 3);
  assert.deepEqual((await vault.log('p')).versions.map((x) => [x.n, x.device]), [[1, 'unnamed device'], [2, 'B'], [3, 'A']]);
  for (let i = 0; i < 3; i++) assert.ok(same((await pulled2(vault, 'p', { version: i + 1 })).bytes, v[i]));

  // a delete that read the head before another device's push: refused, the push kept
  await vault.push('x', bufferSource(v[0]), 1);
  const a2 = await open(racing(() => b.push('x', bufferSource(v[1]), 2)), 'A');
  await assert.rejects(a2.rm('x'), /"x" changed on another device while it was deleted: nothing deleted/);
  assert.deepEqual((await vault.log('x')).versions.map((x) => x.n), [1, 2]);
  assert.equal((await vault.log('x')).deleted, 0);
  assert.ok(same((await pulled(vault, 'x')).bytes, v[1]));

  // a push that read the head before another device's delete: the push lands, the file lives
  await vault.push('y', bufferSource(v[0]), 1);
  const a3 = await open(racing(() => b.rm('y')), 'A');
  assert.equal((await a3.push('y', bufferSource(v[2]), 3)).version, 2);
  assert.equal((await vault.log('y')).deleted, 0);
  assert.ok(same((await pulled(vault, 'y')).bytes, v[2]));
  assert.ok(same((await pulled2(vault, 'y', { version: 1 })).bytes, v[0]));

  // a rename racing a push to the old name, both orders: every version kept
  await vault.push('z', bufferSource(v[0]), 1);
  const a4 = await open(racing(() => b.push('z', bufferSource(v[1]), 2)), 'A');
  await a4.mv('z', 'z2');
  assert.deepEqual((await vault.log('z2')).versions.map((x) => x.n), [1, 2], 'the push before the rename travels with it');
  await vault.push('w', bufferSource(v[0]), 1);
  const a5 = await open(racing(() => b.mv('w', 'w2')), 'A');
  assert.equal((await a5.push('w', bufferSource(v[1]), 2)).version, 1, 'the old name is a new file');
  assert.ok(same((await pulled(vault, 'w2')).bytes, v[0]));
  assert.ok(same((await pulled(vault, 'w')).bytes, v[1]));
  assert.deepEqual(await names(), ['p', 'w', 'w2', 'x', 'y', 'z2']);

  // a head that lands but is answered 412 (as S3's unknown outcome may): the next attempt finds
  // its own change and adds nothing
  const real = remote();
  let told = false;
  const liar = await open(
    hostile(real, {
      async putHead(id, body, counter, packs) {
        const put = await real.putHead(id, body, counter, packs);
        if (put.ok && !told) return (told = true), { ok: false, counter: put.counter };
        return put;
      },
    }),
    'A',
  );
  const before = (await real.head(vault.id))!.counter;
  await liar.push('p', bufferSource(v[0]), 4);
  assert.deepEqual((await vault.log('p')).versions.map((x) => x.n), [1, 2, 3, 4]);
  assert.equal((await real.head(vault.id))!.counter, before + 1, 'one head written');
  told = false;
  await liar.rm('z2');
  told = false;
  await liar.mv('w2', 'w3');
  assert.deepEqual(await names(), ['p', 'w', 'w3', 'x', 'y']);
  assert.equal((await real.head(vault.id))!.counter, before + 3);
});

test('a manifest moved to another file or another version is refused, nothing written', async () => {
  const real = remote();
  const { vault } = await createVault(real, PASS, memoryHeads(), LIGHT);
  const k = vault.keys;
  const [a1, a2] = versionsOf(63, 2);
  const b = randomBytes(64, 300_000);
  await vault.push('a', bufferSource(a1), 1);
  await vault.push('a', bufferSource(a2), 2);
  await vault.push('b', bufferSource(b), 3);

  /** Writes a head whose tree is the current one changed by `edit`: what a device with the key
   *  (or a bug) could write; the server alone cannot, as every piece is sealed. */
  const rewrite = async (edit: (t: Tree) => void) => {
    const got = (await real.head(vault.id))!;
    const head = decodeHeadRecord(await openHead(k, got.body));
    const pieces = await Promise.all(head.tree.map(async (r) => openChunk(k, Kind.List, r.id, r.seal, await real.readPack(vault.id, r.pack, r.offset, r.length))));
    const tree = decodeTree(Buffer.concat(pieces));
    edit(tree);
    const packs = new PackWriter(real, k);
    const refs = [];
    for (const c of await listPieces(k, encodeTree(tree))) refs.push(await packs.add(Kind.List, c.id, c.bytes));
    await packs.flush();
    const body = await sealHead(k, encodeHeadRecord({ seq: got.counter + 1, prev: sha256(got.body), time: Date.now(), tree: refs }));
    assert.ok((await real.putHead(vault.id, body, got.counter, packsInUse(tree, refs))).ok);
  };
  const file = (t: Tree, name: string) => t.files.find((f) => f.name === name)!;
  const refused = async (name: string, o: { version?: number }) => {
    const v = await openVault(real, vault.id, { passphrase: PASS }, memoryHeads());
    let written = 0;
    await assert.rejects(
      v.pull(name, async (x) => void (written += x.length), undefined, o),
      (e: Error) => e instanceof VaultError && /the manifest of "a" version \d belongs to another file or version \(a moved manifest\)/.test(e.message),
    );
    assert.equal(written, 0, 'nothing written');
  };

  // b's manifest under a's newest version (the same size, so only the binding tells)
  await rewrite((t) => void (last(file(t, 'a')).manifest = last(file(t, 'b')).manifest));
  await refused('a', {});
  // a's version 1 manifest under its version 2
  await rewrite((t) => {
    const a = file(t, 'a');
    a.versions[1].manifest = a.versions[0].manifest;
  });
  await refused('a', { version: 2 });
  // (the server alone cannot move a manifest: a piece served in another's place fails its
  // seal, as the hostile server's swapped range above shows)
  const v = await openVault(real, vault.id, { passphrase: PASS }, memoryHeads());
  assert.ok(same((await pulled2(v, 'b', {})).bytes, b), 'the rest of the vault is fine');
});
