/**
 * The page's transfers (uploads and downloads) and their queue, independent of React: the UI
 * subscribes to snapshots (useSyncExternalStore). At most `parallel` transfers run at once in
 * the sync worker; the rest wait, oldest first, so a folder of thousands of files does not open
 * thousands of sockets.
 */
import type { SyncReport } from '../../shared/src/session/delta-client.ts';
import { PAGE_RETRIES } from '../../shared/src/base/limits.ts';
import type { Failure, FromWorker, Guard, Step, Threads, ToWorker } from './worker-api.ts';
import type { PageWorker } from './worker-start.ts';

/** Files under this size run up to SMALL_PARALLEL at once (the `parallel` limit is for larger
 *  ones): a small file's sync is mostly waiting on round trips and the server's commit, so a
 *  folder of tiny files goes as fast as the CLI's one-after-another only when several overlap
 *  (bench/results/tiny-files.md). */
export const SMALL_FILE = 1_000_000;
export const SMALL_PARALLEL = 6;
/** A transfer that lost the server is tried again, by itself, at most this many times. */
export const AUTO_RETRIES = 5;
/** ... this long after it failed, when the server already answers again. */
export const AUTO_RETRY_MS = 2000;

export interface Transfer {
  id: number;
  direction: 'up' | 'down';
  /** the name on the server (folder-relative path for folders) */
  name: string;
  /** bytes of the file being sent or fetched */
  size: number;
  status: 'queued' | 'running' | 'done' | 'failed';
  step?: Step;
  done?: number;
  total?: number;
  report?: SyncReport;
  /** up: the server had a newer version (a conflict copy was made, or nothing was sent) */
  guard?: Guard;
  failure?: Failure;
  /** done: where its sockets and hashing ran (the sync worker's own, or workers it started) */
  threads?: Threads;
  /** when it last started running (ms since the epoch), and its average speed since, in bytes/s */
  startedAt?: number;
  rate?: number;
  /** failed for want of the server: it is tried again when the server is back */
  retryWhenBack?: boolean;
  autoRetries?: number;
  /** down: the version fetched, the local copy it was rebuilt from, the result as an object URL */
  version?: number;
  basisName?: string;
  blobUrl?: string;
}

type Request = Exclude<ToWorker, { kind: 'cancel' | 'wake' }>;

export interface TransfersOptions {
  worker: Pick<PageWorker, 'postMessage' | 'addEventListener' | 'gaveUp'>;
  /** the sync endpoint, ws(s)://host/sync */
  url: string;
  /** this device's label, in the name of a conflict copy an upload makes */
  device: string;
  parallel?: number;
  /** reconnects of an upload after a lost connection before it fails (default PAGE_RETRIES) */
  retries?: number;
  /** a second look at a connection failure (e.g. the server now says "sign in") */
  diagnose?: (f: Failure) => Promise<Failure>;
  /** called once per transfer that ends, for good or not */
  onSettled?: (t: Transfer) => void;
  /** called once by Cancel all with the queued transfers it ended (not through onSettled) */
  onCancelAll?: (ts: Transfer[]) => void;
}

export class Transfers {
  /** newest first */
  private list: readonly Transfer[] = [];
  private requests = new Map<number, Request>();
  private listeners = new Set<() => void>();
  private nextId = 1;
  /** the server's limit (GET /api/config); larger uploads fail before they start */
  maxFileSize = Number.POSITIVE_INFINITY;
  /** the signed-in user (GET /api/whoami): whose known versions the worker uses */
  user = '';
  /** whether the server answers; while it does not, queued transfers wait */
  private reachable = true;
  /** whether the server has us signed in; while it does not, queued transfers wait, and those
   *  it refused go by themselves once signed in */
  private signedInNow = true;
  /** since when the page is away (hidden, frozen, offline; ms since the epoch), else null */
  private awaySince: number | null = null;

  constructor(private readonly opts: TransfersOptions) {
    opts.worker.addEventListener('message', (ev: MessageEvent<FromWorker>) => void this.onMessage(ev.data));
    // a sync worker that never started (worker-start.ts): what runs fails with why, and what
    // is queued would wait on it for ever, so it fails too
    opts.worker.addEventListener('error', (e) => {
      for (const t of this.list) if (t.status === 'running' || t.status === 'queued') this.settle(t.id, { status: 'failed', failure: { kind: 'error', message: e.message } });
    });
  }

  readonly subscribe = (listener: () => void) => {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  };
  readonly snapshot = () => this.list;

  /** Queues uploads; they show in the order given, above earlier transfers. `resume`: earlier
   *  uploads of these files were cut off (unfinished.ts), so the server may hold them. */
  upload(files: { file: File; name: string }[], resume = false) {
    const fresh = files.map(({ file, name }): Transfer => {
      const id = this.nextId++;
      this.requests.set(id, { kind: 'push', id, file, name, url: this.opts.url, retries: this.opts.retries ?? PAGE_RETRIES, user: this.user, device: this.opts.device, ...(resume && { resume }) });
      return { id, direction: 'up', name, size: file.size, status: 'queued' };
    });
    this.add(fresh);
  }

  download(name: string, version: number, size: number, basis: File | null) {
    const id = this.nextId++;
    this.requests.set(id, { kind: 'pull', id, name, version, size, basis, url: this.opts.url, user: this.user });
    this.add([{ id, direction: 'down', name, size, status: 'queued', version, basisName: basis?.name }]);
  }

  get online() {
    return this.reachable;
  }

  /** The server answers again (or no longer): transfers that waited for it go by themselves. */
  setOnline(on: boolean) {
    if (on === this.reachable) return;
    this.reachable = on;
    if (on) for (const t of this.list) if (t.retryWhenBack) this.requeue(t.id, { autoRetries: (t.autoRetries ?? 0) + (this.awaySince === null ? 1 : 0) });
    this.emit();
    this.pump();
  }

  /** The page is hidden, frozen or offline (a phone locked, another app in front): transfers
   *  that lose the server meanwhile are tried again without counting against AUTO_RETRIES. */
  away() {
    this.awaySince ??= Date.now();
  }

  /** The page is back (visible, shown again, online): transfers that lost the server are
   *  tried again at once, their automatic tries counted from zero, and the worker drops the
   *  running transfers' sockets whose link died while the page was away (worker.ts `Job.wake`),
   *  so that they reconnect and resume. */
  back() {
    if (this.awaySince === null) return;
    this.awaySince = null;
    this.opts.worker.postMessage({ kind: 'wake' } satisfies ToWorker);
    for (const t of this.list)
      if (t.status === 'failed' && (t.failure?.kind === 'lost' || t.failure?.kind === 'unreachable')) {
        if (this.reachable) this.requeue(t.id, { autoRetries: 0 });
        else this.update(t.id, { retryWhenBack: true, autoRetries: 0 });
      }
    this.emit();
    this.pump();
  }

  get signedIn() {
    return this.signedInNow;
  }

  /** Signed in (or out): transfers refused for want of a sign-in go again by themselves. */
  setSignedIn(on: boolean) {
    if (on === this.signedInNow) return;
    this.signedInNow = on;
    if (on) for (const t of this.list) if (t.status === 'failed' && t.failure?.kind === 'refused') this.requeue(t.id, { autoRetries: 0 });
    this.emit();
    this.pump();
  }

  /** Cancels every queued and running transfer at once (a wrong drop of thousands of files):
   *  the queued ones end here, the running ones close their sockets in the worker, where the
   *  server drops what they sent (nothing is stored). */
  cancelAll() {
    const cancelled: Failure = { kind: 'cancelled', message: 'cancelled' };
    const running = this.list.filter((t) => t.status === 'running');
    this.opts.onCancelAll?.(this.list.filter((t) => t.status === 'queued'));
    this.list = this.list.map((t) => (t.status === 'queued' ? { ...t, status: 'failed', failure: cancelled, retryWhenBack: undefined } : t));
    for (const t of running) this.opts.worker.postMessage({ kind: 'cancel', id: t.id } satisfies ToWorker);
    this.emit();
  }

  /** A person's retry: the automatic ones count again from zero. */
  retry(id: number) {
    if (this.get(id)?.status !== 'failed') return;
    this.requeue(id, { autoRetries: 0 });
    this.pump();
  }

  /** Retries every failed transfer that a retry can help. */
  retryAll() {
    for (const t of this.list) if (t.status === 'failed' && retriable(t)) this.requeue(t.id, { autoRetries: 0 });
    this.pump();
  }

  private requeue(id: number, patch: Partial<Transfer>) {
    this.update(id, { ...patch, status: 'queued', failure: undefined, retryWhenBack: undefined, step: undefined, done: undefined, total: undefined, rate: undefined });
  }

  cancel(id: number) {
    const t = this.get(id);
    if (t?.status === 'queued') this.settle(id, { status: 'failed', failure: { kind: 'cancelled', message: 'cancelled' } });
    else if (t?.status === 'running') this.opts.worker.postMessage({ kind: 'cancel', id } satisfies ToWorker);
  }

  /** Forgets one transfer that has ended (well or not), or every one when no id is given. */
  dismiss(id?: number) {
    const gone = (t: Transfer) => (id === undefined || t.id === id) && (t.status === 'done' || t.status === 'failed');
    for (const t of this.list) if (gone(t)) this.forget(t);
    this.list = this.list.filter((t) => !gone(t));
    this.emit();
  }

  private forget(t: Transfer) {
    if (t.blobUrl) URL.revokeObjectURL(t.blobUrl);
    this.requests.delete(t.id);
  }

  /** Starts queued transfers, oldest first, while fewer than `parallel` run (SMALL_PARALLEL
   *  for a small file). */
  private pump() {
    let running = this.list.filter((t) => t.status === 'running').length;
    const queued = this.list.filter((t) => t.status === 'queued').sort((a, b) => a.id - b.id);
    for (const t of queued) {
      if (running >= (t.size < SMALL_FILE ? SMALL_PARALLEL : (this.opts.parallel ?? 2)) || !this.reachable || !this.signedInNow) break;
      if (this.opts.worker.gaveUp) {
        this.settle(t.id, { status: 'failed', failure: { kind: 'error', message: this.opts.worker.gaveUp } });
        continue;
      }
      if (t.direction === 'up' && t.size > this.maxFileSize) {
        this.settle(t.id, { status: 'failed', failure: { kind: 'too-large', message: `the server accepts files up to ${this.maxFileSize} bytes` } });
        continue;
      }
      this.update(t.id, { status: 'running', step: 'connecting', startedAt: Date.now() });
      // whose known versions it goes against: the user signed in now, not when it was queued
      // (a file dropped while signed out goes after the sign-in)
      this.opts.worker.postMessage({ ...this.requests.get(t.id)!, user: this.user });
      running++;
    }
  }

  private async onMessage(m: FromWorker) {
    if (this.get(m.id)?.status !== 'running') return;
    if (m.kind === 'progress') {
      const t = { ...this.get(m.id)!, step: m.step, done: m.done, total: m.total };
      const seconds = (Date.now() - (t.startedAt ?? Date.now())) / 1000;
      // an average over half a second or more: steadier than the last interval's
      this.update(m.id, { step: m.step, done: m.done, total: m.total, rate: seconds >= 0.5 ? moved(t) / seconds : undefined });
    }
    else if (m.kind === 'done') {
      this.settle(m.id, { status: 'done', step: 'committed', report: m.report, guard: m.guard, threads: m.threads, blobUrl: m.blob && URL.createObjectURL(m.blob) });
      this.pump();
    } else {
      let failure = m.failure;
      if (this.opts.diagnose && (failure.kind === 'unreachable' || failure.kind === 'lost')) failure = await this.opts.diagnose(failure);
      this.settle(m.id, { status: 'failed', failure });
      this.pump();
    }
  }

  /** Ends a transfer (`patch` says how) and tells onSettled; one that lost the server is
   *  marked to go again when it is back. The caller starts what may run next (`pump`). */
  private settle(id: number, patch: Partial<Transfer>) {
    const kind = patch.failure?.kind;
    // an upload whose connection broke may wait on the server to be resumed: every later try
    // of it says so (Hello's resume flag)
    const req = this.requests.get(id);
    if (kind === 'lost' && req?.kind === 'push') req.resume = true;
    const again = (kind === 'unreachable' || kind === 'lost') && (this.awaySince !== null || (this.get(id)!.autoRetries ?? 0) < AUTO_RETRIES);
    this.update(id, again ? { ...patch, retryWhenBack: true } : patch);
    const ended = this.get(id)!;
    if (again) {
      // the server may answer already (a restart quicker than the page noticed). Every change
      // of a transfer makes a new object: one that changed since (tried again on the server's
      // return, and maybe failed anew with a timer of its own) is no longer this failure's.
      setTimeout(() => {
        if (this.get(id) === ended && this.reachable) {
          this.requeue(id, { autoRetries: (ended.autoRetries ?? 0) + (this.awaySince === null ? 1 : 0) });
          this.pump();
        }
      }, AUTO_RETRY_MS);
    }
    this.opts.onSettled?.(ended);
  }

  private get(id: number) {
    return this.list.find((t) => t.id === id);
  }

  private add(fresh: Transfer[]) {
    this.list = [...fresh, ...this.list];
    this.emit();
    this.pump();
  }

  private update(id: number, patch: Partial<Transfer>) {
    this.list = this.list.map((t) => (t.id === id ? { ...t, ...patch } : t));
    this.emit();
  }

  private emit() {
    for (const l of this.listeners) l();
  }
}

/** How far the step under way is by its byte count, 0..1 (0 for a step without one). */
export const stepFraction = (t: Transfer) => (t.total ? Math.min(1, (t.done ?? 0) / t.total) : 0);

/** Overall progress 0..1: chunking and sending Delta Bytes take the time; the rest is short. */
export function progress(t: Transfer): number {
  if (t.status === 'done') return 1;
  if (t.status === 'queued') return 0;
  const frac = stepFraction(t);
  if (t.direction === 'down') return t.step === 'receiving' ? 0.5 + 0.5 * frac : t.step === 'chunking' ? 0.5 * frac : 0;
  switch (t.step) {
    case 'chunking':
      return 0.45 * frac;
    case 'connecting':
    case 'retrying':
    case 'busy':
      return 0;
    case 'checksums-sent':
      return 0.48;
    case 'tokens-received':
      return 0.5;
    case 'sending':
      return 0.5 + 0.47 * frac;
    case 'delta-sent':
    case 'committed':
      return 0.98;
    default:
      return 0;
  }
}

/** Bytes of the file dealt with so far (its share of the overall progress). */
export const moved = (t: Transfer) => Math.round(progress(t) * t.size);

/** A retry can help: the file is readable and within the server's limit. */
export const retriable = (t: Transfer) => t.failure?.kind !== 'too-large' && t.failure?.kind !== 'unreadable';

/** The order of the page's cards: what is under way or waiting to go and what failed first,
 *  newest first, then the finished ones, newest first; so the newest drop is always on top,
 *  however many failures wait for a retry. */
export function cardOrder(list: readonly Transfer[]): Transfer[] {
  const open = (t: Transfer) => t.status !== 'done';
  return [...list.filter(open), ...list.filter((t) => !open(t))];
}
