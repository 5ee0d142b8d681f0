// `dsync sync DIR --vault ID` with many small files (shared/src/sync/vault-folder.ts
// `pushMany`/`pullMany` over `Vault.pushMany`/`pullMany`), against a real server on a loopback
// port: a first sync of a few hundred small files writes a handful of heads (counted by a proxy
// that passes every request on) into packs each shared by many files (the tree, opened with the
// key, names the packs of every file); a second device gets every file byte-exact with few pack
// reads; a batch with one file another device made first lands the others and refuses that one
// (on the first head read, and on a head read again after a lost compare-and-swap), and a
// batch whose upload fails leaves the vault as it was; a batch pulled replaces no file changed
// since the plan read it; `--watch` takes another device's change
// woken by the vault's head event.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { until } from '../../harness/wait.ts';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { VaultFolder } from '../../shared/src/sync/vault-folder.ts';
import { type VaultRemote, httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { LocalChanged } from '../../shared/src/sync/engine.ts';
import { NodeFiles, vaultTree } from '../node-tree.ts';
import { DSYNC, dsync, filesOf, jsonLines } from './run.ts';

/** How long a --watch test waits for each step: generous, for a loaded machine. */
const WATCH_WAIT_MS = 180_000;

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-batch-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const PASSPHRASE = 'a passphrase for the vault batch test';
/** Argon2id as light as a keyfile allows, where the passphrase is not what a test is about. */
const LIGHT = { m: 64, t: 1, p: 1 };

/** A proxy in front of the server that passes every request on and counts a vault's head
 *  writes, pack uploads and pack reads. */
async function countingProxy(s: TestServer) {
  const up = new URL(s.url);
  const seen = { headWrites: 0, packWrites: 0, packReads: 0 };
  const proxy = createServer((req, res) => {
    const p = new URL(req.url!, 'http://x').pathname;
    if (req.method === 'PUT' && /^\/api\/vaults\/[0-9a-f]{32}\/head$/.test(p)) seen.headWrites++;
    if (/^\/api\/vaults\/[0-9a-f]{32}\/packs\/[0-9a-f]{64}$/.test(p)) {
      if (req.method === 'PUT') seen.packWrites++;
      if (req.method === 'GET') seen.packReads++;
    }
    const fwd = request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: { ...req.headers, host: up.host } }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, seen, close: () => new Promise<void>((r) => (proxy.closeAllConnections(), proxy.close(() => r()))) };
}

function cliDevice(name: string, url: string) {
  const home = path.join(root, name);
  const dir = path.join(home, 'folder');
  mkdirSync(dir, { recursive: true });
  const env = { DSYNC_SERVER: url, DSYNC_CACHE_DIR: path.join(home, 'cache'), XDG_CONFIG_HOME: path.join(home, 'config'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE };
  return {
    dir,
    env,
    sync: (id: string) => dsync(['sync', dir, '--vault', id, '--device', name, '--json'], { env }),
    write(p: string, body: string | Uint8Array) {
      mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
      writeFileSync(path.join(dir, p), body);
    },
  };
}

async function synced(d: ReturnType<typeof cliDevice>, id: string): Promise<any[]> {
  const r = await d.sync(id);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  const lines = jsonLines(r.stdout);
  assert.equal(lines.at(-1).pass.agreed, true, r.stdout);
  return lines.filter((x) => x.op);
}

test('dsync sync --vault: a first sync of 300 small files writes a handful of heads into shared packs; another device gets them byte-exact with few pack reads', { timeout: 600_000 }, async (t) => {
  const proxy = await countingProxy(server);
  try {
    const a = cliDevice('batch-a', proxy.url);
    const b = cliDevice('batch-b', proxy.url);
    const created = await dsync(['vault', 'create', '--json'], { env: a.env });
    assert.equal(created.code, 0, created.stderr);
    const [{ id }] = jsonLines(created.stdout);
    const N = 300;
    for (let i = 0; i < N; i++) {
      const size = 1000 + ((i * 7919) % 19_000); // 1 to 20 KB
      a.write(`${['docs', 'photos/small', 'notes'][i % 3]}/file ${String(i).padStart(3, '0')}.bin`, randomBytes(1000 + i, size));
    }
    const before = { ...proxy.seen };
    const up = await synced(a, id);
    assert.equal(up.filter((d) => d.op === 'upload' && !d.error && !d.retry).length, N, JSON.stringify(up.filter((d) => d.error || d.retry)));
    const heads = proxy.seen.headWrites - before.headWrites;
    const packs = proxy.seen.packWrites - before.packWrites;
    t.diagnostic(`a first sync of ${N} small files: ${heads} head writes, ${packs} packs written`);
    assert.ok(heads <= 5, `${heads} head writes for ${N} small files`);
    const res = await fetch(`${server.url}/api/vaults/${id}/head`);
    await res.arrayBuffer();
    assert.equal(Number(res.headers.get('dsync-head-counter')), heads, 'the vault counted the heads the proxy saw');

    // the tree, opened with the key: no pack holds the contents of one file alone
    const vault = await openVault(httpVaultRemote(server.url), id, { passphrase: PASSPHRASE }, memoryHeads());
    const tree = await vault.tree();
    assert.equal(tree.files.length, N);
    const filesIn = new Map<string, number>();
    for (const f of tree.files) for (const p of f.versions[0].packs) filesIn.set(p, (filesIn.get(p) ?? 0) + 1);
    const alone = [...filesIn.values()].filter((n) => n === 1).length;
    t.diagnostic(`${filesIn.size} packs hold the files' contents; ${alone} hold one file's alone`);
    assert.equal(alone, 0, 'a pack holding one small file alone shows its size');

    // the second device: every file byte-exact, the batch's chunks read together
    const reads = proxy.seen.packReads;
    const down = await synced(b, id);
    assert.equal(down.filter((d) => d.op === 'download' && !d.error && !d.retry).length, N);
    const got = proxy.seen.packReads - reads;
    t.diagnostic(`the second device's first sync: ${got} pack reads for ${N} files`);
    assert.deepEqual(filesOf(b.dir), filesOf(a.dir));
    assert.ok(got < N / 4, `${got} pack reads for ${N} small files`);
    assert.deepEqual(await synced(a, id), [], 'nothing more to do');
    assert.deepEqual(await synced(b, id), [], 'nothing more to do');
  } finally {
    await proxy.close();
  }
});

function folderOf(name: string, vault: Vault) {
  const dir = path.join(root, name);
  mkdirSync(dir, { recursive: true });
  const tree = vaultTree(dir, vault);
  return {
    dir,
    tree,
    folder: new VaultFolder(vault, new NodeFiles(tree)),
    write: (p: string, body: string) => writeFileSync(path.join(dir, p), body),
  };
}

/** `remote` with `putHead` running `first` before its first call, and `putPack` failing from
 *  its `failPack`th call on. */
function interposed(remote: VaultRemote, o: { first?: () => Promise<void>; failPack?: number }): VaultRemote {
  let heads = 0;
  let packs = 0;
  const r: VaultRemote = Object.create(remote);
  r.putHead = async (...args) => {
    if (heads++ === 0 && o.first) await o.first();
    return remote.putHead(...args);
  };
  r.putPack = async (...args) => {
    if (o.failPack !== undefined && ++packs >= o.failPack) throw new Error('the link went down during a pack upload');
    return remote.putPack(...args);
  };
  return r;
}

test('VaultFolder.pushMany: one head for the batch; a file another device made first is refused, the others land; pullMany replaces no file changed here; a failed upload leaves the vault as it was', { timeout: 600_000 }, async () => {
  const remote = httpVaultRemote(server.url);
  const { vault: va } = await createVault(remote, 'pass', memoryHeads(), LIGHT, { device: 'a' });
  const id = va.id;
  const vb = await openVault(remote, id, { passphrase: 'pass' }, memoryHeads(), { device: 'b' });
  const b = folderOf(`b-${id}`, vb);
  const names = Array.from({ length: 20 }, (_, i) => `f${String(i).padStart(2, '0')}.txt`);
  const body = (who: string, n: string) => `${n} as ${who} wrote it, with some words to chunk\n`.repeat(40);
  const counter = async () => Number((await fetch(`${server.url}/api/vaults/${id}/head`)).headers.get('dsync-head-counter') ?? 0);

  // refused at the first head read: B made f07 before A's batch read the head
  const a = folderOf(`a-${id}`, va);
  for (const n of names) a.write(n, body('a', n));
  b.write('f07.txt', body('b', 'f07.txt'));
  await b.folder.push('f07.txt', 'absent');
  const at = await counter();
  const got = await a.folder.pushMany(names.map((path) => ({ path, expect: 'absent' as const })));
  assert.equal(await counter(), at + 1, 'one head for the batch');
  for (const [k, n] of names.entries()) {
    const g = got[k];
    if (n === 'f07.txt') {
      assert.ok('error' in g && g.error instanceof RemoteError && g.error.code === ErrorCode.StaleBasis, `f07 refused: ${JSON.stringify(g)}`);
    } else assert.ok('ok' in g && g.ok.version === 1, `${n}: ${JSON.stringify(g)}`);
  }
  const tree = await vb.tree();
  assert.deepEqual(tree.files.map((f) => f.name).sort(), names);
  assert.deepEqual(tree.files.find((f) => f.name === 'f07.txt')!.versions.map((v) => v.device), ['b'], "B's f07 kept, A's not written");
  for (const n of names.filter((x) => x !== 'f07.txt')) {
    const parts: Uint8Array[] = [];
    await vb.pull(n, async (x) => void parts.push(x));
    assert.equal(Buffer.concat(parts).toString(), body('a', n));
  }

  // B takes three of them down in one batch: a file B changed since its plan read it is not
  // replaced (LocalChanged), the others are written byte-exact
  b.write('f01.txt', 'B had its own f01 here\n');
  const read = await b.tree.hash('f01.txt');
  b.write('f01.txt', 'and changed it after the plan read it\n');
  const down = await b.folder.pullMany(['f01.txt', 'f02.txt', 'f03.txt'].map((p, i) => ({ path: p, version: 1, expect: i === 0 ? read : null })));
  assert.ok('error' in down[0] && down[0].error instanceof LocalChanged, JSON.stringify(down[0]));
  assert.equal(readFileSync(path.join(b.dir, 'f01.txt'), 'utf8'), 'and changed it after the plan read it\n');
  for (const [i, n] of ['f02.txt', 'f03.txt'].entries()) {
    const g = down[i + 1];
    assert.ok('ok' in g && g.ok.version === 1 && g.ok.root === (await b.tree.hash(n)).hash, JSON.stringify(g));
    assert.equal(readFileSync(path.join(b.dir, n), 'utf8'), body('a', n));
  }

  // refused at the head read again after a lost compare-and-swap: B makes g11 between A's
  // upload of the batch's packs and its head write
  const more = Array.from({ length: 15 }, (_, i) => `g${String(i).padStart(2, '0')}.txt`);
  const va2 = await openVault(interposed(remote, { first: async () => (b.write('g11.txt', body('b', 'g11.txt')), void (await b.folder.push('g11.txt', 'absent'))) }), id, { passphrase: 'pass' }, memoryHeads(), { device: 'a' });
  const a2 = folderOf(`a2-${id}`, va2);
  for (const n of more) a2.write(n, body('a', n));
  const at2 = await counter();
  const got2 = await a2.folder.pushMany(more.map((path) => ({ path, expect: 'absent' as const })));
  assert.equal(await counter(), at2 + 2, "B's head, then A's batch in one head");
  for (const [k, n] of more.entries()) {
    const g = got2[k];
    if (n === 'g11.txt') assert.ok('error' in g && g.error instanceof RemoteError && g.error.code === ErrorCode.StaleBasis, `g11 refused: ${JSON.stringify(g)}`);
    else assert.ok('ok' in g && g.ok.version === 1, `${n}: ${JSON.stringify(g)}`);
  }
  const tree2 = await vb.tree();
  assert.deepEqual(tree2.files.find((f) => f.name === 'g11.txt')!.versions.map((v) => v.device), ['b']);
  assert.equal(tree2.files.filter((f) => f.name.startsWith('g') && f.versions.at(-1)!.device === 'a').length, more.length - 1);

  // an upload that fails: every file of the batch fails, no head is written
  const va3 = await openVault(interposed(remote, { failPack: 2 }), id, { passphrase: 'pass' }, memoryHeads(), { device: 'a' });
  const a3 = folderOf(`a3-${id}`, va3);
  const failing = Array.from({ length: 30 }, (_, i) => `h${String(i).padStart(2, '0')}.txt`);
  for (const n of failing) a3.write(n, body('a', n) + Buffer.from(randomBytes(3000 + failing.indexOf(n), 30_000)).toString('base64'));
  const at3 = await counter();
  const before3 = (await vb.tree()).files.length;
  const got3 = await a3.folder.pushMany(failing.map((path) => ({ path, expect: 'absent' as const })));
  assert.ok(got3.every((g) => 'error' in g && /the link went down/.test(String((g.error as Error).message))), JSON.stringify(got3.map((g) => ('error' in g ? String(g.error) : 'ok'))));
  assert.equal(await counter(), at3, 'no head written');
  assert.equal((await vb.tree()).files.length, before3, 'the vault as it was');
});

/** Waits for `cond`, checking every 100 ms, for at most `ms`. */
test("dsync sync --vault --watch: another device's change is taken in a pass the vault's head event woke", { timeout: 600_000 }, async () => {
  const a = cliDevice('watch-a', server.url);
  const b = cliDevice('watch-b', server.url);
  const created = await dsync(['vault', 'create', '--json'], { env: a.env });
  assert.equal(created.code, 0, created.stderr);
  const [{ id }] = jsonLines(created.stdout);
  a.write('from a.txt', 'made here before the watcher starts\n');
  const child = spawn(process.execPath, [DSYNC, 'sync', a.dir, '--vault', id, '--device', 'watch-a', '--watch', '--json'], { env: { ...process.env, ...a.env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
    // the watcher's first pass (woken by its start) done before B changes anything
    await until('the first pass', () => lines.some((l) => l.op === 'upload' && l.path === 'from a.txt' && !l.error) && lines.some((l) => l.pass), WATCH_WAIT_MS);
    b.write('from b.txt', 'made on the other device while A watches\n');
    assert.deepEqual((await synced(b, id)).map((d) => [d.op, d.path]).sort(), [['download', 'from a.txt'], ['upload', 'from b.txt']]);
    await until("B's file here", () => existsSync(path.join(a.dir, 'from b.txt')) && readFileSync(path.join(a.dir, 'from b.txt'), 'utf8') === 'made on the other device while A watches\n', WATCH_WAIT_MS);
    const at = () => lines.findIndex((l) => l.op === 'download' && l.path === 'from b.txt');
    await until('the pass line', () => lines.slice(at()).some((l) => l.pass), WATCH_WAIT_MS);
    const pass = lines.slice(at()).find((l) => l.pass).pass;
    assert.ok(pass.woken?.includes('server'), `the pass that took B's file was woken by ${JSON.stringify(pass.woken)}, not the vault's head event`);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGINT');
    assert.equal(await exited, 0, err);
  } finally {
    child.kill('SIGKILL');
  }
});
