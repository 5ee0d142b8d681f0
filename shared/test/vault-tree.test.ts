// The purge rule of a vault's tree (shared/src/vault/tree.ts, docs/vaults.md "Versions, deletes
// and renames"): only a deleted file is purged, with every version; the rule is idempotent, bound
// to the file's id (a file made at the name since is left alone), refused when another device
// changed the file meanwhile, and the packs only the purged file used leave `packsInUse` while
// a pack another file shares stays.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Ref, Seal, type Tree, type Version, VaultChanged, VaultError, hex } from '../src/vault/format.ts';
import { addVersion, deleteFile, newFileId, packsInUse, purgeFile, seen, seenDeleted } from '../src/vault/tree.ts';

const rnd = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));
const pack = (c: string) => c.repeat(64);
const ref = (p: string): Ref => ({ id: rnd(32), pack: p, offset: 0, length: 100, seal: Seal.Gcm });
const version = (packs: string[], manifest: string): Omit<Version, 'n'> => ({ id: rnd(16), size: 10, root: rnd(32), mtime: 1, pushed: 2, device: 'd', manifest: [ref(manifest)], packs });
const names = (t: Tree) => t.files.map((f) => `${f.name}${f.deleted ? ' (deleted)' : ''} v${f.versions.map((v) => v.n).join(',')}`).sort();

/** x (two versions, packs a, b, manifest pieces in c) deleted; y live, sharing pack b. */
function vault(): Tree {
  let t: Tree = { keep: 32, files: [] };
  const x = newFileId();
  t = addVersion(t, 'x', x, version([pack('a')], pack('c')))!;
  t = addVersion(t, 'x', x, version([pack('a'), pack('b')], pack('c')))!;
  t = addVersion(t, 'y', newFileId(), version([pack('b')], pack('d')))!;
  return deleteFile(t, seen(t, 'x'), 5)!;
}

test('purge: a deleted file leaves the tree with every version; the packs only it used leave packsInUse, a shared one stays', () => {
  const t = vault();
  const tree = [ref(pack('e'))];
  assert.deepEqual(packsInUse(t, tree), ['a', 'b', 'c', 'd', 'e'].map(pack));
  const purged = purgeFile(t, seenDeleted(t, 'x'))!;
  assert.deepEqual(names(purged), ['y v1']);
  assert.deepEqual(packsInUse(purged, tree), ['b', 'd', 'e'].map(pack), 'y still names b');
  assert.deepEqual(names(t), ['x (deleted) v1,2', 'y v1'], 'the tree read is not changed');
});

test('purge: idempotent, and bound to the file id: a file made at the name since is left alone', () => {
  const t = vault();
  const s = seenDeleted(t, 'x');
  const once = purgeFile(t, s)!;
  assert.equal(purgeFile(once, s), null, 'purged already: nothing to write');
  // another device made a new x after the purge landed; this purge applied again leaves it
  const again = addVersion(once, 'x', newFileId(), version([pack('f')], pack('g')))!;
  assert.equal(purgeFile(again, s), null);
  assert.deepEqual(names(again), ['x v1', 'y v1']);
});

test('purge: a live file is refused; a file made live again, given a version or renamed meanwhile is refused, nothing purged', () => {
  const t = vault();
  assert.throws(() => seenDeleted(t, 'y'), (e: Error) => e instanceof VaultError && /"y" is a live file: only a deleted file can be purged \(delete it first\)/.test(e.message));
  assert.throws(() => seenDeleted(t, 'nope'), /no file "nope"/);
  const s = seenDeleted(t, 'x');
  // a push to the deleted name (built on its history) landed first: x is live with v3
  const live = addVersion(t, 'x', s.file, version([pack('h')], pack('i')))!;
  assert.throws(() => purgeFile(live, s), (e: Error) => e instanceof VaultChanged && /"x" changed on another device while it was purged: nothing purged/.test(e.message));
  // ... and deleted again: still a version this device did not see
  const deletedAgain = deleteFile(live, seen(live, 'x'), 9)!;
  assert.throws(() => purgeFile(deletedAgain, s), VaultChanged);
  assert.deepEqual(names(deletedAgain), ['x (deleted) v1,2,3', 'y v1']);
  // the same file under another name
  const renamed: Tree = { keep: t.keep, files: t.files.map((f) => (hex(f.id) === hex(s.file) ? { ...f, name: 'x2' } : f)) };
  assert.throws(() => purgeFile(renamed, s), VaultChanged);
});
