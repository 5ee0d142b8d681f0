// `dsync check` of a store's vault keyfiles, as a user runs it: the real CLI over the store a
// real server on a loopback port wrote, on a local directory (bytes changed on disk) and on a
// real MinIO (objects overwritten through the S3 API). Vaults as created and after a passphrase
// change, some with a pushed file, check clean; then a keyfile as created with another version
// byte, a changed keyfile asking for Argon2id beyond VAULT_ARGON2_MAX, a keyfile cut short, a
// changed keyfile's head whose magic is damaged, and a vault whose keyfile is gone are each one
// line of the report (exit 1, no crash), and the untouched vaults are named in none.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readSync, readdirSync, rmSync, truncateSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import '../../shared/src/chunking/wasm.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { KEYFILE_BYTES } from '../../shared/src/vault/keys.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { createVault, memoryHeads } from '../../shared/src/vault/vault.ts';
import { loadConfig } from '../../server/src/config.ts';
import { startServer } from '../../server/src/server.ts';
import type { Backend } from '../../server/src/store/backend.ts';
import { vaultKeyfileHeadKey, vaultKeyfileKey } from '../../server/src/store/keys.ts';
import { s3Backend } from '../../server/src/store/s3.ts';
import { dsync, dsyncOnTerminal, jsonLines } from './run.ts';

const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'the passphrase of the check test';
/** The user of a server without a users file (single-user mode). */
const USER = 'local';
/** A changed keyfile's head: DSVK 0x01 and the creation time before the keyfile's bytes. */
const HEAD_PREFIX = 13;

/** How a test changes a stored object's bytes: in place on disk, or through the S3 API. */
interface Damage {
  /** XORs the byte at `at` of the content object `key` */
  flip(key: string, at: number): Promise<void>;
  /** the same in the current generation of the head object `key` */
  flipHead(key: string, at: number): Promise<void>;
  /** cuts the content object `key` to `n` bytes */
  cut(key: string, n: number): Promise<void>;
  remove(key: string): Promise<void>;
}

function onDisk(store: string): Damage {
  const flipFile = (file: string, at: number) => {
    const fd = openSync(file, 'r+');
    try {
      const b = Buffer.alloc(1);
      assert.equal(readSync(fd, b, 0, 1, at), 1);
      b[0] ^= 0x5a;
      writeSync(fd, b, 0, 1, at);
    } finally {
      closeSync(fd);
    }
  };
  return {
    flip: async (key, at) => flipFile(path.join(store, key), at),
    async flipHead(key, at) {
      // local.ts: a head is <key>@h/<generation>, the highest current
      const dir = path.join(store, `${key}@h`);
      const top = readdirSync(dir).filter((n) => /^\d+$/.test(n)).sort((a, b) => Number(b) - Number(a))[0];
      flipFile(path.join(dir, top), at);
    },
    cut: async (key, n) => truncateSync(path.join(store, key), n),
    remove: async (key) => unlinkSync(path.join(store, key)),
  };
}

function throughS3(b: Backend): Damage {
  const rewrite = async (key: string, change: (x: Buffer) => Buffer) => {
    const body = change(Buffer.from(await b.get(key)));
    await b.delete(key);
    assert.ok(await b.putIfAbsent(key, body));
  };
  return {
    flip: (key, at) =>
      rewrite(key, (x) => {
        x[at] ^= 0x5a;
        return x;
      }),
    async flipHead(key, at) {
      const got = (await b.getHead(key))!;
      const body = Buffer.from(got.body);
      body[at] ^= 0x5a;
      assert.ok(await b.putHead(key, body, got.tag));
    },
    cut: (key, n) => rewrite(key, (x) => x.subarray(0, n)),
    remove: (key) => b.delete(key),
  };
}

for (const label of ['local directory', 'MinIO'] as const) {
  describe(`dsync check of vault keyfiles (${label})`, () => {
    let root: string;
    let minio: S3Server | undefined;
    let backend: Backend | undefined;
    let url: string;
    let close: () => Promise<void>;
    let store: string;
    let damage: Damage;
    before(async () => {
      root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-check-'));
      store = label === 'MinIO' ? `s3://vault-check-${process.pid}/store` : path.join(root, 'store');
      if (label === 'MinIO') {
        minio = await startMinio();
        Object.assign(process.env, minio.env);
      }
      const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store, ...(minio && { 's3-endpoint': minio.endpoint }) }, {}), () => {});
      url = s.url;
      close = async () => void (await s.close());
      if (minio) {
        backend = await s3Backend(store, minio.endpoint, minio.env);
        damage = throughS3(backend);
      } else damage = onDisk(store);
    });
    after(async () => {
      await close?.();
      await backend?.close();
      await minio?.stop();
      rmSync(root, { recursive: true, force: true });
    });

    const check = (args: string[] = ['--json']) =>
      dsync(['check', '--store', store, ...(minio ? ['--s3-endpoint', minio.endpoint] : []), ...args], { cwd: root });

    test('good keyfiles pass; a keyfile of another version, beyond the Argon2id maximum, cut short, a damaged keyfile head and a missing keyfile are each reported, not crashed on', async () => {
      const remote = httpVaultRemote(url);
      const make = async (o: { push?: boolean; change?: boolean }) => {
        const { vault } = await createVault(remote, PASS, memoryHeads(), LIGHT);
        if (o.push) await vault.push('notes.txt', bufferSource(randomBytes(50_000)), Date.now());
        if (o.change) await vault.changePassphrase('another passphrase', LIGHT);
        return vault.id;
      };
      const v = {
        version: await make({ push: true }),
        argon: await make({ change: true }),
        cut: await make({}),
        magic: await make({ change: true, push: true }),
        gone: await make({ push: true }),
        cleanCreated: await make({ push: true }),
        cleanChanged: await make({ change: true, push: true }),
        cleanBare: await make({}),
      };
      const n = Object.keys(v).length;

      const clean = await check();
      assert.equal(clean.code, 0, clean.stdout + clean.stderr);
      const report = jsonLines(clean.stdout)[0];
      assert.deepEqual(report.errors, []);
      assert.equal(report.vaults, n);

      await damage.flip(vaultKeyfileKey(USER, v.version), 0); // version 1 → 0x5b
      await damage.flipHead(vaultKeyfileHeadKey(USER, v.argon), HEAD_PREFIX + 1); // m's high byte
      await damage.cut(vaultKeyfileKey(USER, v.cut), KEYFILE_BYTES - 1);
      await damage.flipHead(vaultKeyfileHeadKey(USER, v.magic), 0);
      await damage.remove(vaultKeyfileKey(USER, v.gone));

      const bad = await check();
      assert.equal(bad.code, 1, bad.stdout + bad.stderr);
      assert.doesNotMatch(bad.stderr, /Error|\n\s+at /, 'no crash');
      const { errors, vaults } = jsonLines(bad.stdout)[0] as { errors: string[]; vaults: number };
      assert.equal(vaults, n);
      const lineOf = (id: string) => {
        const lines = errors.filter((e) => e.includes(id));
        assert.equal(lines.length, 1, `one line for ${id}: ${JSON.stringify(errors)}`);
        return lines[0];
      };
      assert.match(lineOf(v.version), new RegExp(`^${vaultKeyfileKey(USER, v.version)}: a damaged vault keyfile \\(a keyfile of an unknown version\\)`));
      assert.match(lineOf(v.argon), new RegExp(`^${vaultKeyfileHeadKey(USER, v.argon)}: a damaged vault keyfile \\(the keyfile asks for Argon2id m=\\d+ KiB t=1 p=1, beyond`));
      assert.match(lineOf(v.cut), new RegExp(`^${vaultKeyfileKey(USER, v.cut)}: a damaged vault keyfile \\(.*cut short`));
      assert.match(lineOf(v.magic), new RegExp(`^${vaultKeyfileHeadKey(USER, v.magic)}: a damaged vault keyfile \\(not a keyfile head`));
      assert.match(lineOf(v.gone), /has objects but no keyfile: no device can open it/);
      assert.equal(errors.length, 5, JSON.stringify(errors));
      for (const id of [v.cleanCreated, v.cleanChanged, v.cleanBare]) assert.ok(!errors.some((e) => e.includes(id)), `${id} is whole: ${JSON.stringify(errors)}`);

      // the lines as a person reads them, and the count
      const human = await dsyncOnTerminal(['check', '--store', store, ...(minio ? ['--s3-endpoint', minio.endpoint] : [])], { cwd: root });
      assert.equal(human.code, 1);
      assert.doesNotMatch(human.out, /Error|\n\s+at /);
      for (const e of errors) assert.ok(human.out.includes(e), e);
      assert.match(human.out, new RegExp(`, ${n} vaults: 5 problems\\n`));
    });
  });
}
