// `dsync vault` (cli/commands/vault.ts) as a user runs it: the real CLI against a real server on
// a loopback port. create, push, an 8-byte edit pushed as a few KB, pull into a new file and
// over the old copy (only the changed chunk fetched, the mtime kept), a wrong passphrase refused
// with the destination untouched, the recovery key, and a store restored from an older copy of
// the head refused as a rollback; versions pulled by number, log, rm with ls --deleted, restore,
// mv with the history and keep.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { dsync, jsonLines } from '../../cli/test/run.ts';

let server: TestServer;
let dir: string;
before(async () => {
  server = await testServer();
  dir = mkdtempSync(path.join(tmpdir(), 'dsync-vault-cli-'));
});
after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const env = () => ({ DSYNC_SERVER: server.url, XDG_CONFIG_HOME: path.join(dir, 'config'), DSYNC_CACHE_DIR: path.join(dir, 'cache'), DSYNC_VAULT_PASSPHRASE: 'the cli passphrase' });
async function ok(args: string[], extra: NodeJS.ProcessEnv = {}) {
  const r = await dsync(['vault', ...args, '--json'], { env: { ...env(), ...extra }, cwd: dir });
  assert.equal(r.code, 0, `dsync vault ${args.join(' ')}: ${r.stderr}`);
  return jsonLines(r.stdout) as any[];
}

/** The store's head of the vault: a directory of generations, the newest holding the head
 *  (server/src/store/local.ts). */
function headDir(id: string): string {
  const found: string[] = [];
  const walk = (p: string) => {
    for (const n of readdirSync(p)) {
      const q = path.join(p, n);
      if (!statSync(q).isDirectory()) continue;
      if (q.endsWith(path.join('heads', id) + HEAD_DIR)) found.push(q);
      else walk(q);
    }
  };
  walk(server.data);
  assert.equal(found.length, 1, `the head of ${id}: ${found}`);
  return found[0];
}
/** server/src/store/local.ts's suffix of a head's directory */
const HEAD_DIR = '@h';
const generations = (id: string) => readdirSync(headDir(id)).filter((n) => /^\d+$/.test(n)).map(Number).sort((a, b) => b - a);
const newestHead = (id: string) => readFileSync(path.join(headDir(id), String(generations(id)[0])));

test('dsync vault: create, push, an edit, pull over the old copy, a wrong passphrase, the recovery key, a rolled-back store', async () => {
  const [{ id, recoveryKey }] = await ok(['create']);
  assert.match(id, /^[0-9a-f]{32}$/);
  const data = randomBytes(51, 5_000_000);
  const file = path.join(dir, 'notes.bin');
  writeFileSync(file, data);
  utimesSync(file, new Date(), new Date(1764400000000));
  const [first] = await ok(['push', id, file, 'private/notes.bin']);
  assert.equal(first.size, data.length);
  assert.deepEqual(await ok(['ls', id]), [{ name: 'private/notes.bin', size: data.length, mtime: 1764400000000 }]);

  const copy = path.join(dir, 'copy.bin');
  const [pulled] = await ok(['pull', id, 'private/notes.bin', copy]);
  assert.equal(pulled.local, 0);
  assert.ok(readFileSync(copy).equals(data));
  assert.equal(statSync(copy).mtimeMs, 1764400000000);
  const oldHead = newestHead(id);

  const edited = data.slice();
  edited.set(Buffer.from('8 bytes!'), 2_500_000);
  writeFileSync(file, edited);
  const [second] = await ok(['push', id, file, 'private/notes.bin']);
  // the edit's chunk (the vault's random key may cut a few more around it before its cuts meet
  // the old ones again), and the pull fetches only what the push sealed
  const made = second.chunks - second.reused;
  assert.ok(made >= 1 && made <= 8 && second.packBytes < 300_000, JSON.stringify(second));
  const [again] = await ok(['pull', id, 'private/notes.bin', copy]);
  assert.ok(again.local === again.chunks - made && again.fetchedBytes < 300_000, JSON.stringify(again));
  assert.ok(readFileSync(copy).equals(edited));

  // the list pieces the CLI fetched or wrote are kept in $DSYNC_CACHE_DIR/vaults/<id>/; damaged
  // ones are refused and fetched again
  const cache = path.join(dir, 'cache', 'vaults', id);
  const pieces = readdirSync(cache);
  assert.ok(pieces.length >= 2 && pieces.every((n) => /^[0-9a-f]{64}$/.test(n)), pieces.join(' '));
  for (const n of pieces) {
    const b = readFileSync(path.join(cache, n));
    b[b.length >> 1] ^= 1;
    writeFileSync(path.join(cache, n), b);
  }
  await ok(['pull', id, 'private/notes.bin', copy]);
  assert.ok(readFileSync(copy).equals(edited));

  // a wrong passphrase: refused, the destination untouched, no temporary file left
  const wrong = await dsync(['vault', 'pull', id, 'private/notes.bin', copy], { env: { ...env(), DSYNC_VAULT_PASSPHRASE: 'not it' }, cwd: dir });
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderr, /the passphrase does not open vault/);
  assert.ok(readFileSync(copy).equals(edited));

  // the recovery key, without the passphrase
  const rk = path.join(dir, 'recovery.txt');
  writeFileSync(rk, recoveryKey + '\n');
  assert.equal((await ok(['ls', id, '--recovery-key-file', rk], { DSYNC_VAULT_PASSPHRASE: '' })).length, 1);

  // the store's operator puts back an older head: this user's devices refuse it
  writeFileSync(path.join(headDir(id), String(generations(id)[0] + 1)), oldHead);
  const back = await dsync(['vault', 'pull', id, 'private/notes.bin', copy], { env: env(), cwd: dir });
  assert.equal(back.code, 1, back.stdout);
  assert.match(back.stderr, /a rollback/);
  assert.ok(readFileSync(copy).equals(edited));
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('dsync-')), [], 'no temporary file left');
});

test('dsync vault: versions pulled by number, log, rm and ls --deleted, restore, mv with its history, keep', async () => {
  const [{ id }] = await ok(['create']);
  const versions = [randomBytes(70, 400_000), randomBytes(71, 300_000), randomBytes(72, 500_000)];
  const file = path.join(dir, 'report.bin');
  for (let i = 0; i < versions.length; i++) {
    writeFileSync(file, versions[i]);
    utimesSync(file, new Date(), new Date(1764400000000 + i * 1000));
    const [r] = await ok(['push', id, file, 'r/report.bin', ...(i === 2 ? ['--device', 'phone'] : [])]);
    assert.equal(r.version, i + 1);
  }
  const log = await ok(['log', id, 'r/report.bin']);
  assert.deepEqual(log.map((v) => [v.n, v.size, v.mtime]), [[3, 500_000, 1764400002000], [2, 300_000, 1764400001000], [1, 400_000, 1764400000000]], 'newest first');
  assert.equal(log[0].device, 'phone');
  assert.equal(log[1].device, (await import('node:os')).hostname());
  const out = path.join(dir, 'v.bin');
  for (const n of [2, 1, 3]) {
    const [r] = await ok(['pull', id, 'r/report.bin', out, '--version', String(n)]);
    assert.equal(r.version, n);
    assert.ok(readFileSync(out).equals(versions[n - 1]), `version ${n}`);
    assert.equal(statSync(out).mtimeMs, 1764400000000 + (n - 1) * 1000);
  }
  const none = await dsync(['vault', 'pull', id, 'r/report.bin', out, '--version', '7'], { env: env(), cwd: dir });
  assert.equal(none.code, 1);
  assert.match(none.stderr, /has no version 7 \(kept: 1, 2, 3\)/);
  assert.ok(readFileSync(out).equals(versions[2]), 'untouched');

  // rm: gone from ls, listed by ls --deleted, its versions kept
  await ok(['rm', id, 'r/report.bin']);
  assert.deepEqual(await ok(['ls', id]), []);
  assert.deepEqual((await ok(['ls', id, '--deleted'])).map((f) => [f.name, f.size]), [['r/report.bin', 500_000]]);
  const deleted = await dsync(['vault', 'pull', id, 'r/report.bin', out], { env: env(), cwd: dir });
  assert.equal(deleted.code, 1);
  assert.match(deleted.stderr, /it was deleted/);
  assert.equal((await ok(['log', id, 'r/report.bin'])).length, 3);

  // restore version 1: live again, as version 4
  const [restored] = await ok(['restore', id, 'r/report.bin', '1']);
  assert.equal(restored.version, 4);
  await ok(['pull', id, 'r/report.bin', out]);
  assert.ok(readFileSync(out).equals(versions[0]));
  assert.deepEqual(await ok(['ls', id, '--deleted']), []);

  // mv: the history travels
  await ok(['mv', id, 'r/report.bin', 'final.bin']);
  assert.deepEqual((await ok(['ls', id])).map((f) => f.name), ['final.bin']);
  assert.deepEqual((await ok(['log', id, 'final.bin'])).map((v) => v.n), [4, 3, 2, 1]);
  await ok(['pull', id, 'final.bin', out, '--version', '2']);
  assert.ok(readFileSync(out).equals(versions[1]));

  // keep 2: the oldest versions forgotten
  await ok(['keep', id, '2']);
  assert.deepEqual((await ok(['log', id, 'final.bin'])).map((v) => v.n), [4, 3]);
  const bad = await dsync(['vault', 'restore', id, 'final.bin', 'x'], { env: env(), cwd: dir });
  assert.equal(bad.code, 2, bad.stderr);
  const misplaced = await dsync(['vault', 'ls', id, '--version', '1'], { env: env(), cwd: dir });
  assert.equal(misplaced.code, 2, misplaced.stderr);
  assert.match(misplaced.stderr, /--version goes with pull/);
  assert.deepEqual(readdirSync(dir).filter((n) => n.includes('dsync-')), [], 'no temporary file left');
});
