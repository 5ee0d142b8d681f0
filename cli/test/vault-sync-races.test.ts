// The vault as the sync engine's server side (shared/src/sync/vault-folder.ts) when another
// device's change lands between a pass's listing and its act: two devices, each a Vault over a
// real server on a loopback port and a folder of its own on node:fs (cli/node-tree.ts). A push,
// a delete, a rename, a folder's rename and a folder's delete made against a version the vault
// no longer holds are refused as the engine expects (StaleBasis, RemoteChanged) and write
// nothing; a folder's rename or delete is all or none; a download never replaces a file that
// changed here since the plan read it; the listing's roots are the local files' roots, and a
// version an earlier dsync wrote (no root in the tree) is compared by its manifest's root.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { type TestServer, testServer } from '../../harness/helpers.ts';
import { RemoteError } from '../../shared/src/transport/conn.ts';
import { ErrorCode } from '../../shared/src/wire/protocol.ts';
import { LocalChanged, RemoteChanged, syncUntilStill } from '../../shared/src/sync/engine.ts';
import { VaultFolder } from '../../shared/src/sync/vault-folder.ts';
import { httpVaultRemote } from '../../shared/src/vault/remote.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../../shared/src/vault/vault.ts';
import { VaultError } from '../../shared/src/vault/format.ts';
import { NodeFiles, vaultTree } from '../node-tree.ts';
import { FileState } from '../sync-state.ts';

let server: TestServer;
let root: string;
before(async () => {
  server = await testServer();
  root = mkdtempSync(path.join(tmpdir(), 'dsync-vault-races-'));
});
after(async () => {
  await server.stop();
  rmSync(root, { recursive: true, force: true });
});

/** Argon2id as light as a keyfile allows: the passphrase is not what these tests are about. */
const LIGHT = { m: 64, t: 1, p: 1 };

function device(name: string, vault: Vault) {
  const dir = path.join(root, name);
  mkdirSync(dir, { recursive: true });
  const tree = vaultTree(dir, vault);
  return {
    dir,
    vault,
    tree,
    folder: new VaultFolder(vault, new NodeFiles(tree)),
    write(p: string, body: string) {
      mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
      writeFileSync(path.join(dir, p), body);
    },
    read: (p: string) => readFileSync(path.join(dir, p), 'utf8'),
    /** what a plan reads of a local file: its stat and root */
    expected: (p: string) => tree.hash(p),
  };
}

async function twoDevices() {
  const remote = httpVaultRemote(server.url);
  const { vault } = await createVault(remote, 'pass', memoryHeads(), LIGHT, { device: 'a' });
  const other = await openVault(remote, vault.id, { passphrase: 'pass' }, memoryHeads(), { device: 'b' });
  const id = vault.id;
  return { a: device(`a-${id}`, vault), b: device(`b-${id}`, other) };
}

const listed = async (d: ReturnType<typeof device>) => Object.fromEntries([...(await d.folder.list()).files].map(([p, f]) => [p, f.version]));

test('a push, a delete and a rename against a version the vault no longer holds are refused and write nothing', async () => {
  const { a, b } = await twoDevices();
  a.write('f.txt', 'the first version, from a\n');
  const up = await a.folder.push('f.txt', 'absent');
  assert.equal(up.version, 1);
  assert.equal(up.root, (await a.expected('f.txt')).hash, 'the root pushed is the local file\'s');
  const list = await b.folder.list();
  assert.deepEqual(list.folders, null);
  assert.equal(list.files.get('f.txt')?.root, up.root, 'the listing carries the root');

  // b made the same name meanwhile: its push expecting no file there is refused
  b.write('f.txt', 'made on b at the same time\n');
  await assert.rejects(b.folder.push('f.txt', 'absent'), (e) => e instanceof RemoteError && e.code === ErrorCode.StaleBasis);
  assert.deepEqual((await b.vault.log('f.txt')).versions.map((v) => v.device), ['a'], 'nothing written');

  // a's version 2 lands; b's acts against version 1 are refused
  a.write('f.txt', 'the second version, from a\n');
  const v2 = await a.folder.push('f.txt', { version: 1 });
  assert.equal(v2.version, 2);
  await assert.rejects(b.folder.push('f.txt', { version: 1 }), (e) => e instanceof RemoteError && e.code === ErrorCode.StaleBasis);
  await assert.rejects(b.folder.remove('f.txt', { version: 1 }, 'stamp'), RemoteChanged);
  await assert.rejects(b.folder.move('f.txt', 'g.txt', { version: 1 }), RemoteChanged);
  assert.deepEqual(await listed(b), { 'f.txt': 2 });
  assert.deepEqual(await b.folder.versions('f.txt'), [1, 2]);

  // against the version it holds, each goes ahead
  assert.deepEqual(await b.folder.move('f.txt', 'g.txt', { version: 2 }), { version: 2, root: v2.root });
  assert.equal(await b.folder.remove('g.txt', { version: 2 }, 'stamp'), '', 'no trash folder: the history keeps it');
  assert.deepEqual(await listed(a), {});
  assert.deepEqual((await a.vault.log('g.txt')).versions.map((v) => v.n), [1, 2]);
});

test('a download replaces the local file only while it is what the plan read, and writes the version\'s bytes with its root', async () => {
  const { a, b } = await twoDevices();
  a.write('doc.txt', 'version one of the document\n');
  await a.folder.push('doc.txt', 'absent');
  const got = await b.folder.pull('doc.txt', 1, null);
  assert.equal(b.read('doc.txt'), 'version one of the document\n');
  assert.equal(got.root, (await b.expected('doc.txt')).hash);
  const read = await b.expected('doc.txt');

  a.write('doc.txt', 'version two of the document\n');
  await a.folder.push('doc.txt', { version: 1 });
  // b edits its copy after its plan read it: the download is refused and the edit stays
  b.write('doc.txt', 'an edit made on b meanwhile\n');
  await assert.rejects(b.folder.pull('doc.txt', 2, read, 'doc.txt'), LocalChanged);
  assert.equal(b.read('doc.txt'), 'an edit made on b meanwhile\n');
  // against what is there now, it goes ahead
  await b.folder.pull('doc.txt', 2, await b.expected('doc.txt'), 'doc.txt');
  assert.equal(b.read('doc.txt'), 'version two of the document\n');
});

test('a folder\'s rename and a folder\'s delete are one change each: all or none', async () => {
  const { a, b } = await twoDevices();
  for (const n of ['x', 'y', 'z']) {
    a.write(`d/${n}.txt`, `${n} in the folder d\n`);
    await a.folder.push(`d/${n}.txt`, 'absent');
  }
  a.write('d/y.txt', 'y edited on a\n');
  await a.folder.push('d/y.txt', { version: 1 });
  const stale = new Map([['x.txt', 1], ['y.txt', 1], ['z.txt', 1]]);
  await assert.rejects(b.folder.moveFolder('d', 'e', stale), RemoteChanged);
  await assert.rejects(b.folder.trashFolder('d', stale, 'stamp'), RemoteChanged);
  assert.deepEqual(await listed(b), { 'd/x.txt': 1, 'd/y.txt': 2, 'd/z.txt': 1 }, 'nothing moved or deleted');

  const now = new Map([['x.txt', 1], ['y.txt', 2], ['z.txt', 1]]);
  assert.deepEqual(await b.folder.moveFolder('d', 'e', now), now);
  assert.deepEqual(await listed(a), { 'e/x.txt': 1, 'e/y.txt': 2, 'e/z.txt': 1 });
  assert.equal(await b.folder.trashFolder('e', now, 'stamp'), '');
  assert.deepEqual(await listed(a), {});
  assert.deepEqual((await a.vault.ls({ deleted: true })).map((f) => f.name), ['e/x.txt', 'e/y.txt', 'e/z.txt']);
  assert.equal(await b.folder.makeFolder(), false, 'a vault keeps no empty folders');
});

test("a version an earlier dsync wrote (no root in the tree) is compared by its manifest's root: the same bytes on a new device are recorded, not a conflict; a tree's root that is not its manifest's is refused", async () => {
  const { a, b } = await twoDevices();
  const body = 'pushed before versions carried the root over their chunk ids\n';
  a.write('old.txt', body);
  const up = await a.folder.push('old.txt', 'absent');
  // the tree as the format before (format.ts TREE_V3) reads: no root in any version
  const rewrite = async (root: (n: number) => Uint8Array | null) => {
    const inner = a.vault.inner();
    await inner.writing(async (packs) => inner.commit(packs, await inner.state(), async (s) => ({ ...s.tree, files: s.tree.files.map((f) => ({ ...f, versions: f.versions.map((v) => ({ ...v, root: root(v.n) })) })) })));
  };
  await rewrite(() => null);
  assert.equal((await b.folder.list()).files.get('old.txt')?.root, undefined, 'no root listed');
  assert.equal(await b.folder.root('old.txt', 1), up.root, "the manifest's root");

  // b holds the same bytes and has never synced: a whole pass records the file
  b.write('old.txt', body);
  const state = new FileState({ server: server.url, folder: '', dir: b.dir, vault: b.vault.id }, path.join(root, `state-${b.vault.id}`));
  const r = await syncUntilStill(b.tree, b.folder, state, { device: 'b', maxDeleteShare: 1, maxDeleteMin: 0 });
  assert.deepEqual(r.done.map((d) => [d.op, 'path' in d && d.path, d.error]), [['record', 'old.txt', undefined]]);
  assert.equal(state.files.get('old.txt')?.hash, up.root);
  assert.deepEqual((await b.vault.log('old.txt')).versions.map((v) => v.n), [1], 'no version pushed');

  // a pull reports the manifest's root; a new version (here a restore) carries its root again
  assert.equal((await b.folder.pull('old.txt', 1, await b.expected('old.txt'))).root, up.root);
  await a.vault.restore('old.txt', 1);
  const v2 = (await a.vault.tree()).files[0].versions[1];
  assert.equal(v2.root && Buffer.from(v2.root).toString('hex'), up.root);

  // a tree whose root is not its manifest's (a client's bug): the pull refuses it, nothing written
  await rewrite((n) => (n === 2 ? new Uint8Array(32) : null));
  b.write('old.txt', 'b keeps this\n');
  await assert.rejects(b.folder.pull('old.txt', 2, await b.expected('old.txt')), (e) => e instanceof VaultError && /not its manifest's/.test(e.message));
  assert.equal(b.read('old.txt'), 'b keeps this\n');
});
