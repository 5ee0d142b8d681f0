// Forgetting a vault's deleted files (`dsync rm NAME --vault ID --purge`, `dsync vault purge ID
// [NAME]`) and `dsync mv --vault` onto a deleted file's name, as a user runs them: the real CLI
// against a real server on a loopback port over a local directory, and `dsync gc` on that
// store. A file with two versions (the first in packs it shares with another file) is deleted
// and purged: it leaves `ls --deleted` and `log`, and after gc with grace 0 the packs only it
// used are gone from the store, the shared ones stay, and every other file pulls byte-exact. A
// live file is refused with nothing changed. Two devices race (the second one's change landing
// between the first one's read of the head and its write, through a proxy that holds the
// head's PUT): a push built on the deleted file becomes a new file when the purge lands first,
// and refuses the purge when it lands first; a restore of a purged file is refused. mv onto a
// deleted name adds the moved file's newest version to that file's history and deletes the old
// name: every version of both pulls byte-exact.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { randomBytes } from '../../harness/testdata.ts';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import '../../shared/src/chunking/wasm.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { dsync, filesOf, jsonLines } from './run.ts';

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-purge-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

const PASSPHRASE = 'a passphrase for the purge of a vault';
/** A device: its own head memory and cache of pieces; `url` the server it talks to. */
const env = (device: string, url = server.url): NodeJS.ProcessEnv => ({ DSYNC_SERVER: url, XDG_CONFIG_HOME: path.join(root, device, 'config'), DSYNC_CACHE_DIR: path.join(root, device, 'cache'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE });
const run = (args: string[], device = 'a', url?: string) => dsync(args, { env: env(device, url), cwd: root });

/** `dsync ARGS… --json` that must succeed: its JSON lines. */
async function ok(args: string[], device = 'a', url?: string): Promise<any[]> {
  const r = await run([...args, '--json'], device, url);
  assert.equal(r.code, 0, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  return jsonLines(r.stdout);
}

/** `dsync ARGS…` that must fail with exit code 1 and a message matching `why`. */
async function refused(args: string[], why: RegExp, device = 'a', url?: string): Promise<void> {
  const r = await run(args, device, url);
  assert.equal(r.code, 1, `dsync ${args.join(' ')}: ${r.stdout}${r.stderr}`);
  assert.match(r.stderr, why);
}

function write(p: string, body: Uint8Array): Buffer {
  const full = path.join(root, p);
  mkdirSync(path.dirname(full), { recursive: true });
  writeFileSync(full, body);
  return Buffer.from(body);
}

/** Pulls NAME (version `version`) of the vault on a device with an empty cache: byte-exact? */
async function pulls(id: string, name: string, want: Buffer, version?: number): Promise<void> {
  const out = path.join(root, 'out', `${Math.random().toString(36).slice(2)}.bin`);
  mkdirSync(path.dirname(out), { recursive: true });
  await ok(['pull', name, '--out', out, '--vault', id, ...(version ? ['--version', String(version)] : [])], `fresh-${Math.random()}`);
  assert.ok(readFileSync(out).equals(want), `${name}${version ? ` v${version}` : ''} byte-exact`);
}

/** The packs the store holds for vault `id`. */
const storedPacks = (id: string) =>
  [...filesOf(server.data).keys()]
    .map((k) => k.match(new RegExp(`vaults/.*/packs/${id}/([0-9a-f]{64})$`))?.[1])
    .filter((p): p is string => !!p)
    .sort();

/** The head object of vault `id` as stored (its counter and the packs it names). */
const storedHead = (id: string) => [...filesOf(server.data)].find(([k]) => k.includes(`/heads/${id}`))![1];

/** The packs each file of the vault's tree uses (its versions' chunks and manifests), by name. */
async function packsByFile(id: string): Promise<Map<string, Set<string>>> {
  const vault = await openVault(httpVaultRemote(server.url), id, { passphrase: PASSPHRASE }, memoryHeads());
  const out = new Map<string, Set<string>>();
  for (const f of (await vault.tree()).files) out.set(f.name, new Set(f.versions.flatMap((v) => [...v.packs, ...v.manifest.map((r) => r.pack)])));
  return out;
}

async function newVault(): Promise<string> {
  const [{ id }] = await ok(['vault', 'create']);
  return id;
}

test('purge: a deleted file leaves ls --deleted and log; gc then deletes the packs only it used, the shared ones stay; other files pull byte-exact; a live file is refused', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  // gone.bin and keep.bin go up in one batch: their chunks share packs
  write('d/gone.bin', randomBytes(301, 100_000));
  const keep = write('d/keep.bin', randomBytes(302, 100_000));
  assert.equal((await ok(['push', 'd', ...V])).length, 2);
  write('gone-v2.bin', randomBytes(303, 400_000));
  assert.equal((await ok(['push', 'gone-v2.bin', '--name', 'd/gone.bin', ...V]))[0].version, 2);
  const other = write('other.bin', randomBytes(304, 300_000));
  await ok(['push', 'other.bin', ...V]);
  await ok(['rm', 'd/gone.bin', ...V]);
  assert.deepEqual((await ok(['vault', 'ls', id, '--deleted'])).map((f) => f.name), ['d/gone.bin']);

  const byFile = await packsByFile(id);
  const others = new Set([...byFile].filter(([n]) => n !== 'd/gone.bin').flatMap(([, p]) => [...p]));
  const onlyGone = [...byFile.get('d/gone.bin')!].filter((p) => !others.has(p));
  const shared = [...byFile.get('d/gone.bin')!].filter((p) => others.has(p));
  assert.ok(onlyGone.length >= 1, 'the second version has packs of its own');
  assert.ok(shared.length >= 1, 'the first version shares packs with keep.bin');

  // a live file, or a name the vault does not hold: refused, nothing changed
  const head = storedHead(id);
  await refused(['rm', 'other.bin', ...V, '--purge'], /"other.bin" is a live file: only a deleted file can be purged \(delete it first\)/);
  await refused(['vault', 'purge', id, 'nothing.bin'], /no file "nothing.bin"/);
  assert.ok(storedHead(id).equals(head), 'no head written');
  assert.equal((await ok(['log', 'other.bin', ...V])).length, 1);
  const plain = await run(['rm', 'd/gone.bin', '--purge']);
  assert.equal(plain.code, 2, 'a plain folder has no purge: its deleted files are in its trash');
  assert.match(plain.stderr, /--purge goes with --vault/);

  const [purged] = await ok(['rm', 'd/gone.bin', ...V, '--purge']);
  assert.deepEqual(purged.purged, ['d/gone.bin']);
  assert.deepEqual(await ok(['vault', 'ls', id, '--deleted']), []);
  await refused(['log', 'd/gone.bin', ...V], /no file "d\/gone.bin"/);
  await refused(['pull', 'd/gone.bin', '--version', '1', '--out', path.join(root, 'x.bin'), ...V], /no file "d\/gone.bin"/);
  // purged already: nothing to do, said plainly
  await refused(['rm', 'd/gone.bin', ...V, '--purge'], /no file "d\/gone.bin"/);

  // gc with grace 0: exactly the packs no version of any file names go (the purged file's own,
  // and the older trees' pieces), the shared ones stay
  const before = storedPacks(id);
  for (const p of [...onlyGone, ...shared]) assert.ok(before.includes(p));
  const gc = await dsync(['gc', '--store', server.data, '--vault-grace-ms', '0', '--min-age-ms', '0', '--window-ms', '0', '--json']);
  assert.equal(gc.code, 0, gc.stdout + gc.stderr);
  assert.ok(jsonLines(gc.stdout)[0].vaultPacks >= onlyGone.length, gc.stdout);
  const after = storedPacks(id);
  for (const p of onlyGone) assert.ok(!after.includes(p), `pack ${p} only the purged file used is collected`);
  for (const p of shared) assert.ok(after.includes(p), `pack ${p} keep.bin shares is kept`);
  assert.deepEqual(after, (await httpVaultRemote(server.url).head(id))!.packs, 'the store holds exactly the packs the head names');
  await pulls(id, 'd/keep.bin', keep);
  await pulls(id, 'other.bin', other);
  assert.deepEqual((await ok(['ls', '-R', ...V])).map((f) => f.name ?? f.folder), ['d/', 'd/keep.bin', 'other.bin']);

  // vault purge ID: every deleted file at once
  await ok(['rm', 'other.bin', ...V]);
  await ok(['rm', '-r', 'd', ...V]);
  const [all] = await ok(['vault', 'purge', id]);
  assert.deepEqual(all.purged, ['d/keep.bin', 'other.bin']);
  assert.deepEqual(await ok(['vault', 'ls', id, '--deleted']), []);
  const [none] = await ok(['vault', 'purge', id]);
  assert.deepEqual(none.purged, []);
});

/** A proxy in front of the server that, once armed, holds the next head write (PUT …/head)
 *  until `meanwhile` has run: another device's change lands between this device's read of the
 *  head and its write. */
async function holdingProxy(): Promise<{ url: string; arm(meanwhile: () => Promise<unknown>): void; held(): boolean; close(): Promise<void> }> {
  let hold: (() => Promise<unknown>) | null = null;
  let did = false;
  const srv: Server = createServer(async (req, res) => {
    try {
      const parts: Buffer[] = [];
      for await (const c of req) parts.push(c as Buffer);
      if (hold && req.method === 'PUT' && /\/head$/.test(req.url!)) {
        const h = hold;
        hold = null;
        await h();
        did = true;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'connection', 'content-length'].includes(k)) headers[k] = v;
      const r = await fetch(server.url + req.url, { method: req.method, headers, body: parts.length ? Buffer.concat(parts) : undefined });
      const back: Record<string, string> = {};
      r.headers.forEach((v, k) => !['content-encoding', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k) && (back[k] = v));
      res.writeHead(r.status, back).end(Buffer.from(await r.arrayBuffer()));
    } catch (e) {
      res.writeHead(502).end(String(e));
    }
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`,
    arm: (m) => ((hold = m), (did = false)),
    held: () => did,
    close: () => new Promise<void>((r) => (srv.closeAllConnections(), srv.close(() => r()))),
  };
}

test('races: a push built on a deleted file that a purge beat becomes a new file; a push that beat the purge refuses it; a restore of a purged file is refused', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const proxy = await holdingProxy();
  try {
    // the purge lands between B's read and B's write: B's version is a new file x, nothing lost
    const old = write('x-old.bin', randomBytes(311, 300_000));
    await ok(['push', 'x-old.bin', '--name', 'x', ...V]);
    await ok(['rm', 'x', ...V]);
    const edit = Buffer.from(old);
    edit.set(randomBytes(312, 5_000), 150_000); // B's version reuses chunks of the purged one
    write('x-b.bin', edit);
    proxy.arm(() => ok(['vault', 'purge', id, 'x']));
    const [pushed] = await ok(['push', 'x-b.bin', '--name', 'x', ...V], 'b', proxy.url);
    assert.ok(proxy.held(), 'the purge landed between B\'s read and its write');
    assert.equal(pushed.version, 1, 'a new file');
    assert.deepEqual((await ok(['log', 'x', ...V])).map((v) => v.version), [1]);
    assert.deepEqual(await ok(['vault', 'ls', id, '--deleted']), []);
    // its chunks in the purged file's packs are in use again: gc keeps them
    const gc = await dsync(['gc', '--store', server.data, '--vault-grace-ms', '0', '--min-age-ms', '0', '--window-ms', '0', '--json']);
    assert.equal(gc.code, 0, gc.stdout + gc.stderr);
    await pulls(id, 'x', edit);

    // B's push lands between A's read and A's write: the purge is refused, the history kept
    await ok(['rm', 'x', ...V]);
    const v2 = write('x-v2.bin', randomBytes(313, 200_000));
    proxy.arm(() => ok(['push', 'x-v2.bin', '--name', 'x', ...V], 'b'));
    await refused(['vault', 'purge', id, 'x'], /"x" changed on another device while it was purged: nothing purged/, 'a', proxy.url);
    assert.ok(proxy.held());
    assert.deepEqual((await ok(['log', 'x', ...V])).map((v) => v.version), [2, 1]);
    await pulls(id, 'x', v2);
    await pulls(id, 'x', edit, 1);

    // a restore of a purged file: refused when the purge lands between its read and its write,
    // and when it reads the purged tree
    await ok(['rm', 'x', ...V]);
    proxy.arm(() => ok(['vault', 'purge', id, 'x']));
    await refused(['restore', 'x', '--version', '1', ...V], /"x" was purged or renamed on another device meanwhile: nothing written/, 'b', proxy.url);
    assert.ok(proxy.held());
    assert.deepEqual(await ok(['ls', ...V]), []);
    assert.deepEqual(await ok(['vault', 'ls', id, '--deleted']), []);
    await refused(['restore', 'x', '--version', '1', ...V], /no file "x"/, 'b');
  } finally {
    await proxy.close();
  }
});

test('mv --vault onto a deleted file\'s name: the moved file\'s newest version joins that file\'s history, the old name is deleted with its own; no version lost', async () => {
  const id = await newVault();
  const V = ['--vault', id];
  const a1 = write('a1.bin', randomBytes(321, 200_000));
  const a2 = write('a2.bin', randomBytes(322, 200_000));
  const b1 = write('b1.bin', randomBytes(323, 150_000));
  await ok(['push', 'a1.bin', '--name', 'a.bin', ...V]);
  await ok(['push', 'a2.bin', '--name', 'a.bin', ...V]);
  await ok(['push', 'b1.bin', '--name', 'b.bin', ...V]);
  await ok(['rm', 'b.bin', ...V]);
  await ok(['mv', 'a.bin', 'b.bin', ...V]);
  assert.deepEqual((await ok(['ls', ...V])).map((f) => [f.name, f.latest, f.versions]), [['b.bin', 2, 2]]);
  assert.deepEqual((await ok(['vault', 'ls', id, '--deleted'])).map((f) => f.name), ['a.bin']);
  assert.deepEqual((await ok(['log', 'a.bin', ...V])).map((v) => v.version), [2, 1]);
  await pulls(id, 'b.bin', a2);
  await pulls(id, 'b.bin', b1, 1);
  await pulls(id, 'a.bin', a1, 1);
  await pulls(id, 'a.bin', a2, 2);
  // dsync vault mv the same way; onto a live name refused
  write('c.bin', randomBytes(324, 1_000));
  await ok(['push', 'c.bin', ...V]);
  await refused(['vault', 'mv', id, 'c.bin', 'b.bin'], /"b.bin" exists: nothing renamed/);
  await ok(['vault', 'mv', id, 'c.bin', 'a.bin']);
  assert.deepEqual((await ok(['log', 'a.bin', ...V])).map((v) => v.version), [3, 2, 1]);
  await pulls(id, 'a.bin', readFileSync(path.join(root, 'c.bin')));
  assert.deepEqual((await ok(['vault', 'ls', id, '--deleted'])).map((f) => f.name), ['c.bin']);
});
