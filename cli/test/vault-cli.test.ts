// The plain commands on a vault, `dsync push/ls/log/pull/mv/rm/restore --vault ID`, as a user
// runs them: the real CLI against a real server on a loopback port. A folder and a file pushed
// (the file twice), listed a folder at a time and whole, its log, an old version pulled (to a
// file and to stdout), a folder pulled, a file and a folder renamed, a file deleted with its
// versions kept and restored, a folder deleted; the flags that mean nothing on a vault refused;
// then the server's store read byte by byte: no file name and no 16-byte run of any file. A
// file of several spans goes through the chunk worker threads both ways; its pull through a
// proxy that changes a byte of every large pack range fails in the workers and leaves the file
// it was to replace as it was. A wrong passphrase fails every command with nothing changed, here
// or in the vault.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { bufferSource } from '../../shared/src/chunking/chunk-index.ts';
import { hex } from '../../shared/src/vault/format.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { SPAN_BYTES } from '../../shared/src/vault/spans.ts';
import { memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { dsync, expectNoPlaintext, filesOf, jsonLines } from './run.ts';

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-cli-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const PASSPHRASE = 'a passphrase for the plain commands on a vault';
const env = (): NodeJS.ProcessEnv => ({ DSYNC_SERVER: server.url, XDG_CONFIG_HOME: path.join(root, 'config'), DSYNC_CACHE_DIR: path.join(root, 'cache'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE });
const run = (args: string[], extra: NodeJS.ProcessEnv = {}) => dsync(args, { env: { ...env(), ...extra }, cwd: root });

/** `dsync ARGS… --json` that must succeed: its JSON lines. */
async function ok(args: string[]): Promise<any[]> {
  const r = await run([...args, '--json']);
  assert.equal(r.code, 0, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  return jsonLines(r.stdout);
}

async function newVault(): Promise<string> {
  const [{ id }] = await ok(['vault', 'create']);
  assert.match(id, /^[0-9a-f]{32}$/);
  return id;
}

function write(p: string, body: string | Uint8Array, mtime?: number): Buffer {
  const full = path.join(root, p);
  mkdirSync(path.dirname(full), { recursive: true });
  writeFileSync(full, body);
  if (mtime !== undefined) utimesSync(full, new Date(), new Date(mtime));
  return Buffer.from(body);
}

const listed = (lines: any[]) => lines.map((l) => l.folder ?? `${l.name} v${l.latest}/${l.versions}`);

test('dsync push/ls/log/pull/mv/rm/restore --vault: the plain commands on a vault; the store holds no name and no plaintext', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const plaintexts: Buffer[] = [];
  const notes = write('project-alpha/meeting-notes.txt', 'the meeting notes: nothing of this may reach the server\n', 1764400000000);
  const measured = write('project-alpha/nested-folder/measurements.bin', randomBytes(81, 300_000), 1764400001000);
  const v1 = write('quarterly-report.bin', randomBytes(82, 400_000), 1764400002000);
  plaintexts.push(notes, measured, v1);

  // a folder goes up by its path as typed, a file under --name; a second push is version 2
  assert.deepEqual((await ok(['push', 'project-alpha', ...V])).map((r) => [r.name, r.version, r.size]), [
    ['project-alpha/meeting-notes.txt', 1, notes.length],
    ['project-alpha/nested-folder/measurements.bin', 1, measured.length],
  ]);
  assert.equal((await ok(['push', 'quarterly-report.bin', '--name', 'documents/quarterly-report.bin', ...V]))[0].version, 1);
  const v2 = Buffer.from(v1);
  v2.set(Buffer.from('an edit of the second version'), 200_000);
  plaintexts.push(write('quarterly-report.bin', v2, 1764400003000));
  const [second] = await ok(['push', 'quarterly-report.bin', '--name', 'documents/quarterly-report.bin', '--device', 'laptop', ...V]);
  assert.equal(second.version, 2);
  // the edit's chunk (the vault's random key may cut a few more around it before its cuts
  // meet the old ones again); the pull below fetches only those
  const made = second.chunks - second.reused;
  assert.ok(made >= 1 && made <= 8, JSON.stringify(second));

  // ls: a folder at a time, or all below one (-R), as for a plain folder
  assert.deepEqual(listed(await ok(['ls', ...V])), ['documents/', 'project-alpha/']);
  assert.deepEqual(listed(await ok(['ls', 'documents', ...V])), ['documents/quarterly-report.bin v2/2']);
  const all = await ok(['ls', '-R', 'project-alpha', ...V]);
  assert.deepEqual(listed(all), ['project-alpha/nested-folder/', 'project-alpha/meeting-notes.txt v1/1', 'project-alpha/nested-folder/measurements.bin v1/1']);
  assert.equal(all[1].size, notes.length);
  assert.equal(all[1].modified, 1764400000000);

  // log, newest first; an old version pulled to a file (its mtime kept) and to stdout
  const log = await ok(['log', 'documents/quarterly-report.bin', ...V]);
  assert.deepEqual(log.map((v) => [v.version, v.size, v.modified, v.client]), [
    [2, v2.length, 1764400003000, 'laptop'],
    [1, v1.length, 1764400002000, (await import('node:os')).hostname()],
  ]);
  mkdirSync(path.join(root, 'out'));
  const old = path.join(root, 'out', 'v1.bin');
  const [pulled] = await ok(['pull', 'documents/quarterly-report.bin', '--out', old, '--version', '1', ...V]);
  assert.equal(pulled.version, 1);
  assert.ok(readFileSync(old).equals(v1));
  assert.equal(statSync(old).mtimeMs, 1764400002000);
  const exists = await run(['pull', 'documents/quarterly-report.bin', '--out', old, ...V]);
  assert.equal(exists.code, 1, 'an existing file is replaced only with --force');
  assert.ok(readFileSync(old).equals(v1));
  // the newest over the old copy, with it as the basis: only the changed chunks fetched
  const [newest] = await ok(['pull', 'documents/quarterly-report.bin', '--out', old, '--basis', old, '--force', ...V]);
  assert.ok(readFileSync(old).equals(v2));
  assert.equal(newest.local, newest.chunks - made, JSON.stringify(newest));
  const toStdout = await run(['pull', 'project-alpha/meeting-notes.txt', '--out', '-', ...V]);
  assert.equal(toStdout.code, 0, toStdout.stderr);
  assert.equal(toStdout.stdout, notes.toString());
  assert.equal(JSON.parse(toStdout.stderr).version, 1, 'the report on stderr');

  // a folder, whole
  const copy = path.join(root, 'copy');
  assert.equal((await ok(['pull', 'project-alpha/', '--out', copy, ...V])).length, 2);
  assert.deepEqual(filesOf(copy), new Map([['meeting-notes.txt', notes], ['nested-folder/measurements.bin', measured]]));
  const folderName = await run(['pull', 'project-alpha', '--out', path.join(root, 'out', 'x'), ...V]);
  assert.equal(folderName.code, 2);
  assert.match(folderName.stderr, /project-alpha is a folder: pull project-alpha\/ --out DIR/);

  // mv: a file with its history, then a folder
  await ok(['mv', 'project-alpha/meeting-notes.txt', 'project-alpha/renamed-notes.txt', ...V]);
  await ok(['mv', 'project-alpha', 'project-moved', ...V]);
  assert.deepEqual(listed(await ok(['ls', '-R', ...V])), ['documents/', 'project-moved/', 'project-moved/nested-folder/', 'documents/quarterly-report.bin v2/2', 'project-moved/nested-folder/measurements.bin v1/1', 'project-moved/renamed-notes.txt v1/1']);
  assert.equal((await ok(['log', 'project-moved/renamed-notes.txt', ...V]))[0].modified, 1764400000000);

  // rm keeps the versions; restore brings one back as the newest
  await ok(['rm', 'documents/quarterly-report.bin', ...V]);
  assert.deepEqual(listed(await ok(['ls', ...V])), ['project-moved/']);
  assert.equal((await ok(['log', 'documents/quarterly-report.bin', ...V])).length, 2);
  assert.deepEqual((await ok(['vault', 'ls', id, '--deleted'])).map((f) => f.name), ['documents/quarterly-report.bin']);
  assert.deepEqual(await ok(['restore', 'documents/quarterly-report.bin', '--version', '1', ...V]), [{ name: 'documents/quarterly-report.bin', restored: 1, version: 3 }]);
  const restored = path.join(root, 'out', 'restored.bin');
  await ok(['pull', 'documents/quarterly-report.bin', '--out', restored, ...V]);
  assert.ok(readFileSync(restored).equals(v1));

  // rm -r: every file under the folder, its versions kept
  const [gone] = await ok(['rm', '-r', 'project-moved', ...V]);
  assert.deepEqual(gone.removed.sort(), ['project-moved/nested-folder/measurements.bin', 'project-moved/renamed-notes.txt']);
  assert.deepEqual(listed(await ok(['ls', '-R', ...V])), ['documents/', 'documents/quarterly-report.bin v3/3']);
  assert.equal((await ok(['log', 'project-moved/renamed-notes.txt', ...V])).length, 1);

  // the flags that mean nothing on a vault are refused, and a vault's flags need --vault
  for (const [args, why] of [
    [['push', 'quarterly-report.bin', '--force', ...V], /--force does not go with --vault/],
    [['push', 'quarterly-report.bin', '--basis-version', '2', ...V], /--basis-version does not go with --vault/],
    [['pull', 'documents/quarterly-report.bin', '--out', restored, '--avg', '4096', ...V], /--avg does not go with --vault: a vault chunks with its own keys/],
    [['rm', 'documents/quarterly-report.bin', '--version', '1', ...V], /--version does not go with --vault/],
    [['ls', '--passphrase-file', restored], /--passphrase-file goes with --vault/],
    [['push', 'quarterly-report.bin', '--device', 'x'], /--device goes with --vault/],
    [['ls', '--vault', 'not-an-id'], /bad vault id/],
  ] as [string[], RegExp][]) {
    const r = await run(args);
    assert.equal(r.code, 2, `dsync ${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, why);
  }
  assert.equal((await ok(['log', 'documents/quarterly-report.bin', ...V])).length, 3, 'nothing pushed');

  // the store, byte by byte: no name (whole or its parts) and no 16-byte run of any file
  const names = ['project-alpha', 'meeting-notes.txt', 'nested-folder', 'measurements.bin', 'quarterly-report.bin', 'documents/', 'renamed-notes.txt', 'project-moved', 'laptop'];
  const store = filesOf(server.data);
  assert.ok([...store.values()].reduce((n, x) => n + x.length, 0) > 700_000, 'the store holds the vault');
  expectNoPlaintext(store, names, plaintexts);
});

test('dsync push DIR --vault sends its small files together: one head for the batch, every file back byte-exact', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const counter = async () => Number((await fetch(`${server.url}/api/vaults/${id}/head`)).headers.get('dsync-head-counter') ?? 0);
  const files = Array.from({ length: 30 }, (_, i) => write(`many/f${String(i).padStart(2, '0')}.txt`, randomBytes(200 + i, 1000 + 97 * i)));
  const at = await counter();
  const pushed = await ok(['push', 'many', ...V]);
  assert.equal(pushed.length, 30);
  assert.equal(await counter(), at + 1, 'one head for the 30 files');
  await ok(['pull', 'many/', '--out', path.join(root, 'many-back'), ...V]);
  const back = filesOf(path.join(root, 'many-back'));
  assert.equal(back.size, 30);
  files.forEach((b, i) => assert.ok(back.get(`f${String(i).padStart(2, '0')}.txt`)?.equals(b), `file ${i}`));
});

test("a file of several spans goes through the chunk worker threads: the serial cut's chunks and root, pulled back byte-exact", async () => {
  const [{ id, recoveryKey }] = await ok(['vault', 'create']);
  const V = ['--vault', id];
  // 40 MiB (three spans): random bytes, with 2 MiB of zeros across the second span's start
  const bytes = randomBytes(83, 40 << 20);
  bytes.fill(0, SPAN_BYTES - (1 << 20), SPAN_BYTES + (1 << 20));
  write('spans.bin', bytes);
  const [pushed] = await ok(['push', 'spans.bin', ...V]);
  // the root over the ids of the serial cut (keyedChunks, one thread)
  const vault = await openVault(httpVaultRemote(server.url), id, { recoveryKey }, memoryHeads());
  const want = hex(await vault.rootOf(bufferSource(bytes)));
  assert.equal(pushed.root, want);
  // the same bytes cut on one thread (serialChunks) name the very chunks: every one held already
  const again = await vault.push('spans.bin', bufferSource(bytes), Date.now());
  assert.deepEqual([again.chunks, again.reused, again.root], [pushed.chunks, pushed.chunks, want]);
  // pulled by a device with no copy, its ranges opened by the workers
  const [pulled] = await ok(['pull', 'spans.bin', '--out', path.join(root, 'spans-back.bin'), ...V]);
  assert.equal(pulled.local, 0);
  assert.ok(readFileSync(path.join(root, 'spans-back.bin')).equals(bytes), 'pulled byte-exact');
});

/** A proxy in front of `target` that flips one byte in the middle of every range of a pack of
 *  1 MiB or more that it passes (content chunks: a manifest's ranges are smaller), as a hostile
 *  server or a man in the middle on plain http could; everything else passed as it is. */
async function flippingProxy(target: string): Promise<{ url: string; flipped: () => number; close: () => Promise<void> }> {
  const up = new URL(target);
  let flipped = 0;
  const proxy = createServer((req, res) => {
    // asked for plain, so that the bytes flipped are the pack's
    const headers = { ...req.headers, host: up.host };
    delete headers['accept-encoding'];
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers }, (r) => {
      if (r.statusCode !== 206) {
        res.writeHead(r.statusCode!, r.headers);
        return void r.pipe(res);
      }
      const parts: Buffer[] = [];
      r.on('data', (c: Buffer) => parts.push(c));
      r.on('end', () => {
        const body = Buffer.concat(parts);
        if (body.length >= 1 << 20) {
          body[body.length >> 1] ^= 0x10;
          flipped++;
        }
        res.writeHead(206, r.headers);
        res.end(body);
      });
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    flipped: () => flipped,
    close: () => new Promise<void>((resolve) => (proxy.closeAllConnections(), proxy.close(() => resolve()))),
  };
}

test('a pull of several spans whose pack bytes were changed on the way fails in the chunk worker threads, and the file it was to replace stays as it was', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const bytes = randomBytes(84, 40 << 20);
  write('damaged.bin', bytes);
  await ok(['push', 'damaged.bin', ...V]);
  const dir = path.join(root, 'damaged-out');
  mkdirSync(dir);
  const mine = write('damaged-out/mine.bin', 'the file the pull was to replace');
  const proxy = await flippingProxy(server.url);
  try {
    const r = await run(['pull', 'damaged.bin', '--out', path.join(dir, 'mine.bin'), '--force', ...V, '--json'], { DSYNC_SERVER: proxy.url });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.ok(proxy.flipped() > 0, 'the proxy changed a range');
    assert.match(r.stderr, /a chunk of vault [0-9a-f]{32} does not verify.* \(damaged, or moved from another place\)/);
    // into a new name: nothing made
    const fresh = await run(['pull', 'damaged.bin', '--out', path.join(dir, 'new.bin'), ...V, '--json'], { DSYNC_SERVER: proxy.url });
    assert.equal(fresh.code, 1, fresh.stdout + fresh.stderr);
    assert.match(fresh.stderr, /does not verify/);
  } finally {
    await proxy.close();
  }
  // nothing written: the file as it was, no other file (no temporary one left behind)
  assert.deepEqual(readdirSync(dir), ['mine.bin']);
  assert.ok(readFileSync(path.join(dir, 'mine.bin')).equals(mine));
  // the same pull straight from the server: byte-exact
  await ok(['pull', 'damaged.bin', '--out', path.join(dir, 'mine.bin'), '--force', ...V]);
  assert.ok(readFileSync(path.join(dir, 'mine.bin')).equals(bytes));
});

test('a wrong passphrase fails every plain command on a vault, with nothing changed here or in the vault', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const body = write('wrong/kept.txt', 'a file pushed with the right passphrase\n');
  await ok(['push', 'wrong/kept.txt', ...V]);
  const out = path.join(root, 'wrong', 'out.txt');
  write('wrong/out.txt', 'the copy here, before\n');
  const before = filesOf(path.join(root, 'wrong'));
  const listing = await ok(['ls', '-R', ...V]);
  const wrong = { DSYNC_VAULT_PASSPHRASE: 'not the passphrase' };
  for (const args of [
    ['push', 'wrong/kept.txt', '--name', 'other.txt'],
    ['pull', 'wrong/kept.txt', '--out', out, '--force'],
    ['pull', 'wrong/', '--out', path.join(root, 'wrong', 'dir')],
    ['ls'],
    ['log', 'wrong/kept.txt'],
    ['mv', 'wrong/kept.txt', 'moved.txt'],
    ['rm', 'wrong/kept.txt'],
    ['rm', '-r', 'wrong'],
    ['restore', 'wrong/kept.txt', '--version', '1'],
  ]) {
    const r = await run([...args, ...V], wrong);
    assert.equal(r.code, 1, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /the passphrase does not open vault/);
  }
  assert.deepEqual(filesOf(path.join(root, 'wrong')), before, 'nothing written here, no temporary file left');
  assert.equal(existsSync(path.join(root, 'wrong', 'dir')), false);
  assert.deepEqual(await ok(['ls', '-R', ...V]), listing, 'nothing changed in the vault');
  assert.equal((await ok(['log', 'wrong/kept.txt', ...V])).length, 1);
  assert.ok(readFileSync(path.join(root, 'wrong/kept.txt')).equals(body));
});
