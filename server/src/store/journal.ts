/**
 * Marks of head changes (docs/store.md §11, "A commit is listed or repaired"): a file head
 * change writes a small object `journal/<32 hex>` naming the file before its swap, and deletes
 * it once the folder catalog has noted the swap. A process killed between the two leaves the
 * mark; every server notes the head of each marked name in its folder's catalog when it
 * starts and then once a minute (`repairMarked`), so a commit never stays unlisted until gc.
 *
 * Changes that ask for a mark while this process is writing one share the next (a group, at
 * most MARK_GROUP_MAX names): one object naming all their files, written once the one under
 * way is durable (no timer: a lone change's mark is written at once). The group's mark is
 * deleted once every change in it is done and noted; a change whose note failed keeps it.
 * Noting a head is a merge by `seq` (catalog.ts), harmless when the catalog already has it, so
 * a mark of a change still under way in another process may be noted too; only marks older
 * than MARK_STALE_MS are deleted by others, so a live writer's mark stays until it is done.
 */
import { randomBytes } from 'node:crypto';
import type { Backend } from './backend.ts';
import { noteInCatalog, readCatalog, splitName } from './catalog.ts';
import { type FileHead, parseFileHead } from './format.ts';
import { readHead } from './heads.ts';
import { encodeUser, fileHeadKey } from './keys.ts';
import type { Repo } from './repo.ts';
import { BULK_ENTRIES, MAX_NAME_BYTES } from '../../../shared/src/base/limits.ts';
import { checkedName } from '../../../shared/src/wire/names.ts';

export const JOURNAL_PREFIX = 'journal/';
/** A mark this old is deleted by whoever notes it: no head change runs this long (every store
 *  operation has its deadline, 20 s by default). */
export const MARK_STALE_MS = 10 * 60_000;
/** How often a server notes the marks other processes left (each pass is one listing). */
export const MARK_REPAIR_INTERVAL_MS = 60_000;
/** A mark younger than this is skipped by the periodic pass: its change is most likely under way. */
export const MARK_SETTLE_MS = 30_000;
/** The most names one mark carries (changes that ask for a mark at once share one): a bulk
 *  upload's entries (BULK_ENTRIES) are one group. */
export const MARK_GROUP_MAX = BULK_ENTRIES;
/** The largest mark body read (MARK_GROUP_MAX users and names, JSON). */
const MAX_MARK_BYTES = MARK_GROUP_MAX * (4 * MAX_NAME_BYTES + 1024);

const newMarkKey = () => JOURNAL_PREFIX + randomBytes(16).toString('hex');
const MARK_KEY = /^journal\/[0-9a-f]{32}$/;

/** A file a mark names. */
export interface Marked {
  user: string;
  name: string;
}

/** A written mark as one change of its group holds it (`putMark`, `dropMark`). */
export interface Mark {
  key: string;
  /** the group's changes not yet done with it (shared by the group) */
  group: { open: number; kept: boolean };
}

/** Per backend: the mark being written, and the changes waiting for the next. */
const groups = new WeakMap<Backend, { writing: boolean; soon: boolean; queue: { m: Marked; ok: (k: Mark) => void; fail: (e: unknown) => void }[] }>();

/** Writes the next group's mark once the changes that ask in this turn of the event loop have
 *  asked (setImmediate: no wait beyond it), unless one is being written: then once it is. */
function writeSoon(backend: Backend): void {
  const g = groups.get(backend)!;
  if (g.writing || g.soon) return;
  g.soon = true;
  setImmediate(() => {
    g.soon = false;
    writeGroups(backend);
  });
}

/** Writes the next group's mark, then the one after, while changes wait. */
function writeGroups(backend: Backend): void {
  const g = groups.get(backend)!;
  if (g.writing || !g.queue.length) return;
  const batch = g.queue.splice(0, MARK_GROUP_MAX);
  g.writing = true;
  const key = newMarkKey();
  const body = batch.length === 1 ? batch[0].m : { heads: batch.map((w) => w.m) };
  backend
    .putIfAbsent(key, Buffer.from(JSON.stringify(body)))
    .then(
      (made) => {
        if (!made) throw new Error(`${key} exists already`);
        const group = { open: batch.length, kept: false };
        for (const w of batch) w.ok({ key, group });
      },
      (e) => {
        for (const w of batch) w.fail(e);
      },
    )
    .catch((e) => {
      for (const w of batch) w.fail(e);
    })
    .finally(() => {
      g.writing = false;
      writeGroups(backend);
    });
}

/** Writes a mark of a change of `user`'s file `name` (shared with the changes asking at the
 *  same moment); resolves once it is durable. */
export function putMark(backend: Backend, user: string, name: string): Promise<Mark> {
  let g = groups.get(backend);
  if (!g) groups.set(backend, (g = { writing: false, soon: false, queue: [] }));
  const q = g.queue;
  return new Promise<Mark>((ok, fail) => {
    q.push({ m: { user, name }, ok, fail });
    writeSoon(backend);
  });
}

/** One change of a mark's group is done: `noted` when its catalog noted its swap (or it never
 *  swapped), else the mark stays for the next pass over the marks. The last change of a group
 *  deletes the mark, in the background, unless one kept it (a mark left behind costs a catalog
 *  note later). */
export function dropMark(backend: Backend, mark: Mark, noted = true): void {
  if (!noted) mark.group.kept = true;
  if (--mark.group.open > 0 || mark.group.kept) return;
  void backend.delete(mark.key).catch(() => {});
}

/** A mark's names, validated (every byte of the store is checked as input), or null. A mark
 *  names one file (`{user, name}`) or a group of them (`{heads: [{user, name}, …]}`). */
export function parseMark(body: Uint8Array): Marked[] | null {
  if (body.length > MAX_MARK_BYTES) return null;
  let m: unknown;
  try {
    m = JSON.parse(Buffer.from(body).toString('utf8'));
  } catch {
    return null;
  }
  const heads = (m ?? {}) as { heads?: unknown };
  const list: unknown[] = Array.isArray(heads.heads) ? heads.heads : [m];
  if (!list.length || list.length > MARK_GROUP_MAX) return null;
  const out: Marked[] = [];
  for (const x of list) {
    const one = oneMarked(x);
    if (!one) return null;
    out.push(one);
  }
  return out;
}

function oneMarked(m: unknown): Marked | null {
  const { user, name } = (m ?? {}) as { user?: unknown; name?: unknown };
  // a name the server would refuse from a client is refused from the store too
  if (typeof user !== 'string' || typeof name !== 'string' || checkedName(name) !== name) return null;
  try {
    encodeUser(user);
  } catch {
    return null;
  }
  return { user, name };
}

export interface MarkReport {
  /** marks looked at */
  marks: number;
  /** folder catalogs that lagged their file head and were brought up to it */
  noted: number;
  /** marks deleted (older than MARK_STALE_MS, or not a mark the store makes) */
  dropped: number;
}

/**
 * Notes in its folder's catalog the file head of every marked name (a merge by seq: a catalog
 * already up to date is left as it is), then deletes the marks older than MARK_STALE_MS.
 * `minAgeMs`: marks younger than this are left for their writer. A failure of one mark is
 * logged and the rest go on; the listing's failure is thrown.
 */
export async function repairMarked(repo: Repo, o: { minAgeMs?: number; log?: (e: Record<string, unknown>) => void } = {}): Promise<MarkReport> {
  const b = repo.backend;
  const report: MarkReport = { marks: 0, noted: 0, dropped: 0 };
  const now = Date.now();
  for await (const e of b.list(JOURNAL_PREFIX)) {
    if (now - e.modified < (o.minAgeMs ?? 0)) continue;
    report.marks++;
    try {
      const ms = MARK_KEY.test(e.key) ? parseMark(await b.get(e.key)) : null;
      for (const m of ms ?? []) {
        const key = fileHeadKey(m.user, m.name);
        const got = await readHead(b, key);
        if (got && (await noteLagging(b, m.user, parseFileHead(got.body, key), repo.linked))) {
          report.noted++;
          o.log?.({ event: 'catalog repaired', user: m.user, name: m.name });
        }
      }
      if (!ms || now - e.modified >= MARK_STALE_MS) {
        await b.delete(e.key);
        report.dropped++;
      }
    } catch (err) {
      o.log?.({ error: 'journal', key: e.key, message: (err as Error).message });
    }
  }
  return report;
}

/** Notes `head` in its folder's catalog and links its folder into its ancestors (a crash may
 *  have come between those too); whether the catalog's entry lagged the head. */
async function noteLagging(backend: Backend, user: string, head: FileHead, linked: Set<string>): Promise<boolean> {
  const [folder, base] = splitName(head.name);
  const had = (await readCatalog(backend, user, folder)).files[base];
  await noteInCatalog(backend, user, head, new Set(linked));
  return !had || had.seq < (head.seq ?? 0);
}
