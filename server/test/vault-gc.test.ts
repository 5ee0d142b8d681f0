// Vault pack collection (docs/vaults.md, "Pack collection"): a real server on a loopback port
// over a local directory and over a real MinIO, the client's Vault over httpVaultRemote, and the
// store's gc. The head names the packs its tree references; gc deletes, with their sums, the
// packs no head names once older than the grace period, and nothing else: every live version
// pulls byte-exact after it. A pack uploaded for a head not yet written survives inside the
// grace period; a head naming a pack the vault does not hold (collected, or never stored) is
// refused and changes nothing; a head written while the collection runs keeps its packs.
import assert from 'node:assert/strict';
import { createHash, randomBytes as cryptoBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { randomBytes } from '../../harness/testdata.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { VaultBadAnswer, type VaultRemote, httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { VaultError } from '../../shared/src/vault/format.ts';
import { loadConfig } from '../src/config.ts';
import { addUser } from '../src/http/auth.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { runCheck } from '../src/store/check.ts';
import { runGc } from '../src/store/gc.ts';
import { vaultHeadKey, vaultPackKey, vaultPacksPrefix, vaultSumsKey } from '../src/store/keys.ts';
import { localBackend } from '../src/store/local.ts';
import { Repo } from '../src/store/repo.ts';
import { s3Backend } from '../src/store/s3.ts';
import { decodeVaultHead, hasSums } from '../src/store/vault-format.ts';
import { collectVaultPacks } from '../src/store/vault-gc.ts';

const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'a passphrase of the test';
const HOUR = 3_600_000;

/** One collection as `dsync gc` runs it, with the vaults' grace period given. */
const gc = (repo: Repo, vaultGraceMs: number) => runGc(repo, { minAgeMs: 0, windowMs: 0, repackPercent: 100, vaultGraceMs });

/** Pulls `name` (or one of its versions) into memory. */
async function pulled(v: Vault, name: string, version?: number): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  await v.pull(name, async (b) => void parts.push(b.slice()), undefined, version === undefined ? {} : { version });
  return Buffer.concat(parts);
}

for (const label of ['local directory', 'MinIO'] as const) {
  describe(`vault pack collection (${label})`, () => {
    let dir: string;
    let minio: S3Server | undefined;
    let open: () => Promise<Backend>;
    let server: RunningServer;
    let repo: Repo;
    let token: string;
    before(async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-gc-'));
      if (label === 'MinIO') {
        minio = await startMinio();
        const url = `s3://vault-gc-${process.pid}/store`;
        open = () => s3Backend(url, minio!.endpoint, minio!.env);
      } else open = async () => localBackend(path.join(dir, 'store'));
      const users = path.join(dir, 'users.json');
      token = addUser(users, 'alice');
      repo = new Repo(await open());
      server = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', users }, {}), () => {}, repo);
    });
    after(async () => {
      await server?.close();
      await minio?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    const remote = (): VaultRemote => httpVaultRemote(server.url, undefined, { Authorization: `Bearer ${token}` });
    /** The packs the store holds for vault `id`, those it holds sums of, and those of more than one block. */
    const stored = async (id: string) => {
      const packs: string[] = [];
      const multiBlock: string[] = [];
      const prefix = vaultPacksPrefix('alice', id);
      for await (const e of repo.backend.list(prefix)) {
        packs.push(e.key.slice(prefix.length));
        if (hasSums(e.size)) multiBlock.push(e.key.slice(prefix.length));
      }
      const sumsPrefix = vaultSumsKey('alice', id, '0'.repeat(64)).slice(0, -64);
      const sums: string[] = [];
      for await (const e of repo.backend.list(sumsPrefix)) sums.push(e.key.slice(sumsPrefix.length));
      return { packs: packs.sort(), sums: sums.sort(), multiBlock: multiBlock.sort() };
    };
    const listed = async (id: string) => (await remote().head(id))!.packs;

    test('versions beyond retention: gc with grace 0 deletes the packs only the forgotten versions used, with their sums; every live version pulls byte-exact', async () => {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const a = [1, 2, 3].map((i) => randomBytes(100 + i, 200_000));
      const b = randomBytes(110, 150_000);
      for (const [i, bytes] of a.entries()) await vault.push('a', bufferSource(bytes), i + 1);
      await vault.push('b', bufferSource(b), 9);
      await vault.rm('b'); // a deleted file's history is kept, so are its packs
      const before = await stored(vault.id);

      await vault.keep(1);
      const inUse = await listed(vault.id);
      const forgotten = before.packs.filter((p) => !inUse.includes(p));
      assert.ok(forgotten.length >= 2, `versions 1 and 2 of "a" and the older trees used packs of their own: ${forgotten.length}`);
      const storedNow = (await stored(vault.id)).packs;
      assert.ok(inUse.every((p) => storedNow.includes(p)), 'every pack in use is stored');

      // inside the grace period nothing goes
      let report = await gc(repo, HOUR);
      const kept = (await stored(vault.id)).packs;
      assert.ok(before.packs.every((p) => kept.includes(p)), 'every pack is still stored');

      report = await gc(repo, 0);
      assert.equal(report.vaultsFailed, undefined);
      assert.ok(report.vaultPacks >= forgotten.length, JSON.stringify(report));
      const after = await stored(vault.id);
      assert.deepEqual(after.packs, inUse, 'exactly the packs the head names are left');
      assert.deepEqual(after.sums, after.multiBlock, 'and the sums of those of more than one block');
      const head = decodeVaultHead((await repo.backend.getHead(vaultHeadKey('alice', vault.id)))!.body, 'head');
      assert.deepEqual(head.condemned, [], 'the collection finished: nothing left condemned');

      // another device, with nothing cached, reads every live version byte-exact
      const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.deepEqual((await other.log('a')).versions.map((v) => v.n), [3]);
      assert.ok((await pulled(other, 'a')).equals(Buffer.from(a[2])));
      assert.ok((await pulled(other, 'b', 1)).equals(Buffer.from(b)), 'the deleted file\'s kept version');
      await assert.rejects(pulled(other, 'a', 1), /has no version 1/);
      // and the vault goes on: a new version, then another collection takes nothing live
      await other.push('a', bufferSource(a[0]), 10);
      await gc(repo, 0);
      const third = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.ok((await pulled(third, 'a')).equals(Buffer.from(a[0])));
      await assert.rejects(pulled(third, 'a', 3), /has no version 3/);
      assert.deepEqual((await stored(vault.id)).packs, await listed(vault.id));

      // check: a store after a collection checks clean; a pack the head names that the store
      // lacks is reported
      assert.deepEqual((await runCheck(repo)).errors, []);
      const named = (await listed(vault.id))[0];
      await repo.backend.delete(vaultPackKey('alice', vault.id, named));
      const errors = (await runCheck(repo)).errors;
      assert.equal(errors.length, 1, errors.join('\n'));
      assert.ok(errors[0].includes(vault.id) && errors[0].includes(`names 1 pack the store lacks: ${named}`), errors[0]);
      await repo.backend.delete(vaultSumsKey('alice', vault.id, named));
    });

    test('a pack uploaded without a head survives gc inside the grace period; past it, it is collected and a head naming it is refused, changing nothing', async () => {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const data = randomBytes(120, 100_000);
      await vault.push('f', bufferSource(data), 1);
      const r = remote();
      const loose = cryptoBytes(5000);
      const pack = createHash('sha256').update(loose).digest('hex');
      await r.putPack(vault.id, pack, loose);

      await gc(repo, HOUR);
      assert.deepEqual((await stored(vault.id)).packs, [...(await listed(vault.id)), pack].sort(), 'a pack for a head not yet written survives');

      const report = await gc(repo, 0);
      assert.ok(report.vaultPacks >= 1);
      assert.deepEqual((await stored(vault.id)).packs, await listed(vault.id), 'collected past the grace period');
      assert.ok(!(await stored(vault.id)).sums.includes(pack), 'with its sums');

      // a head naming it (or a pack never stored) is refused: 409, the head stays as it was
      const got = (await r.head(vault.id))!;
      for (const missing of [pack, createHash('sha256').update('never uploaded').digest('hex')]) {
        await assert.rejects(r.putHead(vault.id, got.body, got.counter, [...got.packs, missing].sort()), (e: Error & { status?: number }) => e.status === 409 && /names 1 pack the vault does not hold/.test(e.message) && e.message.includes(missing));
      }
      const now = (await r.head(vault.id))!;
      assert.equal(now.counter, got.counter);
      assert.deepEqual(now.packs, got.packs);
      const other = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.ok((await pulled(other, 'f')).equals(Buffer.from(data)));
    });

    test('a device that read a version another device then forgot does not refer to its collected packs: the chunks are uploaded anew', async () => {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const v1 = randomBytes(130, 150_000);
      const v2 = randomBytes(131, 150_000);
      await vault.push('a', bufferSource(v1), 1);
      // device B reads version 1: it knows the vault holds its chunks
      const b = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.ok((await pulled(b, 'a')).equals(Buffer.from(v1)));
      // device A forgets version 1, and gc collects its packs
      await vault.keep(1);
      await vault.push('a', bufferSource(v2), 2);
      assert.ok((await gc(repo, 0)).vaultPacks > 0);
      // B pushes a copy of version 1: the head it reads no longer names those packs, so B
      // uploads the chunks again instead of referring to packs that are gone
      const pushed = await b.push('copy', bufferSource(v1), 3);
      assert.ok(pushed.packs > 0 && pushed.reused === 0, JSON.stringify(pushed));
      await gc(repo, 0);
      const fresh = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.ok((await pulled(fresh, 'copy')).equals(Buffer.from(v1)));
      assert.ok((await pulled(fresh, 'a')).equals(Buffer.from(v2)));
    });

    test('a head written while the collection runs keeps its packs: the collector condemns by compare-and-swap on the head it read, and a head after the swap is refused, never left without a pack', async () => {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const base = randomBytes(140, 80_000);
      await vault.push('base', bufferSource(base), 1);

      /** A device whose next head write waits for `go`, its packs uploaded. */
      const paused = () => {
        let arrived!: () => void;
        const atHead = new Promise<void>((r) => (arrived = r));
        let go!: () => void;
        const released = new Promise<void>((r) => (go = r));
        const real = remote();
        const r: VaultRemote = {
          ...real,
          async putHead(id, body, counter, packs) {
            arrived();
            await released;
            return real.putHead(id, body, counter, packs);
          },
        };
        return { r, atHead, go };
      };

      // 1. the head lands between the collector's read of the head and its swap: the swap fails,
      //    the collector reads the head again and the device's packs are in use
      const one = paused();
      const dev = await openVault(one.r, vault.id, { passphrase: PASS }, memoryHeads());
      const x = randomBytes(141, 120_000);
      const pushing = dev.push('x', bufferSource(x), 2);
      await one.atHead;
      let landed: Promise<unknown> | null = null;
      const backend = await open();
      const getHead = async (key: string) => {
        const got = await backend.getHead(key);
        if (!landed && key === vaultHeadKey('alice', vault.id)) {
          one.go();
          landed = pushing;
          await pushing; // the device's head lands on the head just read
        }
        return got;
      };
      const racing = new Proxy(backend, {
        get: (t, p) => {
          if (p === 'getHead') return getHead;
          const v = Reflect.get(t, p);
          return typeof v === 'function' ? v.bind(t) : v;
        },
      });
      await collectVaultPacks(racing, { graceMs: 0 });
      await backend.close();
      assert.ok(landed, 'the head landed during the collection');
      const inUse = await listed(vault.id);
      assert.deepEqual((await stored(vault.id)).packs, inUse, 'what the new head names is kept, the rest collected');
      const reader = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.ok((await pulled(reader, 'x')).equals(Buffer.from(x)));

      // 2. the collector condemns and deletes the device's packs before its head: the head is
      //    refused (its packs are not held) and the vault is as it was
      const two = paused();
      const dev2 = await openVault(two.r, vault.id, { passphrase: PASS }, memoryHeads());
      const y = randomBytes(142, 120_000);
      const pushing2 = dev2.push('y', bufferSource(y), 3);
      await two.atHead;
      const before = (await remote().head(vault.id))!;
      assert.ok((await gc(repo, 0)).vaultPacks > 0, 'the uploaded packs no head names are collected with grace 0');
      two.go();
      await assert.rejects(pushing2, (e: Error & { status?: number }) => e.status === 409 && /does not hold/.test(e.message) && /push again/.test(e.message));
      const afterHead = (await remote().head(vault.id))!;
      assert.equal(afterHead.counter, before.counter, 'no head written');
      const reader2 = await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
      assert.deepEqual((await reader2.ls()).map((f) => f.name), ['base', 'x']);
      assert.ok((await pulled(reader2, 'x')).equals(Buffer.from(x)));
      assert.ok((await pulled(reader2, 'base')).equals(Buffer.from(base)));
    });

    test('a head without its packs is refused by the server; a head stored before heads named packs is refused by the client and left alone by gc', async () => {
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      await vault.push('f', bufferSource(randomBytes(150, 10_000)), 1);
      const got = (await remote().head(vault.id))!;
      const url = `${server.url}/api/vaults/${vault.id}/head`;
      const auth = { Authorization: `Bearer ${token}` };
      let res = await fetch(url, { method: 'PUT', headers: { ...auth, 'Dsync-Head-Counter': String(got.counter) }, body: got.body as BodyInit });
      assert.equal(res.status, 400);
      assert.match(((await res.json()) as { error: string }).error, /Dsync-Head-Packs/);
      const twoPacks = Buffer.alloc(64, 0xab);
      res = await fetch(url, { method: 'PUT', headers: { ...auth, 'Dsync-Head-Counter': String(got.counter), 'Dsync-Head-Packs': '2' }, body: Buffer.concat([got.body, twoPacks]) });
      assert.equal(res.status, 400, 'a pack named twice');
      await res.body?.cancel();
      res = await fetch(url, { method: 'PUT', headers: { ...auth, 'Dsync-Head-Counter': String(got.counter), 'Dsync-Head-Packs': '2' }, body: twoPacks.subarray(0, 40) });
      assert.equal(res.status, 400, 'a body shorter than its packs');
      await res.body?.cancel();
      assert.equal((await remote().head(vault.id))!.counter, got.counter);

      // a head of the first format (the counter, then the body; no packs): the client refuses
      // it with a clear error, gc deletes nothing of its vault
      const key = vaultHeadKey('alice', vault.id);
      const stored0 = await repo.backend.getHead(key);
      const v1 = Buffer.concat([Buffer.from('DSVH\x01', 'latin1'), Buffer.alloc(8), got.body]);
      v1.writeBigUInt64BE(BigInt(got.counter), 5);
      assert.ok(await repo.backend.putHead(key, v1, stored0!.tag));
      await assert.rejects(remote().head(vault.id), (e: Error) => e instanceof VaultBadAnswer && /names no packs in use/.test(e.message));
      const loose = cryptoBytes(3000);
      await remote().putPack(vault.id, createHash('sha256').update(loose).digest('hex'), loose);
      const packs = (await stored(vault.id)).packs;
      const report = await gc(repo, 0);
      assert.ok(report.vaultsSkipped.some((s) => s.includes(vault.id) && /names no packs/.test(s)), JSON.stringify(report.vaultsSkipped));
      assert.deepEqual((await stored(vault.id)).packs, packs, 'nothing of the vault deleted');
      // the tree's own check: a device refuses a head whose packs are not its tree's
      const now = (await repo.backend.getHead(key))!;
      assert.ok(await repo.backend.putHead(key, stored0!.body, now.tag));
      const h = (await remote().head(vault.id))!;
      const lying = { ...remote(), head: async () => ({ ...h, packs: h.packs.slice(1) }) };
      await assert.rejects(openVault(lying, vault.id, { passphrase: PASS }, memoryHeads()).then((v) => v.ls()), (e: Error) => e instanceof VaultError && /does not name pack .* as in use, which its tree references/.test(e.message));
      const extra = { ...remote(), head: async () => ({ ...h, packs: [...h.packs, 'f'.repeat(64)].sort() }) };
      await assert.rejects(openVault(extra, vault.id, { passphrase: PASS }, memoryHeads()).then((v) => v.ls()), (e: Error) => e instanceof VaultError && /which its tree does not reference \(a client bug\)/.test(e.message));
    });
  });
}
