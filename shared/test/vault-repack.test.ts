// Repack (`dsync vault prune`, docs/vaults.md "Repack"): a real server on a loopback port over a
// local directory and over a real MinIO, the client's Vault over httpVaultRemote, and the store's
// gc. Many versions of several files pushed together (their chunks share packs), then `keep 1`:
// packs mix live and forgotten chunks. A prune rewrites the emptiest ones: every kept version
// pulls byte-exact, the packs the head names hold little but what the kept versions need, gc
// deletes the old packs and everything still pulls; every stored pack is a PADME size; a second
// prune does nothing. The prune reads each pack it rewrites whole (every other read aligned to
// blocks) and seals its live chunks again: no run of an old pack's bytes is in a new one. A push from another device landing between the prune's reads and its head
// write is kept with everything it refers to; a pack served with a flipped bit is refused and no
// head is written.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import '../src/chunking/wasm.ts';
import { bufferSource } from '../src/chunking/chunk-index.ts';
import { randomBytes } from '../../harness/testdata.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { VAULT_READ_BLOCK } from '../src/base/limits.ts';
import { padme } from '../src/vault/format.ts';
import { prune } from '../src/vault/repack.ts';
import { type VaultRemote, httpVaultRemote } from '../src/vault/remote.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../src/vault/vault.ts';
import { loadConfig } from '../../server/src/config.ts';
import { addUser } from '../../server/src/http/auth.ts';
import { type RunningServer, startServer } from '../../server/src/server.ts';
import type { Backend } from '../../server/src/store/backend.ts';
import { runGc } from '../../server/src/store/gc.ts';
import { vaultPackKey, vaultPacksPrefix } from '../../server/src/store/keys.ts';
import { localBackend } from '../../server/src/store/local.ts';
import { Repo } from '../../server/src/store/repo.ts';
import { s3Backend } from '../../server/src/store/s3.ts';

const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'a passphrase of the test';
const FILES = ['a', 'docs/b', 'docs/c', 'd'];
const SIZE = 240_000;
const ROUNDS = 6;

/** Pulls `name` (or one of its versions) into memory. */
async function pulled(v: Vault, name: string, version?: number): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  await v.pull(name, async (b) => void parts.push(b.slice()), undefined, version === undefined ? {} : { version });
  return Buffer.concat(parts);
}

/** `bytes` with `len` bytes from `at` replaced by fresh random ones (seeded). */
function edited(bytes: Uint8Array, seed: number, at: number, len: number): Uint8Array {
  const out = bytes.slice();
  out.set(randomBytes(seed, len), at);
  return out;
}

/** A remote that changes what the real one answers. */
const hostile = (real: VaultRemote, o: Partial<VaultRemote>): VaultRemote => ({ ...real, ...o });

for (const label of ['local directory', 'MinIO'] as const) {
  describe(`vault prune (${label})`, () => {
    let dir: string;
    let minio: S3Server | undefined;
    let server: RunningServer;
    let repo: Repo;
    let token: string;
    before(async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-repack-'));
      let backend: Backend;
      if (label === 'MinIO') {
        minio = await startMinio();
        backend = await s3Backend(`s3://vault-repack-${process.pid}/store`, minio.endpoint, minio.env);
      } else backend = await localBackend(path.join(dir, 'store'));
      const users = path.join(dir, 'users.json');
      token = addUser(users, 'alice');
      repo = new Repo(backend);
      server = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', users }, {}), () => {}, repo);
    });
    after(async () => {
      await server?.close();
      await minio?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    const remote = (): VaultRemote => httpVaultRemote(server.url, undefined, { Authorization: `Bearer ${token}` });
    /** A device with nothing cached. */
    const device = (id: string, r: VaultRemote = remote(), name = 'fresh') => openVault(r, id, { passphrase: PASS }, memoryHeads(), { device: name });
    /** The packs the store holds for vault `id`, with their sizes. */
    const stored = async (id: string) => {
      const prefix = vaultPacksPrefix('alice', id);
      const out = new Map<string, number>();
      for await (const e of repo.backend.list(prefix)) out.set(e.key.slice(prefix.length), (await repo.backend.size(e.key))!);
      return out;
    };
    const head = async (id: string) => (await remote().head(id))!;
    /** Bytes of the packs the head names, from the store's own sizes. */
    const namedBytes = async (id: string) => {
      const sizes = await stored(id);
      return (await head(id)).packs.reduce((n, p) => n + sizes.get(p)!, 0);
    };
    const gc = () => runGc(repo, { minAgeMs: 0, windowMs: 0, repackPercent: 100, vaultGraceMs: 0 });

    /** A vault with ROUNDS versions of each of FILES, each round an edit of 30% of every file,
     *  pushed together (their chunks share packs); the versions of each round. */
    async function mixed(): Promise<{ vault: Vault; rounds: Uint8Array[][] }> {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const rounds: Uint8Array[][] = [FILES.map((_, i) => randomBytes(1000 + i, SIZE))];
      for (let r = 1; r < ROUNDS; r++) rounds.push(rounds[r - 1].map((b, i) => edited(b, 100 * r + i, ((r * 37 + i * 11) % 70) * 1000, 0.3 * SIZE)));
      for (const [r, files] of rounds.entries()) {
        const got = await vault.pushMany(files.map((b, i) => ({ name: FILES[i], source: bufferSource(b), mtime: 1000 * r + i })));
        for (const g of got) assert.ok('ok' in g, String('error' in g && g.error));
      }
      return { vault, rounds };
    }

    test('after keep 1, prune rewrites the emptiest packs: every kept version pulls byte-exact before and after gc, the old packs go, every pack is a PADME size, a second prune does nothing', async () => {
      const { vault, rounds } = await mixed();
      await vault.keep(1);
      const newest = rounds[ROUNDS - 1];
      const live = newest.reduce((n, b) => n + b.length, 0);
      const before = (await head(vault.id)).packs;
      const bytesBefore = await namedBytes(vault.id);
      assert.ok(bytesBefore > 1.5 * live, `the packs in use hold much that is forgotten: ${bytesBefore} bytes for ${live} live`);

      // a dry run writes nothing
      const counter = (await head(vault.id)).counter;
      const storedBefore = [...(await stored(vault.id)).keys()].sort();
      const dry = await prune(await device(vault.id), { dryRun: true });
      assert.ok(dry.dryRun && dry.packsRead > 0 && dry.unusedBefore > 0.05, JSON.stringify(dry));
      assert.equal((await head(vault.id)).counter, counter, 'no head written');
      assert.deepEqual([...(await stored(vault.id)).keys()].sort(), storedBefore, 'no pack written');

      // every read the prune makes is a whole pack or aligned to VAULT_READ_BLOCK (a list's
      // pieces): none shows where a chunk starts or ends
      const reads: { pack: string; offset: number; length: number; got: number; toEnd: boolean }[] = [];
      const real = remote();
      const recording = hostile(real, {
        async readPack(id, pack, offset, length, o) {
          const got = await real.readPack(id, pack, offset, length, o);
          reads.push({ pack, offset, length, got: got.length, toEnd: !!o?.toEnd });
          return got;
        },
      });
      const sizes = await stored(vault.id);
      const report = await prune(await device(vault.id, recording, 'pruner'));
      // the reads not cut at a pack's end (toEnd) are the prune's own
      const exact = reads.filter((r) => !r.toEnd);
      assert.equal(exact.length, report.packsRead, 'each pack rewritten is read once');
      assert.equal(new Set(exact.map((r) => r.pack)).size, report.packsRead);
      for (const r of exact) assert.ok(r.offset === 0 && r.got === sizes.get(r.pack), `a pack rewritten is read whole: ${JSON.stringify(r)}`);
      for (const r of reads) {
        if (!r.toEnd) continue;
        assert.ok(r.offset % VAULT_READ_BLOCK === 0 && ((r.offset + r.length) % VAULT_READ_BLOCK === 0 || r.offset + r.got === sizes.get(r.pack)), `an aligned read: ${JSON.stringify(r)}`);
      }
      assert.equal(report.dryRun, false);
      assert.ok(report.packsRead > 0 && report.packsWritten > 0 && report.versions > 0, JSON.stringify(report));
      assert.ok(report.unusedBefore > 0.05 && report.unusedAfter <= 0.05, JSON.stringify(report));
      assert.equal(report.kept, 0);
      const now = await head(vault.id);
      assert.equal(now.counter, counter + 1, 'one head written');
      const dropped = before.filter((p) => !now.packs.includes(p));
      assert.ok(dropped.length >= report.packsRead, `the head no longer names the packs read: ${dropped.length}`);
      // the live chunks are sealed again: no run of an old pack's bytes is in a new one (the
      // server cannot match them up to read off where each live chunk lay)
      const fresh = now.packs.filter((p) => !before.includes(p));
      const newBytes = Buffer.concat(await Promise.all(fresh.map(async (p) => repo.backend.get(vaultPackKey('alice', vault.id, p)))));
      let runs = 0;
      for (const p of dropped) {
        const old = Buffer.from(await repo.backend.get(vaultPackKey('alice', vault.id, p)));
        for (let at = 0; at + 32 <= old.length; at += 1024, runs++) assert.equal(newBytes.indexOf(old.subarray(at, at + 32)), -1, `bytes ${at}+32 of old pack ${p} are in a new pack`);
      }
      assert.ok(runs > 1000, `${runs} runs searched`);
      const bytesAfter = await namedBytes(vault.id);
      assert.equal(bytesAfter, report.bytesAfter);
      assert.ok(bytesAfter < 1.2 * live, `the packs in use hold little more than the live versions: ${bytesAfter} bytes for ${live}`);

      // every kept version, byte-exact, from a device with nothing cached
      const check = async () => {
        const other = await device(vault.id);
        for (const [i, name] of FILES.entries()) {
          assert.ok((await pulled(other, name)).equals(Buffer.from(newest[i])), name);
          assert.deepEqual((await other.log(name)).versions.map((v) => v.n), [ROUNDS]);
        }
      };
      await check();
      // the device that pruned pulls too (its index points at the moved chunks)
      assert.ok((await pulled(await device(vault.id), 'a')).equals(Buffer.from(newest[0])));

      // gc with grace 0: the old packs go, and everything still pulls byte-exact
      await gc();
      const left = await stored(vault.id);
      for (const p of dropped) assert.ok(!left.has(p), `pack ${p} the head no longer names is deleted`);
      assert.deepEqual([...left.keys()].sort(), (await head(vault.id)).packs, 'exactly the packs the head names are stored');
      await check();
      for (const [p, size] of left) assert.equal(size, padme(size), `pack ${p} is a PADME size`);

      // a second prune does nothing
      const again = await prune(await device(vault.id));
      assert.equal(again.packsRead, 0, JSON.stringify(again));
      assert.equal(again.packsWritten, 0);
      assert.equal((await head(vault.id)).counter, counter + 1, 'no head written');

      // and the vault goes on: an edit pushed after the prune, pulled byte-exact
      const next = edited(newest[1], 9999, 5000, 20_000);
      await vault.push(FILES[1], bufferSource(next), 99);
      assert.ok((await pulled(await device(vault.id), FILES[1])).equals(Buffer.from(next)));
    });

    test('a push from another device lands between the prune\'s reads and its head write: both land, nothing is lost before or after gc', async () => {
      const { vault, rounds } = await mixed();
      await vault.keep(2);
      const newest = rounds[ROUNDS - 1];
      const other = await device(vault.id, remote(), 'other');
      await other.ls();
      // the other device edits "a" (its unchanged chunks lie in the packs being rewritten) and
      // adds a file, while the prune is between its reads and its head write
      const a2 = edited(newest[0], 7777, 1000, 4000);
      const extra = randomBytes(4242, 50_000);
      let raced = false;
      const real = remote();
      const racing = hostile(real, {
        async putHead(id, body, counter, packs) {
          if (!raced) {
            raced = true;
            await other.push('a', bufferSource(a2), 50);
            await other.push('new', bufferSource(extra), 51);
          }
          return real.putHead(id, body, counter, packs);
        },
      });
      const report = await prune(await device(vault.id, racing, 'pruner'), { maxUnused: 0 });
      assert.ok(raced && report.packsRead > 0, JSON.stringify(report));
      assert.ok(report.kept > 0, `the racing push still refers to packs the prune read, which the head keeps: ${JSON.stringify(report)}`);
      const everything = async () => {
        const fresh = await device(vault.id);
        assert.deepEqual((await fresh.log('a')).versions.map((v) => v.n), [ROUNDS, ROUNDS + 1]);
        assert.ok((await pulled(fresh, 'a')).equals(Buffer.from(a2)), 'the racing push');
        assert.ok((await pulled(fresh, 'a', ROUNDS)).equals(Buffer.from(newest[0])), 'the version before it');
        assert.ok((await pulled(fresh, 'new')).equals(Buffer.from(extra)), 'the racing new file');
        for (const [i, name] of FILES.entries()) {
          assert.ok((await pulled(fresh, name, ROUNDS)).equals(Buffer.from(newest[i])), name);
          // keep 2: the racing push forgot version ROUNDS - 1 of "a"
          if (name !== 'a') assert.ok((await pulled(fresh, name, ROUNDS - 1)).equals(Buffer.from(rounds[ROUNDS - 2][i])), `${name} version ${ROUNDS - 1}`);
        }
      };
      await everything();
      await gc();
      await everything();
      assert.deepEqual([...(await stored(vault.id)).keys()].sort(), (await head(vault.id)).packs);
      // the next prune takes what the race left, and everything still pulls
      await prune(await device(vault.id), { maxUnused: 0 });
      await gc();
      await everything();
    });

    test('a pack served with a flipped bit: the prune refuses with a clear error and writes no head', async () => {
      const { vault, rounds } = await mixed();
      await vault.keep(1);
      const counter = (await head(vault.id)).counter;
      const real = remote();
      const flipping = hostile(real, {
        async readPack(id, pack, offset, length, o) {
          const got = await real.readPack(id, pack, offset, length, o);
          // a whole pack, as the prune reads one (a pull's and a list's reads run to a block
          // or the pack's end: toEnd)
          if (!o?.toEnd) got[Math.floor(length / 3)] ^= 0x10;
          return got;
        },
      });
      await assert.rejects(prune(await device(vault.id, flipping)), /does not hash to its id \(a damaged or hostile server\): nothing rewritten/);
      assert.equal((await head(vault.id)).counter, counter, 'no head written');
      const fresh = await device(vault.id);
      for (const [i, name] of FILES.entries()) assert.ok((await pulled(fresh, name)).equals(Buffer.from(rounds[ROUNDS - 1][i])), name);
    });
  });
}
