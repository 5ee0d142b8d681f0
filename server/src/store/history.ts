/**
 * A file's history changed without moving a byte (docs/store.md §7): a version or the whole
 * file removed, retention applied, an old version restored as the newest, every version renamed
 * to another name. Each is a head change (`changeHead`, commit.ts) on the file's head, two for a
 * rename; versions a change adds are guarded against gc and confirmed before it returns.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import type { Repo } from './repo.ts';
import { type HeadChange, type SeenHead, sameVersion } from './commit.ts';
import { type FileHead, type VersionEntry, applyRetention } from './format.ts';
import type { Refs } from './gc-state.ts';
import type { VersionSource } from './source.ts';
import { carryMark } from './uploads.ts';
import { stale } from './writer.ts';

/** What changing a file's history needs of its Store (store.ts). */
export interface HistoryHost {
  readonly repo: Repo;
  head(name: string): Promise<FileHead | null>;
  /** swaps the file head of `name` by compare-and-swap (Store.changeHead) */
  changeHead<T>(name: string, change: (h: FileHead | null) => HeadChange<T> | Promise<HeadChange<T>>, hooks?: { landed?: () => void; seen?: SeenHead }): Promise<T>;
  /** the content objects versions reference, each known at its version's epoch */
  refsOf(entries: VersionEntry[]): Promise<Refs>;
  /** a version to build on, verified whole (Store.openBasis) */
  openBasis(name: string, version: number): Promise<{ source: VersionSource }>;
  /** why `name` cannot be a file now, or null (Store.typeClash) */
  typeClash(name: string, as: 'file'): Promise<string | null>;
}

/** After a rename's renumbering (`to[i]` is `from[i]`), each `restoredFrom` names the new number
 *  of its source, or goes when the source did not move with it. */
function renumberRestored(from: VersionEntry[], to: VersionEntry[]): void {
  for (const v of to) {
    if (v.restoredFrom === undefined) continue;
    const i = from.findIndex((f) => f.version === v.restoredFrom);
    if (i < 0) delete v.restoredFrom;
    else v.restoredFrom = to[i].version;
  }
}

export const noVersion = (name: string, version: number) => new ProtocolError(ErrorCode.NotFound, `${name} has no version ${version}`);

/** Removes one version, or the whole file (every version). Its version numbers are never
 *  reused. Returns the versions removed. `latest` (compare-and-swap): only while the file's
 *  latest version is that one, checked in the swap (StaleBasis otherwise). */
export async function removeVersions(store: HistoryHost, name: string, version?: number, latest?: number): Promise<number[]> {
  return store.changeHead(name, (h) => {
    const vs = h?.versions ?? [];
    const last = vs[vs.length - 1]?.version;
    if (latest !== undefined && last !== undefined && last !== latest) throw stale(name, last, latest);
    const gone = version === undefined ? vs : vs.filter((v) => v.version === version);
    if (!gone.length) throw version === undefined ? new ProtocolError(ErrorCode.NotFound, `${name} does not exist`) : noVersion(name, version);
    return { head: { ...h!, versions: vs.filter((v) => !gone.includes(v)) }, result: gone.map((v) => v.version) };
  });
}

/** Applies retention (keepVersions, keepDays) to `name`; returns how many versions went. */
export async function retainVersions(store: HistoryHost, name: string): Promise<number> {
  return store.changeHead(name, (h) => {
    const kept = h ? applyRetention(h.versions, store.repo.settings) : [];
    if (!h || kept.length === h.versions.length) return { head: null, result: 0 };
    return { head: { ...h, versions: kept }, result: h.versions.length - kept.length };
  });
}

/** Adds a new version of `name` with the bytes of `version` (the same index). */
export async function restoreVersion(store: HistoryHost, name: string, version: number): Promise<number> {
  // a new version is built from bytes verified for it: the old version's, and its index
  const { source } = await store.openBasis(name, version);
  if (!(await store.repo.indexIntact(source.id!))) throw new ProtocolError(ErrorCode.Internal, `damaged store: ${name} version ${version}: its index ${source.id} does not match its hash`);
  // the entries this restore's attempts tried: one whose swap landed though its answer said
  // otherwise (an SDK retry refused after its first attempt landed) is found, and confirmed
  const tried: VersionEntry[] = [];
  let refs: Refs | null = null;
  return store.changeHead(name, async (h) => {
    const landed = h?.versions.find((v) => tried.some((t) => sameVersion(v, t)));
    if (landed) return { head: null, result: landed.version, adds: { entries: [landed], refs: refs!, ours: true } };
    const old = h?.versions.find((v) => v.version === version);
    if (!h || !old) throw noVersion(name, version);
    const entry: VersionEntry = { ...old, version: h.next, mtime: new Date().toISOString(), change: 0, restoredFrom: version };
    tried.push(entry);
    refs ??= await store.refsOf([old]);
    const adds = { entries: [entry], refs, ours: true };
    return { head: { ...h, next: h.next + 1, versions: applyRetention([...h.versions, entry], store.repo.settings) }, result: h.next, adds };
  });
}

/**
 * Moves every version of `from` to `to`, which must not exist (or have no versions left) and
 * must not clash with a folder or file (`typeClash`): `to` gets them under new numbers (its
 * own, never reused), then `from` is removed. A crash between the two leaves both names,
 * never neither.
 *
 * `expect` (compare-and-swap: POST /api/files/move with `version`): the move happens only while the
 * latest version of `from` is `expect`. It is checked in the swap that removes them from
 * `from`, the one that decides the move: a version another device pushed to `from` before it
 * refuses the move (StaleBasis) and `to`'s copy is withdrawn again, so that the pushed version
 * stays where it was pushed and no name is left holding an unchecked copy; a version pushed
 * after it finds `from` moved.
 *
 * Returns the number the latest version of `from` has at `to` (versions are renumbered
 * there): what a client that moved a version it knows records as agreed.
 */
export async function renameFile(store: HistoryHost, from: string, to: string, expect?: number): Promise<number> {
  const latestOf = (h: FileHead | null) => h?.versions[h.versions.length - 1]?.version ?? 0;
  const check = (h: FileHead | null) => {
    if (expect !== undefined && h?.versions.length && latestOf(h) !== expect) throw stale(from, latestOf(h), expect);
  };
  if (from === to) {
    const h = await store.head(from);
    if (!h?.versions.length) throw new ProtocolError(ErrorCode.NotFound, `${from} does not exist`);
    check(h);
    return latestOf(h);
  }
  const src = await store.head(from);
  if (!src?.versions.length) throw new ProtocolError(ErrorCode.NotFound, `${from} does not exist`);
  check(src);
  const refs = await store.refsOf(src.versions);
  let copied: VersionEntry[] = [];
  await store.changeHead(to, async (h) => {
    if (h?.versions.length) throw new ProtocolError(ErrorCode.Inconsistent, `${to} exists`);
    const clash = await store.typeClash(to, 'file');
    if (clash) throw new ProtocolError(ErrorCode.Inconsistent, clash);
    let next = h?.next ?? 1;
    const versions = src.versions.map((v) => ({ ...v, version: next++ }));
    renumberRestored(src.versions, versions);
    copied = versions;
    return { head: { ...carryMark(h), name: to, next, versions }, result: undefined, adds: { entries: versions, refs, ours: true } };
  });
  try {
    await store.changeHead(from, (h) => {
      if (!h?.versions.length) throw new ProtocolError(ErrorCode.NotFound, `${from} does not exist`);
      check(h);
      return { head: { ...h, versions: h.versions.filter((v) => !src.versions.some((s) => s.version === v.version)) }, result: undefined };
    });
  } catch (e) {
    // refused (the latest moved on, or `from` went meanwhile): the copy goes again; a store
    // failure leaves both names, never neither
    if (!(e instanceof ProtocolError && (e.code === ErrorCode.StaleBasis || e.code === ErrorCode.NotFound))) throw e;
    await store.changeHead(to, (h) => {
      const versions = h?.versions.filter((v) => !copied.some((c) => sameVersion(v, c))) ?? [];
      return { head: h && versions.length !== h.versions.length ? { ...h, versions } : null, result: undefined };
    });
    throw e;
  }
  return copied[copied.length - 1].version;
}
