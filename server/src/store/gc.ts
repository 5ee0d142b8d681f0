/**
 * Garbage collection by mark and sweep (docs/store.md, "Garbage collection"): what no file
 * head and no interrupted upload references is garbage.
 */
import { randomBytes } from 'node:crypto';
import { Store } from './store.ts';
import type { Repo } from './repo.ts';
import { parseFileHead, parseUploadsHead } from './format.ts';
import { GC_STATE, parseContentKey, parseNsKey } from './keys.ts';
import { DamageError } from './errors.ts';
import { gcStateBody as body, readGcState } from './gc-state.ts';
import { CLOCK_MARGIN_MS, uploadRefs } from './uploads.ts';
import { repack } from './repack.ts';
import { VAULT_GC_GRACE_MS, collectVaultPacks } from './vault-gc.ts';
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
    try {
      const { user, kind } = parseNsKey(e.key);
      const got = await b.getHead(e.key);
      if (!got) continue;
      if (kind === 'files') {
        const head = parseFileHead(got.body, e.key);
        const [folder, base] = splitName(head.name);
        folderOf(user, folder).files.set(base, entryOf(head));
        if (head.versions.length) for (let f = folder; f; ) {
          const [parent, sub] = splitName(f);
          folderOf(user, parent).folders.add(sub);
          f = parent;
        }
        for (const v of head.versions) {
          if (v.repack && !m.indexes.has(v.repack.index)) {
            // a repack under way (repack.ts): its objects are kept until it is finished or
            // dropped; an index of it that is missing or damaged is never used (dropped)
            m.indexes.add(v.repack.index);
            try {
              for (const s of (await repo.readIndex(v.repack.index, `${head.name} version ${v.version} (repacked)`)).layout.segments) m.segments.add(s);
            } catch (err) {
              if (!(err instanceof DamageError)) throw err;
            }
          }
          if (m.indexes.has(v.index)) continue;
          m.indexes.add(v.index);
          let layout;
          const read = () => repo.readIndex(v.index, `${head.name} version ${v.version}`);
          try {
            // read twice before believing damage: a torn read must not free anything
            layout = (await read().catch(read)).layout;
          } catch (err) {
            // an index that does not match its content address names no segments anyone can
            // read: it does not stop the collection (check reports it); a missing one does
            if (!(err instanceof DamageError) || err.missing) throw err;
            m.damaged.push((err as Error).message);
            continue;
          }
          for (const s of layout.segments) m.segments.add(s);
        }
      } else if (kind === 'uploads') {
        // an expired upload can no longer be claimed (with an hour's margin for clocks)
        const live = parseUploadsHead(got.body, e.key).uploads.filter((u) => u.expires + CLOCK_MARGIN_MS > Date.now());
        for (const u of live) for (const s of await uploadRefs(b, u.state)) m.segments.add(s);
      }
    } catch (err) {
      m.unreadable.push(`${e.key}: ${(err as Error).message}`);
    }
  }
  return m;
}

/** Content objects no head references (keys), given marks. A key under `data/` or `index/`
 *  that the store never makes (`parseContentKey`) is not the store's: it is left alone. */
export async function unreferencedBy(repo: Repo, m: Marks): Promise<{ key: string; size: number; modified: number }[]> {
  const out = [];
  for await (const e of repo.backend.list('data/')) {
    const c = parseContentKey(e.key);
    if (c?.kind === 'segment' && !m.segments.has(c.id)) out.push(e);
  }
  for await (const e of repo.backend.list('index/')) {
    const c = parseContentKey(e.key);
    if (c?.kind === 'index' && !m.indexes.has(c.id)) out.push(e);
  }
  return out;
}

/** The keys of content objects nothing references (tests; gc sweeps them). */
export async function unreferenced(repo: Repo): Promise<string[]> {
  return (await unreferencedBy(repo, await mark(repo))).map((e) => e.key);
}

// ---- the collector and its protocol with commits -------------------------------------------

/** How long a collector's non-idle state may stay unchanged before another takes it over. */
export const GC_STALE_MS = 30_000;

/** A collection's settings: the server's and `dsync gc`'s (server/src/config.ts). */
export interface GcOptions {
  /** a content object younger than this is never a candidate (uploads in progress) */
  minAgeMs: number;
  /** the commit window W between condemning and the second mark: a commit that reads the
   *  state meanwhile rescues what it references (safety does not depend on it, §8) */
  windowMs: number;
  /** a collector renews its non-idle state every staleMs / 6 while it works; one left unchanged
   *  this long (by the observer's clock) belongs to a collector that stopped: taken over */
  staleMs?: number;
  /** after a collection, segments with at least this percent of their bytes dead are repacked
   *  (repack.ts; 100: never) */
  repackPercent: number;
  /** a vault's pack no head names is deleted once this old (default VAULT_GC_GRACE_MS) */
  vaultGraceMs?: number;
  log?: (e: Record<string, unknown>) => void;
}

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
  /** the repack after the collection: live bytes copied out of mostly dead segments, and from
   *  how many segments (the next collection deletes those); why it stopped, if it did */
  repacked: number;
  repackedSegments: number;
  /** versions the repack changed: given their new index, or a repack under way finished or
   *  dropped (each leaves garbage for the next collection) */
  repackedVersions: number;
  repackFailed?: string;
  ms: number;
  /** why nothing was collected, when so */
  skipped?: string;
  /** vaults' packs no head names, older than the grace period, deleted with their sums
   *  (collectVaultPacks: its own protocol on each vault's head, whatever the files' collection
   *  does); the vaults left alone, and why; why the vaults' collection failed, if it did */
  vaultPacks: number;
  vaultBytes: number;
  vaultsSkipped: string[];
  vaultsFailed?: string;
}

/**
 * One collection: mark, condemn the unreferenced objects older than minAgeMs, wait the commit
 * window (commits that reference a condemned object rescue it), mark again, delete what is
 * still unreferenced, and return to idle with the next epoch (docs/store.md, "Garbage
 * collection"). Another collector's live state makes this one skip; a stale one is taken over.
 */
export async function runGc(repo: Repo, opts: GcOptions): Promise<GcReport> {
  const o = { staleMs: GC_STALE_MS, ...opts };
  // the collector renews its lease through the window, so the window need not be below staleMs
  for (const k of ['minAgeMs', 'windowMs', 'staleMs'] as const) if (!Number.isSafeInteger(o[k]) || o[k] < 0) throw new RangeError(`gc: ${k} must be a whole number of milliseconds, got ${o[k]}`);
  if (o.staleMs === 0) throw new RangeError('gc: staleMs must be positive');
  if (!Number.isSafeInteger(o.repackPercent) || o.repackPercent < 1 || o.repackPercent > 100) throw new RangeError(`gc: repackPercent must be a whole number from 1 to 100, got ${o.repackPercent}`);
  const t0 = Date.now();
  const report: GcReport = { deleted: 0, bytes: 0, rescued: 0, temporaries: 0, catalogsRepaired: 0, retired: 0, repacked: 0, repackedSegments: 0, repackedVersions: 0, ms: 0, vaultPacks: 0, vaultBytes: 0, vaultsSkipped: [] };
  try {
    const v = await collectVaultPacks(repo.backend, { graceMs: o.vaultGraceMs ?? VAULT_GC_GRACE_MS, log: o.log });
    report.vaultPacks = v.packs;
    report.vaultBytes = v.bytes;
    report.vaultsSkipped = v.skipped;
  } catch (err) {
    report.vaultsFailed = (err as Error).message;
    o.log?.({ gc: 'vault collection failed', message: report.vaultsFailed });
  }
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
      const { user, kind, name } = parseNsKey(e.key);
      if (kind === 'files' && name !== null) report.retired += await new Store(repo, user).retain(name).catch(() => 0);
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
  report.temporaries = (await b.sweepTemporaries?.(o.minAgeMs)) ?? 0;
  // after the sweep, so that what the repack leaves unreferenced stays until the next
  // collection: reads and pushes that began on the old indexes have a whole interval
  try {
    const r = await repack(repo, o.repackPercent, o.log);
    report.repacked = r.bytes;
    report.repackedSegments = r.segments;
    report.repackedVersions = r.versions + r.resolved + r.dropped;
  } catch (err) {
    report.repackFailed = (err as Error).message;
    o.log?.({ gc: 'repack failed', message: report.repackFailed });
  }
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
  const c = parseContentKey(key);
  return c?.kind === 'segment' ? m.segments.has(c.id) : c?.kind === 'index' && m.indexes.has(c.id);
}
