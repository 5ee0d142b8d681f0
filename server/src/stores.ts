/**
 * The server's store: one `Store` per user's namespace over one opened `Repo`, and the repo's
 * upkeep while the server runs: background garbage collection every --gc-interval (safe with
 * other processes' commits and collectors, store/gc.ts) and the repair of the marks of head
 * changes a killed process left unlisted (store/journal.ts), at start and then every
 * MARK_REPAIR_INTERVAL_MS.
 */
import type { ServerConfig } from './config.ts';
import { runGc } from './store/gc.ts';
import { MARK_REPAIR_INTERVAL_MS, MARK_SETTLE_MS, repairMarked } from './store/journal.ts';
import type { Repo } from './store/repo.ts';
import { Store } from './store/store.ts';

export class Stores {
  /** one Store a user, kept for its caches (similarity traits) */
  private stores = new Map<string, Store>();
  private collecting: Promise<unknown> | null = null;
  private marking: Promise<unknown> | null = null;
  private gcTimer: NodeJS.Timeout | null;
  private markTimer: NodeJS.Timeout;

  /** Starts the upkeep of `repo`: a first repair of marks now, then the timers. */
  constructor(
    readonly repo: Repo,
    private cfg: Pick<ServerConfig, 'gcIntervalMs' | 'gcMinAgeMs' | 'gcWindowMs' | 'gcRepackPercent' | 'vaultGcGraceMs'>,
    private log: (e: Record<string, unknown>) => void,
  ) {
    this.gcTimer = cfg.gcIntervalMs ? setInterval(() => this.collect(), cfg.gcIntervalMs).unref() : null;
    this.noteMarks(0);
    this.markTimer = setInterval(() => this.noteMarks(MARK_SETTLE_MS), MARK_REPAIR_INTERVAL_MS).unref();
  }

  /** The store of `user`'s namespace (`local` in single-user mode). */
  readonly of = async (user: string): Promise<Store> => {
    let s = this.stores.get(user);
    if (!s) this.stores.set(user, (s = new Store(this.repo, user)));
    return s;
  };

  /** One collection, unless one runs. */
  private collect() {
    const { cfg, log } = this;
    this.collecting ??= runGc(this.repo, { minAgeMs: cfg.gcMinAgeMs, windowMs: cfg.gcWindowMs, repackPercent: cfg.gcRepackPercent, vaultGraceMs: cfg.vaultGcGraceMs, log })
      .catch((e) => log({ gc: 'failed', message: (e as Error).message }))
      .finally(() => (this.collecting = null));
  }

  /** Notes in their folder catalogs the marks at least `minAgeMs` old (their change is no
   *  longer under way), unless a repair runs. */
  private noteMarks(minAgeMs: number) {
    const log = this.log;
    this.marking ??= repairMarked(this.repo, { minAgeMs, log })
      .then(
        (r) => r.noted && log({ event: 'catalogs repaired', ...r }),
        (e) => log({ error: 'journal', message: (e as Error).message }),
      )
      .finally(() => (this.marking = null));
  }

  /** Starts no more collections or repairs. */
  stop() {
    if (this.gcTimer) clearInterval(this.gcTimer);
    clearInterval(this.markTimer);
  }

  /** Stops the upkeep, waits for a collection or repair under way, then closes the repo. */
  async close() {
    this.stop();
    await this.collecting;
    await this.marking;
    await this.repo.close();
  }
}
