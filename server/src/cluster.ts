/**
 * `dsync serve --workers N`: N server processes on one port (node:cluster). The primary process
 * serves nothing itself: it forks the workers, which share its listening socket (the primary
 * hands out connections round-robin), restarts a worker that dies, and passes SIGINT/SIGTERM
 * on so that every worker closes cleanly.
 *
 * Every worker is a whole server: the store is shared through the backend (safe for several
 * processes, docs/store.md), while what a server keeps in memory is its own: the counts behind
 * maxConnections and maxSessionsPerUser, the page's login sessions, and the chunk-index caches.
 *
 * The default is 1 worker, i.e. the plain single process: its limits, memory and logs are those
 * of one process, as an operator who has not asked for more expects. `--workers 0` starts one
 * worker per core.
 */
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';

/** A worker that dies is restarted after this delay, doubled at each death in a row... */
const RESTART_DELAY_MS = 100;
/** ...up to this much, */
const RESTART_DELAY_MAX_MS = 30_000;
/** ...and back to the first delay once a worker has lived this long. */
const HEALTHY_AFTER_MS = 60_000;
/** On SIGINT/SIGTERM, workers still running after this long are killed. */
const STOP_GRACE_MS = 10_000;

/** The number of worker processes `--workers` asks for: 0 is one per core. */
export function workerCount(workers: number): number {
  if (!Number.isSafeInteger(workers) || workers < 0) throw new Error(`--workers must be a whole number, got ${workers}`);
  return workers === 0 ? availableParallelism() : workers;
}

/** True in a process forked by `superviseWorkers`. */
export const inWorker = (): boolean => cluster.isWorker;

/**
 * In the first process of `dsync serve --workers N` with N > 1: forks the workers, supervises
 * them until SIGINT/SIGTERM, and returns true; the caller then serves nothing. Returns false in
 * a worker and when one process is asked for: the caller serves.
 */
export function superviseWorkers(cfg: { workers: number; host: string }, log: (e: Record<string, unknown>) => void): boolean {
  const n = workerCount(cfg.workers);
  if (cluster.isWorker || n === 1) return false;

  let stopping = false;
  let failed = false;
  let announced = false;
  const listening = new Set<number>();
  /** per worker slot: consecutive deaths and the time its current worker started */
  const slots = Array.from({ length: n }, () => ({ deaths: 0, started: 0 }));
  const slotOf = new Map<Worker, number>();

  const fork = (slot: number) => {
    const w = cluster.fork();
    slotOf.set(w, slot);
    slots[slot].started = Date.now();
  };

  cluster.on('listening', (w, address) => {
    listening.add(w.id);
    if (announced || listening.size < n) return;
    announced = true;
    const host = cfg.host === '0.0.0.0' || cfg.host === '::' ? '127.0.0.1' : cfg.host;
    console.log(`dsync server on http://${host}:${address.port} (${n} workers)`);
  });

  cluster.on('exit', (w, code, signal) => {
    const slot = slotOf.get(w)!;
    slotOf.delete(w);
    listening.delete(w.id);
    if (!announced && !stopping) {
      // A worker that cannot start (a bad setting, an unreachable store) has said why on
      // stderr; the others would fail alike, so the command fails as one process would.
      failed = true;
      stop('SIGTERM');
    }
    if (stopping) {
      if (slotOf.size === 0) process.exit(failed ? 1 : 0);
      return;
    }
    const s = slots[slot];
    if (Date.now() - s.started >= HEALTHY_AFTER_MS) s.deaths = 0;
    const delay = Math.min(RESTART_DELAY_MS * 2 ** s.deaths, RESTART_DELAY_MAX_MS);
    s.deaths++;
    log({ event: 'worker-exit', pid: w.process.pid, code, signal, restartInMs: delay });
    setTimeout(() => stopping || fork(slot), delay).unref();
  });

  const stop = (sig: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    for (const w of slotOf.keys()) w.process.kill(sig);
    if (slotOf.size === 0) process.exit(failed ? 1 : 0);
    setTimeout(() => {
      for (const w of slotOf.keys()) w.process.kill('SIGKILL');
    }, STOP_GRACE_MS).unref();
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));

  for (let i = 0; i < n; i++) fork(i);
  return true;
}
