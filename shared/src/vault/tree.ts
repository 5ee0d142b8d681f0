/**
 * Changes to a vault's tree (docs/vaults.md, "Versions, deletes and renames"): a new version, a
 * delete, a rename, a purge of a deleted file and the retention. Each is a rule applied to the tree a device reads; when
 * another device's head lands first the device reads the new tree and applies its change
 * again, so every rule is idempotent (a change that is there already answers null: nothing to
 * write) and never drops another device's version: a delete or a rename that finds the file
 * changed in a way it did not see is refused, and a new version of a deleted file makes it
 * live again.
 */
import { VAULT_KEEP_VERSIONS } from '../base/limits.ts';
import { FILE_ID_BYTES, type Ref, type Tree, type TreeFile, type Version, VaultChanged, VaultError, hex } from './format.ts';

export const emptyTree = (): Tree => ({ keep: VAULT_KEEP_VERSIONS, files: [] });

export const newFileId = (): Uint8Array => globalThis.crypto.getRandomValues(new Uint8Array(FILE_ID_BYTES));

const same = (a: Uint8Array, b: Uint8Array) => hex(a) === hex(b);
export const last = (f: TreeFile): Version => f.versions[f.versions.length - 1];
export const byName = (t: Tree, name: string): TreeFile | undefined => t.files.find((f) => f.name === name);
const byId = (t: Tree, id: Uint8Array): TreeFile | undefined => t.files.find((f) => same(f.id, id));

/** A copy of `t` with `f` (matched by id) replaced by `next`, or added. */
function put(t: Tree, next: TreeFile): Tree {
  return { keep: t.keep, files: [...t.files.filter((f) => !same(f.id, next.id)), next] };
}

/** Forgets the oldest versions of every file beyond the tree's `keep`. */
function trimmed(f: TreeFile, keep: number): TreeFile {
  return f.versions.length > keep ? { ...f, versions: f.versions.slice(-keep) } : f;
}

/** A new version (numbered here) of the file `file` named `name`: the file the version's
 *  manifest is bound to, which `fileFor` chose on this tree. Makes a deleted file live. */
export function addVersion(t: Tree, name: string, file: Uint8Array, v: Omit<Version, 'n'>): Tree | null {
  if (t.files.some((f) => f.versions.some((x) => same(x.id, v.id)))) return null;
  const f = byName(t, name);
  if (f && !same(f.id, file)) throw new VaultError(`${JSON.stringify(name)} is another file than the version was made for`);
  const before = f ?? { id: file, name, deleted: 0, versions: [] };
  const n = before.versions.length ? last(before).n + 1 : 1;
  return put(t, trimmed({ ...before, deleted: 0, versions: [...before.versions, { ...v, n }] }, t.keep));
}

/** The file a new version of `name` belongs to in `t`: the file of that name (live or
 *  deleted), else `fresh`. */
export function fileFor(t: Tree, name: string, fresh: Uint8Array): Uint8Array {
  return byName(t, name)?.id ?? fresh;
}

/** What a device saw of a file when it asked to delete or rename it. */
export interface Seen {
  name: string;
  file: Uint8Array;
  /** the id of its newest version */
  version: Uint8Array;
}

export function seen(t: Tree, name: string): Seen {
  const f = byName(t, name);
  if (!f || f.deleted) throw new VaultError(`no file ${JSON.stringify(name)}${f ? ' (it was deleted: dsync vault restore)' : ''}`);
  return { name, file: f.id, version: last(f).id };
}

/** What a change expects the vault to hold at a name: its live file's newest version, or no
 *  live file (a deleted one, whose history the new version joins, counts as none). */
export type Expect = { version: number } | 'absent';

/** Throws VaultChanged unless `name` in `t` is what `expect` says. */
export function checkExpect(t: Tree, name: string, expect: Expect): void {
  const f = byName(t, name);
  const live = f && !f.deleted ? last(f).n : null;
  const want = expect === 'absent' ? null : expect.version;
  const say = (n: number | null) => (n === null ? 'no file' : `version ${n}`);
  if (live !== want) throw new VaultChanged(`${JSON.stringify(name)}: the vault holds ${say(live)} there, not ${say(want)}: nothing written`);
}

/** What a device saw of `name` to delete or rename it, while its newest version is `version`
 *  (when given: else VaultChanged). */
export function seenAt(t: Tree, name: string, version?: number): Seen {
  if (version !== undefined) checkExpect(t, name, { version });
  return seen(t, name);
}

/** The rules applied one after another (each to the tree the last made); null when none
 *  changed anything. */
export function applyAll(t: Tree, rules: ((t: Tree) => Tree | null)[]): Tree | null {
  let changed = false;
  for (const rule of rules) {
    const next = rule(t);
    if (next) (t = next), (changed = true);
  }
  return changed ? t : null;
}

/** Deletes the file `s` saw, keeping its history: refused when it has a version the device
 *  did not see (a push that raced the delete is kept) or was renamed meanwhile. */
export function deleteFile(t: Tree, s: Seen, time: number): Tree | null {
  const f = byId(t, s.file);
  if (f?.deleted) return null;
  if (!f || f.name !== s.name || !same(last(f).id, s.version)) throw new VaultChanged(`${JSON.stringify(s.name)} changed on another device while it was deleted: nothing deleted (see dsync vault log)`);
  return put(t, { ...f, deleted: Math.max(1, time) });
}

/** Renames the file `s` saw to `to`, with its history: refused when `to` is taken (by a live
 *  or a deleted file, whose history stays under its name) or the file was renamed meanwhile. */
export function renameFile(t: Tree, s: Seen, to: string): Tree | null {
  const f = byId(t, s.file);
  if (f?.name === to) return null;
  if (!f || f.name !== s.name) throw new VaultChanged(`${JSON.stringify(s.name)} was renamed on another device: nothing renamed`);
  const there = byName(t, to);
  if (there?.deleted) throw new VaultError(`${JSON.stringify(to)} exists as a deleted file with its history: nothing renamed`);
  if (there) throw new VaultChanged(`${JSON.stringify(to)} exists: nothing renamed`);
  return put(t, { ...f, name: to });
}

/** What a device saw of the deleted file `name` to purge it: refused (VaultError) unless the
 *  file is deleted in `t` (a live file is deleted first). */
export function seenDeleted(t: Tree, name: string): Seen {
  const f = byName(t, name);
  if (!f) throw new VaultError(`no file ${JSON.stringify(name)}`);
  if (!f.deleted) throw new VaultError(`${JSON.stringify(name)} is a live file: only a deleted file can be purged (delete it first): nothing purged`);
  return { name, file: f.id, version: last(f).id };
}

/** Forgets the deleted file `s` saw, with every version: its record leaves the tree, so the
 *  packs only it used are no longer in use (`packsInUse`) and the server's collection deletes
 *  them. Bound to the file's id: a file made at its name since is another file, left alone, and
 *  a file purged already is nothing to do. Refused when the file has a version the device did
 *  not see or is live again (a push to its name kept its history), or was renamed. */
export function purgeFile(t: Tree, s: Seen): Tree | null {
  const f = byId(t, s.file);
  if (!f) return null;
  if (!f.deleted || f.name !== s.name || !same(last(f).id, s.version)) throw new VaultChanged(`${JSON.stringify(s.name)} changed on another device while it was purged: nothing purged (see dsync vault log)`);
  return { keep: t.keep, files: t.files.filter((x) => !same(x.id, s.file)) };
}

/** Sets the versions each file keeps; lowering it forgets the oldest versions now. */
export function setKeep(t: Tree, keep: number): Tree | null {
  if (t.keep === keep) return null;
  return { keep, files: t.files.map((f) => trimmed(f, keep)) };
}

/** The packs a head references (docs/vaults.md, "Pack collection"): those of every version of
 *  every file, live or deleted (its chunks and its manifest's pieces), and of the tree's own
 *  pieces (`treeRefs`), each once, ascending. The head sends it beside its sealed bytes; the
 *  server keeps every pack it names. */
export function packsInUse(t: Tree, treeRefs: Ref[]): string[] {
  const packs = new Set<string>();
  for (const r of treeRefs) packs.add(r.pack);
  for (const f of t.files) {
    for (const v of f.versions) {
      for (const p of v.packs) packs.add(p);
      for (const r of v.manifest) packs.add(r.pack);
    }
  }
  for (const p of packs) if (!/^[0-9a-f]{64}$/.test(p)) throw new VaultError(`a head would name pack ${JSON.stringify(p)}, which is not uploaded (a client bug)`);
  return [...packs].sort();
}
