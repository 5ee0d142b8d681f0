/**
 * Garbage collection by mark and sweep (docs/store.md, "Garbage collection"): what no file
 * head and no interrupted upload references is garbage.
 */
import { DEFAULTS, MAX_GC_WINDOW_MS } from '../config.ts';
import type { Repo } from './repo.ts';
import { parseFileHead, parseJson, parseUploadsHead } from './format.ts';
import { randomBytes } from 'node:crypto';
import { ErrorCode, ProtocolError } from '../../../shared/src/protocol.ts';
import { GC_STATE, INDEX_ID, SEGMENT_ID, decodeName } from './keys.ts';
import type { LocalBackend } from './local.ts';
import { uploadRefs } from './uploads.ts';
import { type CatalogEntry, entryOf, repairCatalog, splitName } from './catalog.ts';

export interface Marks {
  indexes: Set<string>;
  segments: Set<string>;
  /** heads or objects that could not be read (they keep what they may reference: nothing is
   *  swept while any is unreadable) */
  unreadable: string[];
  /** version indexes that are damaged (their versions are lost; reported, not blocking) */
  damaged: string[];
  /** the folder catalogs as the file heads say they should be: user → folder → content */
  catalogs: Map<string, Map<string, { files: Map<string, CatalogEntry>; folders: Set<string> }>>;
}

/** An upload whose expiry passed this long ago is no longer marked (clocks of servers differ). */
const EXPIRY_MARGIN_MS = 3_600_000;

/** Every index and segment a file head or an upload references, in every namespace. */
export async function mark(repo: Repo): Promise<Marks> {
  const b = repo.backend;
  const m: Marks = { indexes: new Set(), segments: new Set(), unreadable: [], damaged: [], catalogs: new Map() };
  const folderOf = (user: string, folder: string) => {
    let u = m.catalogs.get(user);
    if (!u) m.catalogs.set(user, (u = new Map()));
    let f = u.get(folder);
    if (!f) u.set(folder, (f = { files: new Map(), folders: new Set() }));
    return f;
  };
  for await (const e of b.list('ns/')) {
    const kind = e.key.split('/')[2];
    try {
      const got = await b.getHead(e.key);
      if (!got) continue;
      if (kind === 'files') {
        const head = parseFileHead(got.body, e.key);
        const user = decodeURIComponent(e.key.split('/')[1]);
        const [folder, base] = splitName(head.name);
        folderOf(user, folder).files.set(base, entryOf(head));
        if (head.versions.length) for (let f = folder; f; ) {
          const [parent, sub] = splitName(f);
          folderOf(user, parent).folders.add(sub);
          f = parent;
        }
        for (const v of head.versions) {
          if (m.indexes.has(v.index)) continue;
          m.indexes.add(v.index);
          let layout;
          const read = () => repo.readIndex(v.index, `${head.name} version ${v.version}`);
          try {
            // read twice before believing damage: a torn read must not free anything
            layout = (await read().catch(read)).layout;
          } catch (err) {
            // an index that does not match its content address names no segments anyone can
            // read: it does not stop the collection (check reports it); anything else does
            if (!/does not match its hash|^damaged store object: version index/.test((err as Error).message)) throw err;
            m.damaged.push((err as Error).message);
            continue;
          }
          for (const s of layout.segments) m.segments.add(s);
        }
      } else if (kind === 'uploads') {
        // an expired upload can no longer be claimed (with an hour's margin for clocks)
        const live = parseUploadsHead(got.body, e.key).uploads.filter((u) => u.expires + EXPIRY_MARGIN_MS > Date.now());
        for (const u of live) for (const s of await uploadRefs(b, u.state)) m.segments.add(s);
      }
    } catch (err) {
      m.unreadable.push(`${e.key}: ${(err as Error).message}`);
    }
  }
  return m;
}

/** Content objects no head references (keys), given marks. */
export async function unreferencedBy(repo: Repo, m: Marks): Promise<{ key: string; size: number; modified: number }[]> {
  const out = [];
  for await (const e of repo.backend.list('data/')) {
    const id = e.key.split('/')[2];
    if (!(SEGMENT_ID.test(id) && m.segments.has(id))) out.push(e);
  }
  for await (const e of repo.backend.list('index/')) {
    const id = e.key.split('/')[2];
    if (!(INDEX_ID.test(id) && m.indexes.has(id))) out.push(e);
  }
  return out;
}

/** The keys of content objects nothing references (tests; gc sweeps them). */
export async function unreferenced(repo: Repo): Promise<string[]> {
  return (await unreferencedBy(repo, await mark(repo))).map((e) => e.key);
}

// ---- the collector and its protocol with commits -------------------------------------------

/** The gc/state head. */
export interface GcState {
  epoch: number;
  phase: 'idle' | 'condemned' | 'deleting';
  /** keys of the content objects condemned (phase condemned) or being deleted */
  candidates: string[];
  /** ms since the epoch when the phase began or its collector last renewed it (Lease) */
  since: number;
  /** the collector that set the phase (random), so a slow one sees it was taken over */
  owner?: string;
}

export interface GcOptions {
  /** a content object younger than this is never a candidate (uploads in progress) */
  minAgeMs: number;
  /** the commit window W between condemning and the second mark: a commit that reads the
   *  state meanwhile rescues what it references (safety does not depend on it, §8) */
  windowMs: number;
  /** a collector renews its non-idle state every staleMs / 6 while it works; one left unchanged
   *  this long (by the observer's clock) belongs to a collector that stopped: taken over */
  staleMs: number;
  log?: (e: Record<string, unknown>) => void;
}
export const GC_DEFAULTS: GcOptions = { minAgeMs: DEFAULTS.gcMinAgeMs, windowMs: DEFAULTS.gcWindowMs, staleMs: 30_000 };

export interface GcReport {
  /** objects and bytes deleted */
  deleted: number;
  bytes: number;
  /** candidates a commit rescued */
  rescued: number;
  /** temporary files of crashed writers removed (local directory) */
  temporaries: number;
  /** folder catalogs brought up to their file heads */
  catalogsRepaired: number;
  /** versions retention removed */
  retired: number;
  ms: number;
  /** why nothing was collected, when so */
  skipped?: string;
}

const IDLE: GcState = { epoch: 0, phase: 'idle', candidates: [], since: 0 };

export function parseGcState(body: Uint8Array | null): GcState {
  if (!body) return IDLE;
  const s = parseJson(body, GC_STATE);
  const ok = s && Number.isSafeInteger(s.epoch) && ['idle', 'condemned', 'deleting'].includes(s.phase) && Array.isArray(s.candidates) && s.candidates.every((k: unknown) => typeof k === 'string' && /^(data|index)\/[0-9a-f]{2}\/[0-9a-f]+$/.test(k)) && Number.isFinite(s.since);
  if (!ok) throw new Error('damaged store object: gc/state');
  return s as GcState;
}

export async function readGcState(repo: Repo): Promise<{ state: GcState; tag: string | null }> {
  const got = await repo.backend.getHead(GC_STATE);
  return { state: parseGcState(got?.body ?? null), tag: got?.tag ?? null };
}

const body = (s: GcState) => Buffer.from(JSON.stringify(s));

/**
 * One collection: mark, condemn the unreferenced objects older than minAgeMs, wait the commit
 * window (commits that reference a condemned object rescue it), mark again, delete what is
 * still unreferenced, and return to idle with the next epoch (docs/store.md, "Garbage
 * collection"). Another collector's live state makes this one skip; a stale one is taken over.
 */
export async function runGc(repo: Repo, opts: Partial<GcOptions> = {}): Promise<GcReport> {
  const o = { ...GC_DEFAULTS, ...opts };
  for (const k of ['minAgeMs', 'windowMs', 'staleMs'] as const) if (!Number.isSafeInteger(o[k]) || o[k] < 0) throw new RangeError(`gc: ${k} must be a whole number of milliseconds, got ${o[k]}`);
  // the collector renews its lease through the window, so the window need not be below staleMs
  if (o.windowMs > MAX_GC_WINDOW_MS) throw new RangeError(`gc: the window (${o.windowMs} ms) must be at most ${MAX_GC_WINDOW_MS} ms`);
  if (o.staleMs === 0) throw new RangeError('gc: staleMs must be positive');
  const t0 = Date.now();
  const report: GcReport = { deleted: 0, bytes: 0, rescued: 0, temporaries: 0, catalogsRepaired: 0, retired: 0, ms: 0 };
  const b = repo.backend;
  let { state, tag } = await readGcState(repo);
  if (state.phase !== 'idle') {
    // Another collector holds the state while it renews it (Lease). One that stopped renewing
    // is taken over once its state stayed unchanged for staleMs, by this process's clock only
    // (servers' clocks differ).
    const seen = tag;
    await new Promise((r) => setTimeout(r, o.staleMs));
    ({ state, tag } = await readGcState(repo));
    if (state.phase !== 'idle' && tag !== seen) return { ...report, skipped: `another collector is ${state.phase} (since ${new Date(state.since).toISOString()})` };
  }
  if (state.phase === 'deleting') {
    // a collector stopped while deleting: its candidates were confirmed garbage; claim the
    // state, finish them under a lease, return to idle
    const owner = randomBytes(8).toString('hex');
    tag = await b.putHead(GC_STATE, body({ ...state, since: Date.now(), owner }), tag);
    if (!tag) return { ...report, ms: Date.now() - t0, skipped: 'another collector took over' };
    const lease = new Lease(repo, owner, tag, o.staleMs);
    try {
      for (const k of state.candidates) {
        if (!lease.held()) return { ...report, ms: Date.now() - t0, skipped: 'lost its lease while deleting' };
        await b.delete(k);
        report.deleted++;
      }
      tag = await lease.exclusive(() => b.putHead(GC_STATE, body({ epoch: state.epoch + 1, phase: 'idle', candidates: [], since: Date.now() }), lease.tag));
    } finally {
      lease.stop();
    }
    if (!tag) return { ...report, ms: Date.now() - t0, skipped: 'another collector took over' };
    state = { epoch: state.epoch + 1, phase: 'idle', candidates: [], since: Date.now() };
  }
  // retention applies to files no commit touched lately, too
  if (repo.settings.keepVersions || repo.settings.keepDays) {
    for await (const e of b.list('ns/')) {
      const [, user, kind] = e.key.split('/');
      const name = kind === 'files' ? decodeName(e.key.split('/').slice(3).join('/')) : null;
      if (name !== null) report.retired += await repo.ns(decodeURIComponent(user)).retain(name).catch(() => 0);
    }
  }
  const first = await mark(repo);
  // the folder catalogs are brought up to the heads (a crash between a head swap and its
  // catalog's leaves one behind)
  for (const [user, folders] of first.catalogs) for (const [folder, c] of folders) if (await repairCatalog(b, user, folder, c.files, c.folders)) report.catalogsRepaired++;
  if (first.unreadable.length) return { ...report, ms: Date.now() - t0, skipped: `unreadable heads or indexes (run check): ${first.unreadable.slice(0, 3).join('; ')}` };
  const now = Date.now();
  const condemned = (await unreferencedBy(repo, first)).filter((e) => now - e.modified >= o.minAgeMs);
  const sizes = new Map(condemned.map((e) => [e.key, e.size]));
  const epoch = state.epoch;
  const owner = randomBytes(8).toString('hex');
  tag = await b.putHead(GC_STATE, body({ epoch, phase: 'condemned', candidates: condemned.map((e) => e.key), since: Date.now(), owner }), tag);
  if (!tag) return { ...report, ms: Date.now() - t0, skipped: 'another collector started' };
  const lease = new Lease(repo, owner, tag, o.staleMs);
  try {
    o.log?.({ gc: 'condemned', epoch, candidates: condemned.length });
    await new Promise((r) => setTimeout(r, o.windowMs));
    const second = await mark(repo);
    // the candidates left after rescues, minus what the second mark found referenced
    const doomed = await lease.exclusive(async () => {
      for (;;) {
        const cur = await readGcState(repo);
        if (cur.state.phase !== 'condemned' || cur.state.owner !== owner) return null;
        const doomed = second.unreadable.length ? [] : cur.state.candidates.filter((k) => !isMarked(second, k));
        report.rescued = condemned.length - cur.state.candidates.length;
        const t = await b.putHead(GC_STATE, body({ epoch, phase: 'deleting', candidates: doomed, since: Date.now(), owner }), cur.tag);
        if (!t) continue; // a rescue landed meanwhile
        lease.tag = t;
        return doomed;
      }
    });
    if (!doomed) return { ...report, ms: Date.now() - t0, skipped: 'taken over by another collector' };
    for (const k of doomed) {
      // a collector that may have been taken over deletes nothing more
      if (!lease.held()) return { ...report, ms: Date.now() - t0, skipped: 'lost its lease while deleting' };
      await b.delete(k);
      report.deleted++;
      report.bytes += sizes.get(k) ?? 0;
    }
    const done = await lease.exclusive(() => b.putHead(GC_STATE, body({ epoch: epoch + 1, phase: 'idle', candidates: [], since: Date.now() }), lease.tag));
    if (!done) return { ...report, ms: Date.now() - t0, skipped: 'taken over by another collector while deleting' };
  } finally {
    lease.stop();
  }
  if ('sweepTemporaries' in b) report.temporaries = await (b as LocalBackend).sweepTemporaries(o.minAgeMs);
  report.ms = Date.now() - t0;
  o.log?.({ gc: 'done', ...report });
  return report;
}

/**
 * A collector's hold on gc/state while its state is not idle: every staleMs / 6 it renews the
 * state's `since` by compare-and-swap (so the state's tag changes), and another collector
 * takes over only a state it saw unchanged for staleMs. A renewal that finds the state no
 * longer its own, or that has not landed for staleMs / 2, means the lease may be lost: the
 * collector then deletes nothing more (`held`). The collector's own swaps of the state go
 * through `exclusive`, one at a time with the renewals, and keep `tag` current.
 */
class Lease {
  /** performance.now() when the last renewal that landed began */
  private renewedAt = performance.now();
  private lost = false;
  private renewing = false;
  private stopped = false;
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout;

  constructor(
    private repo: Repo,
    private owner: string,
    /** the state's current tag */
    public tag: string,
    private staleMs: number,
  ) {
    this.timer = setInterval(() => {
      // one renewal at a time: a slow store does not pile them up
      if (this.renewing) return;
      this.renewing = true;
      void this.exclusive(() => this.renew()).finally(() => (this.renewing = false));
    }, staleMs / 6);
    this.timer.unref();
  }

  /** Runs `fn` when no renewal or other swap of the state is under way. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.chain.then(fn);
    this.chain = p.catch(() => {});
    return p;
  }

  /** Whether the state is still this collector's: no other collector can have taken it over
   *  (it would have to see it unchanged for staleMs since the last renewal began). */
  held(): boolean {
    return !this.lost && performance.now() - this.renewedAt < this.staleMs / 2;
  }

  stop() {
    this.stopped = true;
    clearInterval(this.timer);
  }

  private async renew() {
    if (this.stopped) return;
    const began = performance.now();
    try {
      for (;;) {
        const { state, tag } = await readGcState(this.repo);
        if (state.phase === 'idle' || state.owner !== this.owner) {
          this.lost = true;
          return;
        }
        const t = await this.repo.backend.putHead(GC_STATE, body({ ...state, since: Date.now() }), tag);
        if (t) {
          this.tag = t;
          this.renewedAt = began;
          return;
        }
        // a commit's rescue landed: read again
      }
    } catch {
      // the store failed: the lease runs out unless a later renewal lands
    }
  }
}

function isMarked(m: Marks, key: string) {
  const [kind, , id] = key.split('/');
  return kind === 'data' ? m.segments.has(id) : m.indexes.has(id);
}

/** The current gc epoch. A session reads it before it writes its first object: what it writes
 *  is then known to exist at that epoch (docs/store.md §8). */
export async function gcEpoch(repo: Repo): Promise<number> {
  return (await readGcState(repo)).state.epoch;
}

/**
 * The content objects a head change adds references to, each with the epoch at which it is
 * known to have existed: a moment when gc/state's epoch was at least that (docs/store.md §8).
 */
export type Refs = Map<string, number>;

/** Adds `key`, known at `epoch`, to `refs` (the lowest epoch wins). */
export function addRef(refs: Refs, key: string, epoch: number): void {
  const had = refs.get(key);
  if (had === undefined || epoch < had) refs.set(key, epoch);
}

/** The epoch all of `refs` are known at (the lowest). */
export function knownAt(refs: Refs): number {
  let min = Infinity;
  for (const e of refs.values()) min = Math.min(min, e);
  return min;
}

/** A head change that adds references refused by the collector (retryable: nothing is lost). */
export class GcRefusal extends ProtocolError {
  constructor(why: string) {
    super(ErrorCode.Internal, why);
  }
}

/**
 * A head change's part of the protocol with the collector (docs/store.md §8), run just before
 * its swap and again once the swap has landed, before the change is reported done: reads
 * gc/state; rescues the references that are condemned (compare-and-swap, serialised with the
 * collector's swap to deleting); refuses (GcRefusal) when one is being deleted; and checks that
 * each reference known only from an epoch before the state's still exists (refuses if not).
 * Returns the references' epochs brought up to date (an object found to exist now is known at
 * the state's epoch) and when the state was read.
 */
export async function guardRefs(repo: Repo, refs: Refs): Promise<{ refs: Refs; readAt: number }> {
  for (;;) {
    const readAt = Date.now();
    const { state, tag } = await readGcState(repo);
    if (state.phase !== 'idle') {
      const hits = new Set(state.candidates.filter((k) => refs.has(k)));
      if (hits.size && state.phase === 'deleting') throw new GcRefusal('the store is collecting garbage this version needs; push again');
      if (hits.size) {
        const t = await repo.backend.putHead(GC_STATE, body({ ...state, candidates: state.candidates.filter((k) => !hits.has(k)) }), tag);
        if (!t) continue; // the state moved: look again
      }
    }
    const now: Refs = new Map(refs);
    for (const [k, e] of refs) {
      if (e >= state.epoch) continue;
      if ((await repo.backend.size(k)) === null) throw new GcRefusal(`the store collected ${k}, which this version needs; push again`);
      now.set(k, state.epoch);
    }
    return { refs: now, readAt };
  }
}
