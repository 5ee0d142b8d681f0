/**
 * A change of a file head (docs/store.md §4, §8): compare-and-swap, retried on conflict. Every
 * commit, delete, rename, restore and retention goes through `changeHead`; a change that adds
 * versions is guarded against the garbage collector before its swap and confirmed once the
 * swap has landed, before it is reported done (withdrawn again when the confirmation fails).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import type { Backend } from './backend.ts';
import { noteInCatalog } from './catalog.ts';
import { type FileHead, type VersionEntry, jsonBody, parseFileHead } from './format.ts';
import { GcRefusal, type Refs, guardRefs, knownAt } from './gc-state.ts';
import { readHead, updateHead, writeHead } from './heads.ts';
import { fileHeadKey } from './keys.ts';
import { MARK_GROUP_MAX, dropMark, putMark } from './journal.ts';
import type { Repo } from './repo.ts';

/** What a head change decides, given the head it read (`changeHead`). */
export interface HeadChange<T> {
  /** the new head; null: leave the head as it is */
  head: FileHead | null;
  result: T;
  /** versions the change adds (or finds in the head and answers with) and the objects they
   *  reference: guarded against gc and confirmed before the change is reported done */
  adds?: Adds;
}
export interface Adds {
  /** the entries, as they are (or go) in the head */
  entries: VersionEntry[];
  refs: Refs;
  /** whether they are this change's own, withdrawn again when the confirmation fails (not: an
   *  existing version an unchanged push answers with) */
  ours: boolean;
}

/** A file head as a session read it, with its tag (null: no head then). */
export interface SeenHead {
  head: FileHead | null;
  tag: string | null;
  /** not read for this session: the head as this process last read or wrote it (a guess) */
  guessed?: boolean;
}

/**
 * Commits at once (docs/store.md §4, "Commits at once"): head changes of one process run in
 * groups. A change that arrives while a group runs waits for it to end, and starts with every
 * change that waited with it (at most MARK_GROUP_MAX): they ask for their journal marks in one
 * turn of the event loop (one mark object names them all, journal.ts), swap their heads in
 * parallel, share the read of gc/state that confirms them (gc-state.ts `freshGcState`) and
 * each folder's catalog swap (catalog.ts `noteInCatalog`). A change leaves its group when it
 * is done, or when it must try again (contention, an outcome to settle, a late swap, a
 * confirmation to ask again): it then goes on alone, so a group lasts one attempt of each of
 * its changes. No timer: a change arriving when no group runs starts at the end of the
 * current turn.
 */
interface Gate {
  /** the running group */
  running: Group | null;
  /** a group is starting at the end of this turn */
  soon: boolean;
  queue: ((g: Group) => void)[];
}
interface Group {
  gate: Gate;
  /** its changes not yet left */
  open: number;
  /** its changes waiting to note their heads in their catalogs (`Member.park`) */
  parked: (() => void)[];
}
/** A change's place in its group. */
interface Member {
  /** leaves the group (idempotent) */
  leave(): void;
  /** runs `fn` once every change still in the group waits to run its own (their catalog notes
   *  then start in one turn, and share each folder's swap); at once after `leave` */
  park<T>(fn: () => Promise<T>): Promise<T>;
}
const gates = new WeakMap<Backend, Gate>();
/** Set within a change: a change made from within one (none today) joins no group, so it never
 *  waits for the group it is part of. */
const within = new AsyncLocalStorage<true>();
const alone: Member = { leave: () => {}, park: (fn) => fn() };

/** Starts the next group: the changes that waited, at most MARK_GROUP_MAX. */
function admit(gate: Gate): void {
  if (gate.running || gate.soon || !gate.queue.length) return;
  const batch = gate.queue.splice(0, MARK_GROUP_MAX);
  const group: Group = { gate, open: batch.length, parked: [] };
  gate.running = group;
  for (const go of batch) go(group);
}

/** Runs the parked changes' notes once every change still in the group is parked. */
function release(group: Group): void {
  if (!group.parked.length || group.parked.length < group.open) return;
  for (const go of group.parked.splice(0)) go();
}

/** Waits for this change's group to start. */
async function joinGroup(backend: Backend): Promise<Member> {
  if (within.getStore()) return alone;
  let g = gates.get(backend);
  if (!g) gates.set(backend, (g = { running: null, soon: false, queue: [] }));
  const gate = g;
  const group = await new Promise<Group>((go) => {
    gate.queue.push(go);
    if (gate.running || gate.soon) return;
    gate.soon = true;
    setImmediate(() => {
      gate.soon = false;
      admit(gate);
    });
  });
  let left = false;
  return {
    leave() {
      if (left) return;
      left = true;
      group.open--;
      release(group);
      if (group.open === 0) {
        gate.running = null;
        admit(gate);
      }
    },
    park(fn) {
      if (left) return fn();
      return new Promise<void>((go) => {
        group.parked.push(go);
        release(group);
      }).then(fn);
    },
  };
}

/** Attempts to settle an unknown outcome, confirm versions or withdraw them, before giving up. */
const SETTLE_ATTEMPTS = 5;
const backoffMs = (k: number) => Math.min(2000, 100 * 2 ** k) * (0.5 + Math.random());
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The same version, also once a repack gave the entry another index of the same bytes
 *  (store/repack.ts): a head gives a number once, and the commit time and root are this entry's. */
export const sameVersion = (a: VersionEntry, b: VersionEntry) => a.version === b.version && a.mtime === b.mtime && a.root === b.root && a.algo === b.algo;

/**
 * Changes the head of `user`'s file `name` by compare-and-swap, retried on conflict. A change
 * that adds versions (`adds`) is guarded against the garbage collector before its swap, and
 * confirmed once the swap has landed, before this returns (docs/store.md §8): if a collection
 * took what it references, the versions are withdrawn from the head again and this throws a
 * retryable error. `hooks.landed` is called once such a swap landed or may have: from then on
 * the objects it references may be referenced by a head (another change may even have copied
 * them), so the caller never deletes them; gc collects them if they are not.
 *
 * `seen`: the head as the caller read it (a push session, at its start). The first attempt
 * starts from it instead of a read: its compare-and-swap lands only if the head is still the
 * one seen, so a change made from it is right whenever it lands (docs/store.md §4). A change
 * that decides from it not to write, or throws, is decided again from a read.
 */
export async function changeHead<T>(repo: Repo, user: string, name: string, change: (h: FileHead | null) => HeadChange<T> | Promise<HeadChange<T>>, hooks: { landed?: () => void; seen?: SeenHead } = {}): Promise<T> {
  const member = await joinGroup(repo.backend);
  try {
    return await within.run(true, () => changeHeadIn(repo, user, name, change, hooks, member));
  } finally {
    member.leave();
  }
}

/** `changeHead` within its group (`member`: left before an attempt again). */
async function changeHeadIn<T>(repo: Repo, user: string, name: string, change: (h: FileHead | null) => HeadChange<T> | Promise<HeadChange<T>>, hooks: { landed?: () => void; seen?: SeenHead }, member: Member): Promise<T> {
  const leave = () => member.leave();
  const key = fileHeadKey(user, name);
  const backend = repo.backend;
  // the change's mark (journal.ts), written while the change is decided and awaited before its
  // swap: a process killed between the swap and the catalog's note leaves it, and the next
  // server to start (or any server's pass a minute later) notes the head in its catalog
  const mark = putMark(backend, user, name);
  mark.catch(() => {}); // awaited, with its error, before the first swap
  // whether a swap of this change may have landed while its catalog has not noted it: then
  // the mark stays
  let unlisted = false;
  try {
    let late = 0;
    for (let attempt = 0; ; attempt++) {
      const guess = attempt === 0 ? hooks.seen : undefined;
      let cur: { tag: string } | null;
      let old: FileHead | null;
      if (guess) {
        cur = guess.tag === null ? null : { tag: guess.tag };
        old = guess.head;
      } else {
        const got = await readHead(backend, key);
        cur = got;
        old = got && parseFileHead(got.body, key);
      }
      let decided: HeadChange<T>;
      try {
        decided = await change(old);
      } catch (e) {
        if (guess) continue;
        throw e;
      }
      const { head, result, adds } = decided;
      if (!head && guess) continue;
      if (!head) {
        // versions already in the head: an earlier attempt of this change landed unseen, or the
        // answer is an existing version (an unchanged push)
        if (adds) {
          if (adds.ours) hooks.landed?.();
          await confirm(repo, user, key, adds, leave);
          if (adds.ours && old && (await member.park(() => noted(repo, user, old)))) unlisted = false;
        }
        return result;
      }
      head.seq = (old?.seq ?? 0) + 1;
      if (adds) {
        // the guard before the swap: rescues condemned references, brings their epochs up to
        // date (recorded in the entries); the swap starts within half the commit window of the
        // state it read (a few tries; a state this process read less than W/4 ago will do), so
        // that it lands before a collector's second mark in all but a slow network: a margin
        // that makes withdrawals rare, safety rests on the confirmation (a new read, always)
        const w = repo.settings.gcWindowMs;
        const { refs, readAt } = await guardRefs(repo, adds.refs, { maxAgeMs: w / 4 });
        adds.refs = refs;
        const known = knownAt(refs);
        for (const e of adds.entries) e.epoch = Number.isFinite(known) ? known : 0;
        if (w > 0 && Date.now() > readAt + w / 2 && late++ < 3) {
          leave();
          continue;
        }
      }
      await mark;
      let tag: string | null;
      unlisted = true;
      try {
        tag = await writeHead(backend, key, jsonBody(head), cur?.tag ?? null);
      } catch (e) {
        if (!adds) throw e;
        hooks.landed?.();
        leave();
        const fate = await settle(repo, name, key, cur?.tag ?? null, adds.entries);
        if (fate === 'unknown') throw e;
        if (fate === 'lost') {
          unlisted = false;
          continue;
        }
        tag = fate;
      }
      if (tag === null) {
        unlisted = false;
        leave();
        // contention: back off a little, growing, so many writers of one name all land
        if (attempt > 2) await sleep(Math.min(50, attempt * 2) * Math.random());
        continue;
      }
      if (adds) {
        hooks.landed?.();
        await confirm(repo, user, key, adds, leave);
      }
      dieHere(name);
      // the folder catalog follows; if this fails the head stands, and the mark stays for the
      // next pass over the marks (journal.ts) to note it
      if (await member.park(() => noted(repo, user, head))) unlisted = false;
      return result;
    }
  } finally {
    mark.then((k) => dropMark(backend, k, !unlisted), () => {});
  }
}

/** Notes `head` in its folder's catalog; whether that worked. */
const noted = (repo: Repo, user: string, head: FileHead) =>
  noteInCatalog(repo.backend, user, head, repo.linked).then(
    () => true,
    () => false,
  );

/** A test hook (server/test/catalog-repair.test.ts): a process whose DSYNC_TEST_DIE_BEFORE_CATALOG
 *  names this file kills itself (SIGKILL) between a head swap and its catalog's note, as a
 *  crash or a power cut there would. */
function dieHere(name: string) {
  if (process.env.DSYNC_TEST_DIE_BEFORE_CATALOG === name) process.kill(process.pid, 'SIGKILL');
}

/**
 * After a swap adding `entries` failed with an error (its outcome unknown: an answer lost, an
 * SDK retry refused after its first attempt landed): its tag if it landed; 'lost' if it never
 * can, because the head moved past the tag it was made against or this fenced it (rewrote
 * the head against that tag, so the swap can no longer land); 'unknown' if the store cannot
 * be reached to tell.
 */
async function settle(repo: Repo, name: string, key: string, tag: string | null, entries: VersionEntry[]): Promise<string | 'lost' | 'unknown'> {
  for (let k = 0; k < SETTLE_ATTEMPTS; k++) {
    try {
      const cur = await readHead(repo.backend, key);
      const h = cur && parseFileHead(cur.body, key);
      if (cur && entries.every((e) => h!.versions.some((v) => sameVersion(v, e)))) return cur.tag;
      if ((cur?.tag ?? null) !== tag) return 'lost';
      const fence: FileHead = h ? { ...h, seq: (h.seq ?? 0) + 1 } : { name, next: 1, seq: 1, versions: [] };
      if ((await writeHead(repo.backend, key, jsonBody(fence), tag)) !== null) return 'lost';
    } catch {
      await sleep(backoffMs(k));
    }
  }
  return 'unknown';
}

/**
 * The confirmation of versions in the head (docs/store.md §8): the gc guard again, now that
 * the head holds them. A refusal, or a store that cannot be asked, withdraws them from the
 * head when they are this change's own, and throws a retryable error. `leave`: leaves the
 * change's group before it waits to ask again.
 */
async function confirm(repo: Repo, user: string, key: string, adds: Adds, leave: () => void): Promise<void> {
  let why: unknown;
  for (let k = 0; k < SETTLE_ATTEMPTS; k++) {
    try {
      await guardRefs(repo, adds.refs);
      return;
    } catch (e) {
      why = e;
      if (e instanceof GcRefusal) break;
      // a confirmation that must wait and ask again goes on alone (its group's notes go on)
      leave();
      await sleep(backoffMs(k));
    }
  }
  if (adds.ours) await withdraw(repo, user, key, adds.entries);
  throw why instanceof GcRefusal ? why : new ProtocolError(ErrorCode.Internal, `the store could not confirm the new version (${(why as Error).message}); push again`);
}

/** Removes `entries` from the head at `key` if it still holds them. */
async function withdraw(repo: Repo, user: string, key: string, entries: VersionEntry[]): Promise<void> {
  for (let k = 0; ; k++) {
    try {
      let written: FileHead | null = null;
      await updateHead(repo.backend, key, (b) => {
        const h = b && parseFileHead(b, key);
        const versions = h?.versions.filter((v) => !entries.some((e) => sameVersion(v, e)));
        written = h && versions!.length !== h.versions.length ? { ...h, seq: (h.seq ?? 0) + 1, versions: versions! } : null;
        return { body: written && jsonBody(written), result: undefined };
      });
      if (written) await noteInCatalog(repo.backend, user, written, repo.linked).catch(() => {});
      return;
    } catch (e) {
      if (k + 1 >= SETTLE_ATTEMPTS) throw new ProtocolError(ErrorCode.Internal, `the store failed while collecting garbage this version needs, and it could not be withdrawn (${(e as Error).message}); push again`);
      await sleep(backoffMs(k));
    }
  }
}
