// `dsync sync DIR --vault ID` as a user runs it: two devices (each a folder, a cache and a
// config directory of its own) and the real CLI against a real server on a loopback port. The
// first sync, an edit that moves only the changed chunks, a delete (the version stays in the
// vault's history), a rename, a conflict (both versions kept), then the server's store read
// byte by byte: no file name and no 16-byte run of any file's contents. A wrong passphrase
// fails and touches nothing. --watch sends a local save up and takes another device's change.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { until } from '../../harness/wait.ts';
import { DSYNC, dsync, expectNoPlaintext, filesOf, jsonLines } from './run.ts';

/** How long a --watch test waits for each step: generous, for a loaded machine. */
const WATCH_WAIT_MS = 180_000;

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-sync-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const PASSPHRASE = 'a passphrase for the vault sync test';

interface Dev {
  dir: string;
  env: NodeJS.ProcessEnv;
  sync(id: string, extra?: NodeJS.ProcessEnv): ReturnType<typeof dsync>;
  write(p: string, body: string | Uint8Array): void;
  read(p: string): Buffer;
}

function device(name: string): Dev {
  const home = path.join(root, name);
  const dir = path.join(home, 'folder');
  mkdirSync(dir, { recursive: true });
  const env = { DSYNC_SERVER: server.url, DSYNC_CACHE_DIR: path.join(home, 'cache'), XDG_CONFIG_HOME: path.join(home, 'config'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE };
  return {
    dir,
    env,
    sync: (id, extra = {}) => dsync(['sync', dir, '--vault', id, '--device', name, '--json'], { env: { ...env, ...extra } }),
    write(p, body) {
      mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
      writeFileSync(path.join(dir, p), body);
    },
    read: (p) => readFileSync(path.join(dir, p)),
  };
}

/** A sync that must end with both sides agreed: its actions. */
async function synced(d: Dev, id: string): Promise<any[]> {
  const r = await d.sync(id);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = jsonLines(r.stdout);
  assert.equal(lines.at(-1).pass.agreed, true, r.stdout);
  return lines.filter((x) => x.op);
}

const ops = (done: any[]) => done.map((d) => [d.op, d.path ?? `${d.from} → ${d.to}`]).sort();

/** The folder as the user sees it: each file's path, bytes and mtime. */
const snapshot = (dir: string) => [...filesOf(dir)].map(([p, b]) => [p, b.toString('base64'), statSync(path.join(dir, p)).mtimeMs]).sort();

/** The files of the store: path → size. */
const storeSizes = () => new Map([...filesOf(server.data)].map(([p, b]) => [p, b.length]));

test('dsync sync --vault: first sync, an edit moving only its chunks, a delete kept in the history, a rename, a conflict; the store holds no name and no plaintext', async (t) => {
  const a = device('laptop');
  const b = device('desktop');
  const created = await dsync(['vault', 'create', '--json'], { env: a.env });
  assert.equal(created.code, 0, created.stderr);
  const [{ id }] = jsonLines(created.stdout);
  const plaintexts: Buffer[] = [];
  const keep = (x: string | Uint8Array) => (plaintexts.push(Buffer.from(x)), x);

  // the first sync: A's files go up, B gets them
  const big = randomBytes(461, 1 << 20);
  a.write('big.bin', keep(big));
  a.write('notes/alpha.txt', keep('alpha: the first notes of the vault sync test\n'));
  a.write('bravo.txt', keep('bravo: a file that will be deleted on one device\n'));
  assert.deepEqual(ops(await synced(a, id)), [['upload', 'big.bin'], ['upload', 'bravo.txt'], ['upload', 'notes/alpha.txt']]);
  assert.deepEqual(ops(await synced(b, id)), [['download', 'big.bin'], ['download', 'bravo.txt'], ['download', 'notes/alpha.txt']]);
  assert.deepEqual(filesOf(b.dir), filesOf(a.dir));
  assert.deepEqual(await synced(a, id), [], 'nothing more to do');

  // an edit of 100 bytes in the middle of 1 MiB: only the chunks it touched go up
  const edited = Buffer.from(big);
  edited.set(randomBytes(462, 100), 500_000);
  a.write('big.bin', keep(edited));
  const sizes = storeSizes();
  assert.deepEqual(ops(await synced(a, id)), [['upload', 'big.bin']]);
  const added = [...storeSizes()].reduce((n, [p, size]) => n + (sizes.has(p) ? Math.max(0, size - sizes.get(p)!) : size), 0);
  assert.ok(added < 200_000, `the store grew by ${added} bytes for an edit of 100 bytes of 1 MiB`);
  t.diagnostic(`an edit of 100 bytes of 1 MiB: the store grew by ${added} bytes`);
  assert.deepEqual(ops(await synced(b, id)), [['download', 'big.bin']]);
  assert.ok(b.read('big.bin').equals(edited));

  // a delete on A deletes on B; the versions stay in the vault's history
  rmSync(path.join(a.dir, 'bravo.txt'));
  assert.deepEqual(ops(await synced(a, id)), [['deleteRemote', 'bravo.txt']]);
  assert.deepEqual(ops(await synced(b, id)), [['deleteLocal', 'bravo.txt']]);
  assert.equal(existsSync(path.join(b.dir, 'bravo.txt')), false);
  const log = await dsync(['vault', 'log', id, 'bravo.txt', '--json'], { env: b.env });
  assert.equal(log.code, 0, log.stderr);
  assert.equal(jsonLines(log.stdout).length, 1, 'its version is kept');
  const deleted = await dsync(['vault', 'ls', id, '--deleted', '--json'], { env: b.env });
  assert.deepEqual(jsonLines(deleted.stdout).map((f) => f.name), ['bravo.txt']);

  // a rename on A is a rename on B
  renameSync(path.join(a.dir, 'notes/alpha.txt'), path.join(a.dir, 'notes/renamed alpha.txt'));
  assert.deepEqual(ops(await synced(a, id)), [['moveRemote', 'notes/alpha.txt → notes/renamed alpha.txt']]);
  assert.deepEqual(ops(await synced(b, id)), [['moveLocal', 'notes/alpha.txt → notes/renamed alpha.txt']]);
  assert.equal(b.read('notes/renamed alpha.txt').toString(), 'alpha: the first notes of the vault sync test\n');
  assert.equal(existsSync(path.join(b.dir, 'notes/alpha.txt')), false);

  // a rename onto the name of the deleted file: a new version of it, both histories kept
  renameSync(path.join(b.dir, 'big.bin'), path.join(b.dir, 'bravo.txt'));
  assert.deepEqual(ops(await synced(b, id)), [['moveRemote', 'big.bin → bravo.txt']]);
  assert.deepEqual(ops(await synced(a, id)), [['moveLocal', 'big.bin → bravo.txt']]);
  assert.ok(a.read('bravo.txt').equals(edited));
  const bravo = await dsync(['vault', 'log', id, 'bravo.txt', '--json'], { env: a.env });
  assert.deepEqual(jsonLines(bravo.stdout).map((v) => v.size), [edited.length, 49], 'its old version kept under it');
  const bigLog = await dsync(['vault', 'log', id, 'big.bin', '--json'], { env: a.env });
  assert.equal(jsonLines(bigLog.stdout).length, 2, 'the history of the old name kept');

  // both edit one file between syncs: A's lands first and keeps the name, B's is a conflict copy
  a.write('notes/renamed alpha.txt', keep('alpha: edited on the laptop, which syncs first\n'));
  b.write('notes/renamed alpha.txt', keep('alpha: edited on the desktop, which syncs second\n'));
  assert.deepEqual(ops(await synced(a, id)), [['upload', 'notes/renamed alpha.txt']]);
  const conflict = (await synced(b, id)).find((d) => d.op === 'conflict');
  assert.match(conflict?.conflictCopy ?? '', /^notes\/renamed alpha \(conflict from desktop \d{4}-\d\d-\d\d \d{4}\)\.txt$/);
  assert.deepEqual(ops(await synced(a, id)), [['download', conflict.conflictCopy]]);
  for (const d of [a, b]) {
    assert.equal(d.read('notes/renamed alpha.txt').toString(), 'alpha: edited on the laptop, which syncs first\n');
    assert.equal(d.read(conflict.conflictCopy).toString(), 'alpha: edited on the desktop, which syncs second\n');
  }
  assert.deepEqual(filesOf(b.dir), filesOf(a.dir));
  const ls = await dsync(['vault', 'ls', id, '--json'], { env: a.env });
  assert.deepEqual(jsonLines(ls.stdout).map((f) => f.name).sort(), ['bravo.txt', conflict.conflictCopy, 'notes/renamed alpha.txt'].sort());

  // the store, byte by byte: no name (whole or its last part) and no 16-byte run of any
  // version of any file
  const names = ['big.bin', 'bravo.txt', 'notes/alpha.txt', 'notes/renamed alpha.txt', 'renamed alpha.txt', 'alpha.txt', conflict.conflictCopy, path.basename(conflict.conflictCopy)];
  const store = filesOf(server.data);
  assert.ok([...store.values()].reduce((n, x) => n + x.length, 0) > 1 << 20, 'the store holds the vault');
  expectNoPlaintext(store, names, plaintexts);
});

test('dsync sync --vault with a wrong passphrase fails and touches nothing', async () => {
  const a = device('phone');
  const created = await dsync(['vault', 'create', '--json'], { env: a.env });
  assert.equal(created.code, 0, created.stderr);
  const [{ id }] = jsonLines(created.stdout);
  a.write('kept.txt', 'a file here before the sync\n');
  const before = snapshot(a.dir);
  const r = await a.sync(id, { DSYNC_VAULT_PASSPHRASE: 'not the passphrase' });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /the passphrase does not open vault/);
  assert.deepEqual(snapshot(a.dir), before);
  assert.equal(existsSync(path.join(a.env.DSYNC_CACHE_DIR!, 'sync')), false, 'no state and no lock written');
  const ls = await dsync(['vault', 'ls', id, '--json'], { env: a.env });
  assert.deepEqual(jsonLines(ls.stdout), [], 'nothing went up');
});

/** Waits for `cond`, checking every 100 ms, for at most `ms`. */
test('dsync sync --vault --watch: a local save goes up, another device\'s change comes down', { timeout: 600_000 }, async () => {
  const a = device('watcher');
  const b = device('other');
  const created = await dsync(['vault', 'create', '--json'], { env: a.env });
  assert.equal(created.code, 0, created.stderr);
  const [{ id }] = jsonLines(created.stdout);
  const child = spawn(process.execPath, [DSYNC, 'sync', a.dir, '--vault', id, '--device', 'watcher', '--watch', '--json'], { env: { ...process.env, ...a.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: any[] = [];
  let buf = '';
  let err = '';
  child.stdout.on('data', (x) => {
    buf += x;
    for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) lines.push(JSON.parse(buf.slice(0, i)));
  });
  child.stderr.on('data', (x) => (err += x));
  try {
    await until('watching', () => lines.some((l) => l.watching === a.dir && l.vault === id), WATCH_WAIT_MS);
    a.write('saved.txt', 'saved while the watcher runs\n');
    await until('the upload', () => lines.some((l) => l.op === 'upload' && l.path === 'saved.txt' && !l.error && !l.retry), WATCH_WAIT_MS);
    assert.deepEqual(ops(await synced(b, id)), [['download', 'saved.txt']]);
    b.write('from other.txt', 'made on the other device\n');
    assert.deepEqual(ops(await synced(b, id)), [['upload', 'from other.txt']]);
    // the vault's head event (or the rescan) brings it
    await until('the other device\'s file here', () => existsSync(path.join(a.dir, 'from other.txt')) && a.read('from other.txt').toString() === 'made on the other device\n', WATCH_WAIT_MS);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGINT');
    assert.equal(await exited, 0, err);
  } finally {
    child.kill('SIGKILL');
  }
});
