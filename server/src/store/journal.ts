/**
 * Marks of head changes (docs/store.md §11, "A commit is listed or repaired"): a file head
 * change writes a small object `journal/<32 hex>` naming the file before its swap, and deletes
 * it once the folder catalog has noted the swap. A process killed between the two leaves the
 * mark; every server notes the head of each marked name in its folder's catalog when it
 * starts and then once a minute (`repairMarked`), so a commit never stays unlisted until gc.
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
import { MAX_NAME_BYTES } from '../../../shared/src/limits.ts';
import { checkedName } from '../../../shared/src/names.ts';

export const JOURNAL_PREFIX = 'journal/';
/** A mark this old is deleted by whoever notes it: no head change runs this long (every store
 *  operation has its deadline, 20 s by default). */
export const MARK_STALE_MS = 10 * 60_000;
/** How often a server notes the marks other processes left (each pass is one listing). */
export const MARK_REPAIR_INTERVAL_MS = 60_000;
/** A mark younger than this is skipped by the periodic pass: its change is most likely under way. */
export const MARK_SETTLE_MS = 30_000;
/** The largest mark body read (a user and a name, JSON). */
const MAX_MARK_BYTES = 4 * MAX_NAME_BYTES + 1024;

const newMarkKey = () => JOURNAL_PREFIX + randomBytes(16).toString('hex');
const MARK_KEY = /^journal\/[0-9a-f]{32}$/;

/** Writes a mark of a change of `user`'s file `name`; resolves to its key once it is durable. */
export async function putMark(backend: Backend, user: string, name: string): Promise<string> {
  const key = newMarkKey();
  if (!(await backend.putIfAbsent(key, Buffer.from(JSON.stringify({ user, name }))))) throw new Error(`${key} exists already`);
  return key;
}

/** Deletes a mark, in the background: a mark left behind costs one catalog note later. */
export function dropMark(backend: Backend, key: string): void {
  void backend.delete(key).catch(() => {});
}

/** A mark's body, validated (every byte of the store is checked as input), or null. */
export function parseMark(body: Uint8Array): { user: string; name: string } | null {
  if (body.length > MAX_MARK_BYTES) return null;
  let m: unknown;
  try {
    m = JSON.parse(Buffer.from(body).toString('utf8'));
  } catch {
    return null;
  }
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
      const m = MARK_KEY.test(e.key) ? parseMark(await b.get(e.key)) : null;
      if (m) {
        const key = fileHeadKey(m.user, m.name);
        const got = await readHead(b, key);
        if (got && (await noteLagging(b, m.user, parseFileHead(got.body, key), repo.linked))) {
          report.noted++;
          o.log?.({ event: 'catalog repaired', user: m.user, name: m.name });
        }
      }
      if (!m || now - e.modified >= MARK_STALE_MS) {
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
