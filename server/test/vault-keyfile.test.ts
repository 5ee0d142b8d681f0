// A vault's keyfile replaced by a passphrase change (docs/vaults.md, "Changing the
// passphrase"): a real server on a loopback port with two accounts, over a local directory and
// over a real MinIO, driven over HTTP and through the client's Vault. PUT /api/vaults/:id/key
// lands only on the keyfile the client read (If-Match), only a version-1 keyfile of exactly its
// size, with Argon2id parameters within VAULT_ARGON2_MAX and the stored key check; everything
// else is refused with the stored keyfile byte-identical afterwards. Of changes racing from one
// keyfile exactly one lands. The keyfile as created is gone from the store after a change.
// POST /api/vaults takes only a keyfile the PUT would take (nothing stored otherwise).
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { VAULT_ARGON2_MAX, VAULT_KEYFILE_MAX } from '../../shared/src/base/limits.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { KEYFILE_BYTES, fromRecoveryKey, newVaultKey, wrapKey } from '../../shared/src/vault/keys.ts';
import { VaultKeyfileChanged, VaultNotFound, httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { createVault, memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { VaultError } from '../../shared/src/vault/format.ts';
import { loadConfig } from '../src/config.ts';
import { addUser } from '../src/http/auth.ts';
import { type RunningServer, startServer } from '../src/server.ts';
import type { Backend } from '../src/store/backend.ts';
import { NotFoundError } from '../src/store/backend.ts';
import { vaultKeyfileHeadKey, vaultKeyfileKey } from '../src/store/keys.ts';
import { localBackend } from '../src/store/local.ts';
import { Repo } from '../src/store/repo.ts';
import { s3Backend } from '../src/store/s3.ts';

const LIGHT = { m: 64, t: 1, p: 1 };
const PASS = 'the passphrase of the keyfile test';
const tag = (b: Uint8Array) => `"${createHash('sha256').update(b).digest('hex')}"`;

for (const label of ['local directory', 'MinIO'] as const) {
  describe(`vault keyfile changes (${label})`, () => {
    let dir: string;
    let minio: S3Server | undefined;
    let server: RunningServer;
    let backend: Backend;
    const tokens: Record<string, string> = {};
    before(async () => {
      dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-keyfile-'));
      let open: () => Promise<Backend>;
      if (label === 'MinIO') {
        minio = await startMinio();
        const url = `s3://vault-keyfile-${process.pid}/store`;
        open = () => s3Backend(url, minio!.endpoint, minio!.env);
      } else open = async () => localBackend(path.join(dir, 'store'));
      const users = path.join(dir, 'users.json');
      tokens.alice = addUser(users, 'alice');
      tokens.bob = addUser(users, 'bob');
      backend = await open();
      server = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', users }, {}), () => {}, new Repo(backend));
    });
    after(async () => {
      await server?.close();
      await minio?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    const auth = (who: string) => ({ Authorization: `Bearer ${tokens[who]}` });
    const remote = (who = 'alice') => httpVaultRemote(server.url, undefined, auth(who));
    const keyOf = async (id: string, who = 'alice') => {
      const r = await fetch(`${server.url}/api/vaults/${id}/key`, { headers: auth(who) });
      assert.equal(r.status, 200);
      return { bytes: Buffer.from(await r.arrayBuffer()), etag: r.headers.get('etag') };
    };
    const put = (id: string, body: Uint8Array, headers: Record<string, string>, who = 'alice') =>
      fetch(`${server.url}/api/vaults/${id}/key`, { method: 'PUT', headers: { ...auth(who), 'Content-Type': 'application/octet-stream', ...headers }, body: body as BodyInit });

    test('a change: the new passphrase opens, the old one does not, the recovery key still does; the keyfile as created is gone from the store; the vault is listed as created then', async () => {
      const { vault, recoveryKey } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      const first = await keyOf(vault.id);
      assert.equal(first.etag, tag(first.bytes));
      const created = ((await (await fetch(`${server.url}/api/vaults`, { headers: auth('alice') })).json()) as { vaults: { id: string; created: number }[] }).vaults.find((v) => v.id === vault.id)!.created;

      await vault.changePassphrase('the new passphrase', LIGHT);
      const second = await keyOf(vault.id);
      assert.equal(second.bytes.length, KEYFILE_BYTES);
      assert.ok(!second.bytes.equals(first.bytes));
      assert.ok(second.bytes.subarray(26, 58).equals(first.bytes.subarray(26, 58)), 'the same key check');
      assert.ok(!second.bytes.subarray(10, 26).equals(first.bytes.subarray(10, 26)), 'a fresh salt');
      await assert.rejects(openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads()), /the passphrase does not open vault/);
      await openVault(remote(), vault.id, { passphrase: 'the new passphrase' }, memoryHeads());
      await openVault(remote(), vault.id, { recoveryKey }, memoryHeads());
      await assert.rejects(backend.get(vaultKeyfileKey('alice', vault.id)), NotFoundError, 'the keyfile the old passphrase opens is deleted');
      const listed = ((await (await fetch(`${server.url}/api/vaults`, { headers: auth('alice') })).json()) as { vaults: { id: string; created: number }[] }).vaults.filter((v) => v.id === vault.id);
      assert.deepEqual(listed, [{ id: vault.id, created }]);
      // the id is taken still
      const again = await fetch(`${server.url}/api/vaults`, { method: 'POST', headers: { ...auth('alice'), 'Content-Type': 'application/json' }, body: JSON.stringify({ id: vault.id, keyfile: first.bytes.toString('base64') }) });
      assert.equal(again.status, 409);
      assert.ok((await keyOf(vault.id)).bytes.equals(second.bytes));

      // the same Vault object changes it again (it replaces what it wrote), from a recovery key too
      await vault.changePassphrase('a third one', LIGHT);
      const byRecovery = await openVault(remote(), vault.id, { recoveryKey }, memoryHeads());
      await byRecovery.changePassphrase('a fourth one', LIGHT);
      await assert.rejects(openVault(remote(), vault.id, { passphrase: 'a third one' }, memoryHeads()), /the passphrase does not open vault/);
      await openVault(remote(), vault.id, { passphrase: 'a fourth one' }, memoryHeads());
      // the first Vault read a keyfile that is gone: refused, nothing changed
      const now = await keyOf(vault.id);
      await assert.rejects(vault.changePassphrase('stale', LIGHT), VaultKeyfileChanged);
      assert.ok((await keyOf(vault.id)).bytes.equals(now.bytes));
      await assert.rejects(vault.changePassphrase('', LIGHT), (e) => e instanceof VaultError && /empty passphrase/.test(e.message));
    });

    test('hostile changes are refused and the stored keyfile stays byte-identical: another key check, truncated, a byte more, another version, parameters beyond the maximum, a stale or missing If-Match; another account gets 404', async () => {
      for (const round of ['as created', 'after a change']) {
        const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
        const id = vault.id;
        if (round === 'after a change') await vault.changePassphrase('changed once', LIGHT);
        const stored = await keyOf(id);
        const good = await wrapKey(id, newVaultKey(), 'x', LIGHT); // a valid keyfile of another key
        const valid = Buffer.from(good);
        stored.bytes.copy(valid, 26, 26, 58); // the stored key check: valid as far as the server can tell
        const patch = (at: number, bytes: number[]) => {
          const b = Buffer.from(valid);
          b.set(bytes, at);
          return b;
        };
        const u32 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
        const cases: [string, Uint8Array, Record<string, string>, number, RegExp][] = [
          ['another key check', good, { 'If-Match': stored.etag! }, 400, /key check is not vault/],
          ['truncated', valid.subarray(0, KEYFILE_BYTES - 1), { 'If-Match': stored.etag! }, 400, /cut short/],
          ['cut to its head', valid.subarray(0, 58), { 'If-Match': stored.etag! }, 400, /cut short/],
          ['a byte more', Buffer.concat([valid, Buffer.from([0])]), { 'If-Match': stored.etag! }, 400, /not a keyfile/],
          ['version 2', patch(0, [2]), { 'If-Match': stored.etag! }, 400, /unknown version/],
          ['version 0', patch(0, [0]), { 'If-Match': stored.etag! }, 400, /unknown version/],
          ['m beyond the maximum', patch(1, u32(VAULT_ARGON2_MAX.m + 1)), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['t beyond the maximum', patch(5, u32(VAULT_ARGON2_MAX.t + 1)), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['t 0', patch(5, u32(0)), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['p beyond the maximum', patch(9, [VAULT_ARGON2_MAX.p + 1]), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['p 0', patch(9, [0]), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['m under 8p', patch(1, u32(7)), { 'If-Match': stored.etag! }, 400, /beyond what/],
          ['random bytes of its size', randomBytes(KEYFILE_BYTES), { 'If-Match': stored.etag! }, 400, /./],
          ['a stale If-Match', valid, { 'If-Match': tag(randomBytes(KEYFILE_BYTES)) }, 409, /not the one this change replaces/],
          ['If-Match of no keyfile form', valid, { 'If-Match': '*' }, 400, /If-Match/],
          ['no If-Match', valid, {}, 428, /If-Match/],
          ['empty', new Uint8Array(0), { 'If-Match': stored.etag! }, 400, /at least 1 byte/],
          ['beyond VAULT_KEYFILE_MAX', randomBytes(VAULT_KEYFILE_MAX + 1), { 'If-Match': stored.etag! }, 413, /at most/],
        ];
        for (const [what, body, headers, status, why] of cases) {
          const r = await put(id, body, headers);
          const text = await r.text();
          assert.equal(r.status, status, `${round}, ${what}: ${text}`);
          assert.match(JSON.parse(text).error, why, `${round}, ${what}`);
          assert.ok((await keyOf(id)).bytes.equals(stored.bytes), `${round}, ${what}: the stored keyfile is byte-identical`);
        }
        // bob: alice's vault does not exist for him, with every header right
        const bobs = await put(id, valid, { 'If-Match': stored.etag! }, 'bob');
        assert.equal(bobs.status, 404, await bobs.text());
        await assert.rejects(remote('bob').putKeyfile(id, valid, stored.bytes), VaultNotFound);
        assert.ok((await keyOf(id)).bytes.equals(stored.bytes));
        // and the keyfile the server would take lands
        const r = await put(id, valid, { 'If-Match': stored.etag! });
        assert.equal(r.status, 200, await r.text());
        assert.ok((await keyOf(id)).bytes.equals(valid));
      }
      // a vault whose stored keyfile is not a version-1 keyfile (POST refuses one: a store
      // written before it did): its key check cannot be compared
      const id = randomBytes(16).toString('hex');
      assert.ok(await backend.putIfAbsent(vaultKeyfileKey('alice', id), randomBytes(300)));
      const odd = await keyOf(id);
      const r = await put(id, await wrapKey(id, newVaultKey(), 'z', LIGHT), { 'If-Match': odd.etag! });
      assert.equal(r.status, 409);
      assert.match(((await r.json()) as { error: string }).error, /not a version-1 keyfile/);
      assert.ok((await keyOf(id)).bytes.equals(odd.bytes));
      assert.equal((await put(randomBytes(16).toString('hex'), odd.bytes, { 'If-Match': odd.etag! })).status, 404, 'no such vault');
    });

    test('POST /api/vaults takes only what PUT /key takes: each malformed keyfile is a 400 naming what is wrong, with nothing stored; a valid one (parameters at the maximum too) is created', async () => {
      const post = (id: string, keyfile: Uint8Array, who = 'alice') =>
        fetch(`${server.url}/api/vaults`, { method: 'POST', headers: { ...auth(who), 'Content-Type': 'application/json' }, body: JSON.stringify({ id, keyfile: Buffer.from(keyfile).toString('base64') }) });
      const listed = async () => ((await (await fetch(`${server.url}/api/vaults`, { headers: auth('alice') })).json()) as { vaults: { id: string }[] }).vaults.map((v) => v.id);
      const u32 = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
      for (let round = 0; round < 2; round++) {
        const id = randomBytes(16).toString('hex');
        const valid = Buffer.from(await wrapKey(id, newVaultKey(), PASS, LIGHT));
        const patch = (at: number, bytes: number[]) => {
          const b = Buffer.from(valid);
          b.set(bytes, at);
          return b;
        };
        const cases: [string, Uint8Array, RegExp][] = [
          ['truncated', valid.subarray(0, KEYFILE_BYTES - 1), /cut short/],
          ['cut to its head', valid.subarray(0, 58), /cut short/],
          ['one byte', valid.subarray(0, 1), /cut short/],
          ['a byte more', Buffer.concat([valid, Buffer.from([0])]), /not a keyfile/],
          ['the largest size', Buffer.concat([valid, randomBytes(VAULT_KEYFILE_MAX - KEYFILE_BYTES)]), /not a keyfile/],
          ['version 2', patch(0, [2]), /unknown version/],
          ['version 0', patch(0, [0]), /unknown version/],
          ['m beyond the maximum', patch(1, u32(VAULT_ARGON2_MAX.m + 1)), /beyond what/],
          ['m 2^32 - 1', patch(1, u32(0xffffffff)), /beyond what/],
          ['t beyond the maximum', patch(5, u32(VAULT_ARGON2_MAX.t + 1)), /beyond what/],
          ['t 0', patch(5, u32(0)), /beyond what/],
          ['p beyond the maximum', patch(9, [VAULT_ARGON2_MAX.p + 1]), /beyond what/],
          ['p 0', patch(9, [0]), /beyond what/],
          ['m under 8p', patch(1, u32(7)), /beyond what/],
          ['random bytes of its size, another version', Buffer.concat([Buffer.from([0xff]), randomBytes(KEYFILE_BYTES - 1)]), /unknown version/],
        ];
        for (const [what, keyfile, why] of cases) {
          const r = await post(id, keyfile);
          const text = await r.text();
          assert.equal(r.status, 400, `${what}: ${text}`);
          const error = JSON.parse(text).error as string;
          assert.match(error, /^not a keyfile: /, what);
          assert.match(error, why, what);
          assert.match(error, /nothing stored/, what);
          // nothing stored: no keyfile under either key, no vault listed or readable
          assert.equal(await backend.size(vaultKeyfileKey('alice', id)), null, `${what}: no keyfile as created`);
          assert.equal(await backend.getHead(vaultKeyfileHeadKey('alice', id)), null, `${what}: no changed keyfile`);
          assert.equal((await fetch(`${server.url}/api/vaults/${id}/key`, { headers: auth('alice') })).status, 404, what);
          assert.ok(!(await listed()).includes(id), what);
        }
        // through the client: the same refusal
        await assert.rejects(remote().create(id, patch(0, [2])), (e: Error & { status?: number }) => e.status === 400 && /unknown version/.test(e.message));
        // a valid keyfile, or one at the largest parameters (the server cannot tell), is created under the id
        const good = round === 0 ? valid : patch(1, [...u32(VAULT_ARGON2_MAX.m), ...u32(VAULT_ARGON2_MAX.t), VAULT_ARGON2_MAX.p]);
        const r = await post(id, good);
        assert.equal(r.status, 201, await r.text());
        assert.ok((await keyOf(id)).bytes.equals(good));
        assert.ok((await listed()).includes(id));
        assert.equal((await post(id, good)).status, 409);
      }
      // a vault created through the client opens with its passphrase
      const { vault } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      await openVault(remote(), vault.id, { passphrase: PASS }, memoryHeads());
    });

    test('changes racing from one keyfile: exactly one lands, the others get 409, and the stored keyfile is the winner\'s', async () => {
      const { vault, recoveryKey } = await createVault(remote(), PASS, memoryHeads(), LIGHT);
      for (const round of [1, 2]) {
        const current = await keyOf(vault.id);
        const key = fromRecoveryKey(recoveryKey);
        const offers = await Promise.all(Array.from({ length: 6 }, (_, i) => wrapKey(vault.id, key, `round ${round} racer ${i}`, LIGHT)));
        const answers = await Promise.all(offers.map((k) => put(vault.id, k, { 'If-Match': current.etag! })));
        const statuses = answers.map((a) => a.status);
        assert.equal(statuses.filter((s) => s === 200).length, 1, `round ${round}: ${statuses}`);
        assert.equal(statuses.filter((s) => s === 409).length, 5, `round ${round}: ${statuses}`);
        const winner = statuses.indexOf(200);
        assert.ok((await keyOf(vault.id)).bytes.equals(offers[winner]));
        await openVault(remote(), vault.id, { passphrase: `round ${round} racer ${winner}` }, memoryHeads());
        await assert.rejects(openVault(remote(), vault.id, { passphrase: `round ${round} racer ${(winner + 1) % 6}` }, memoryHeads()), /the passphrase does not open vault/);
      }
      // two devices that opened the vault from one keyfile
      const a = await openVault(remote(), vault.id, { recoveryKey }, memoryHeads());
      const b = await openVault(remote(), vault.id, { recoveryKey }, memoryHeads());
      const outcomes = await Promise.allSettled([a.changePassphrase('device a', LIGHT), b.changePassphrase('device b', LIGHT)]);
      assert.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1);
      const lost = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult;
      assert.ok(lost.reason instanceof VaultKeyfileChanged, String(lost.reason));
      const won = outcomes[0].status === 'fulfilled' ? 'device a' : 'device b';
      await openVault(remote(), vault.id, { passphrase: won }, memoryHeads());
      await assert.rejects(openVault(remote(), vault.id, { passphrase: won === 'device a' ? 'device b' : 'device a' }, memoryHeads()), /the passphrase does not open vault/);
    });
  });
}
