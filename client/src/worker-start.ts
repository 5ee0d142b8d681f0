/**
 * The workers the sync worker starts (the socket worker, hash workers) say `WORKER_READY` first
 * thing: Firefox ESR now and then never runs a module worker it was asked to start (no error
 * event, no message: 1 of 60 started from a page here), and a socket or a hash waiting on it
 * would wait for ever. One that has not said so within WORKER_START_MS is given up, and the
 * sync worker does its work itself, as where a worker cannot start workers.
 */
export const WORKER_READY = 'dsync-worker-ready';
/** Generous: a worker starts in well under a second, a loaded phone's in a few. */
export const WORKER_START_MS = 10_000;
