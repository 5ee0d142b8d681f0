/**
 * The workers the sync worker starts (the socket worker, hash workers) say `WORKER_READY` first
 * thing: Firefox ESR now and then never starts a module worker started from a worker (no error
 * event, no message: in e2e/engines/first-pick.ts the socket worker of about one first pick in
 * fifteen), and a socket or a hash waiting on it waited for ever. One that has not said so
 * within WORKER_START_MS is given up, and the sync worker does its work itself, as where a
 * worker cannot start workers.
 */
export const WORKER_READY = 'dsync-worker-ready';
/** Generous: a worker starts in well under a second, a loaded phone's in a few. */
export const WORKER_START_MS = 10_000;
