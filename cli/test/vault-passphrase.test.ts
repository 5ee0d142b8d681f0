// `dsync vault passphrase ID` as a user runs it: the real CLI against a real server on a
// loopback port, over a local directory and over a real MinIO (the keyfile's compare-and-swap is
// the store's). A folder pushed, the passphrase changed: the old one then fails with the clear
// error and changes nothing, the new one opens and every file pulls byte-exact, the recovery
// key still opens and changes the passphrase again. Two changes racing from the same keyfile
// (both CLIs read it before either sends its change, held at a proxy): one lands, the other is
// refused (409) and the vault opens with the winner's passphrase only. An empty or missing new
// passphrase is a usage error (2) with nothing changed.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type S3Server, startMinio } from '../../harness/minio.ts';
import { loadConfig } from '../../server/src/config.ts';
import { startServer } from '../../server/src/server.ts';
import { dsync, filesOf, jsonLines } from './run.ts';

const OLD = 'the first passphrase of the vault';
const NEW = 'a second passphrase, after the change';

/** A proxy to `target` that holds each PUT of a keyfile until `n` of them arrived, then sends
 *  them all on: the CLIs behind it have all read the same keyfile before any change lands. */
async function keyfileGate(target: string, n: number): Promise<{ url: string; close(): Promise<void> }> {
  const t = new URL(target);
  const held: (() => void)[] = [];
  const s = http.createServer(async (req, res) => {
    const body: Buffer[] = [];
    for await (const piece of req) body.push(piece as Buffer);
    if (req.method === 'PUT' && /^\/api\/vaults\/[0-9a-f]{32}\/key$/.test(req.url ?? '')) {
      await new Promise<void>((go) => {
        held.push(go);
        if (held.length === n) held.splice(0).forEach((f) => f());
      });
    }
    const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    up.on('error', (e) => res.destroy(e));
    up.end(Buffer.concat(body));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`,
    close: () => new Promise((r) => s.close(() => r())),
  };
}

for (const label of ['local directory', 'MinIO'] as const) {
  describe(`dsync vault passphrase (${label})`, () => {
    let root: string;
    let url: string;
    let close: () => Promise<void>;
    let minio: S3Server | undefined;
    before(async () => {
      root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-passphrase-'));
      const store = label === 'MinIO' ? `s3://vault-passphrase-${process.pid}/store` : path.join(root, 'store');
      if (label === 'MinIO') {
        minio = await startMinio();
        Object.assign(process.env, minio.env);
      }
      const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store, ...(minio && { 's3-endpoint': minio.endpoint }) }, {}), () => {});
      url = s.url;
      close = async () => void (await s.close());
    });
    after(async () => {
      await close?.();
      await minio?.stop();
      rmSync(root, { recursive: true, force: true });
    });

    const env = (o: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ DSYNC_SERVER: url, XDG_CONFIG_HOME: path.join(root, 'config'), DSYNC_CACHE_DIR: path.join(root, 'cache'), ...o });
    const run = (args: string[], o: NodeJS.ProcessEnv = {}) => dsync(args, { env: env(o), cwd: root });
    async function ok(args: string[], o: NodeJS.ProcessEnv): Promise<any[]> {
      const r = await run([...args, '--json'], o);
      assert.equal(r.code, 0, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
      return jsonLines(r.stdout);
    }
    /** What the server holds of the vault: its keyfile and its head's bytes. */
    const held = async (id: string) => {
      const key = Buffer.from(await (await fetch(`${url}/api/vaults/${id}/key`)).arrayBuffer());
      const head = await fetch(`${url}/api/vaults/${id}/head`);
      return { key: key.toString('hex'), head: head.headers.get('Dsync-Head-Counter'), body: Buffer.from(await head.arrayBuffer()).toString('hex') };
    };
    const opens = async (id: string, pass: string) => (await run(['vault', 'ls', id, '--json'], { DSYNC_VAULT_PASSPHRASE: pass })).code === 0;

    test('change, the old passphrase refused with nothing changed, every file byte-exact with the new one, the recovery key, a change from it, and two changes racing', async () => {
      const [{ id, recoveryKey }] = await ok(['vault', 'create'], { DSYNC_VAULT_PASSPHRASE: OLD });
      const rk = path.join(root, 'recovery-key');
      writeFileSync(rk, recoveryKey);
      const folder = path.join(root, 'papers');
      mkdirSync(path.join(folder, 'inner'), { recursive: true });
      writeFileSync(path.join(folder, 'contract.txt'), 'the terms of the agreement, in full\n'.repeat(400));
      writeFileSync(path.join(folder, 'inner', 'scan.bin'), randomBytes(7, 900_000));
      writeFileSync(path.join(folder, 'empty'), '');
      await ok(['push', 'papers', '--vault', id], { DSYNC_VAULT_PASSPHRASE: OLD });

      // an empty or missing new passphrase: a usage error, nothing changed
      const before0 = await held(id);
      const empty = path.join(root, 'empty-passphrase');
      writeFileSync(empty, '\n');
      assert.equal((await run(['vault', 'passphrase', id, '--new-passphrase-file', empty], { DSYNC_VAULT_PASSPHRASE: OLD })).code, 2);
      assert.equal((await run(['vault', 'passphrase', id], { DSYNC_VAULT_PASSPHRASE: OLD, DSYNC_VAULT_NEW_PASSPHRASE: '' })).code, 2);
      assert.deepEqual(await held(id), before0);

      // the change: the new passphrase from a file
      const next = path.join(root, 'new-passphrase');
      writeFileSync(next, `${NEW}\n`);
      assert.deepEqual(await ok(['vault', 'passphrase', id, '--new-passphrase-file', next], { DSYNC_VAULT_PASSPHRASE: OLD }), [{ id, changed: true }]);
      const changed = await held(id);
      assert.notEqual(changed.key, before0.key, 'a new keyfile');
      assert.equal(changed.key.length, before0.key.length);
      assert.equal(changed.key.slice(52, 116), before0.key.slice(52, 116), 'the same key check (bytes 26–57)');
      assert.equal(changed.body, before0.body, 'the head is untouched');

      // the old passphrase: the clear error, and nothing changes (not even by a push)
      const refused = await run(['vault', 'ls', id], { DSYNC_VAULT_PASSPHRASE: OLD });
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /the passphrase does not open vault/);
      writeFileSync(path.join(root, 'late.txt'), 'pushed with the old passphrase');
      const late = await run(['push', path.join(root, 'late.txt'), '--vault', id], { DSYNC_VAULT_PASSPHRASE: OLD });
      assert.equal(late.code, 1);
      assert.match(late.stderr, /the passphrase does not open vault/);
      assert.deepEqual(await held(id), changed);

      // the new one: every file byte-exact
      const out = path.join(root, 'pulled');
      await ok(['pull', 'papers/', '--out', out, '--vault', id], { DSYNC_VAULT_PASSPHRASE: NEW });
      const want = filesOf(folder);
      const got = filesOf(out);
      assert.deepEqual([...got.keys()].sort(), [...want.keys()].sort());
      for (const [p, b] of want) assert.ok(got.get(p)!.equals(b), p);

      // the recovery key opens, and changes the passphrase again (the current one not given)
      const listed = (await ok(['ls', '-R', '--vault', id, '--recovery-key-file', rk], {})).flatMap((f) => (f.folder ? [] : [f.name]));
      assert.deepEqual(listed.sort(), ['papers/contract.txt', 'papers/empty', 'papers/inner/scan.bin']);
      const third = 'a third passphrase, set from the recovery key';
      await ok(['vault', 'passphrase', id, '--recovery-key-file', rk], { DSYNC_VAULT_NEW_PASSPHRASE: third });
      assert.equal(await opens(id, NEW), false);
      assert.equal(await opens(id, third), true);
      const scan = path.join(root, 'scan-again.bin');
      await ok(['pull', 'papers/inner/scan.bin', '--out', scan, '--vault', id], { DSYNC_VAULT_PASSPHRASE: third });
      assert.ok(readFileSync(scan).equals(want.get('inner/scan.bin')!));

      // two changes from the same keyfile: one lands, the other is refused and changes nothing
      const gate = await keyfileGate(url, 2);
      try {
        const racing = ['racer one', 'racer two'];
        const runs = await Promise.all(racing.map((p) => run(['vault', 'passphrase', id], { DSYNC_SERVER: gate.url, DSYNC_VAULT_PASSPHRASE: third, DSYNC_VAULT_NEW_PASSPHRASE: p })));
        const won = runs.flatMap((r, i) => (r.code === 0 ? [i] : []));
        assert.equal(won.length, 1, runs.map((r) => r.stdout + r.stderr).join('\n'));
        const lost = runs[1 - won[0]];
        assert.equal(lost.code, 1);
        assert.match(lost.stderr, /not the one this change replaces/);
        assert.equal(await opens(id, racing[won[0]]), true);
        assert.equal(await opens(id, racing[1 - won[0]]), false);
        assert.equal(await opens(id, third), false);
        await ok(['ls', '--vault', id, '--recovery-key-file', rk], {});
      } finally {
        await gate.close();
      }
    });
  });
}
