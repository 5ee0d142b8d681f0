/**
 * Messages between the page and the sync worker (client/src/worker.ts). One worker runs every
 * transfer of the page; each request carries an id, and every answer names the request's id.
 */
import type { Progress, SyncReport } from '../../shared/src/session/delta-client.ts';

export type ToWorker =
  /** upload `file` as a new version of `name`; `resume`: an earlier try of it was cut off (the
   *  server may hold its interrupted upload: Hello's resume flag) */
  | { kind: 'push'; id: number; file: File; name: string; url: string; retries: number; user: string; device: string; resume?: boolean }
  /** download `version` of `name`, as a delta of `basis` when one is given */
  | { kind: 'pull'; id: number; name: string; version: number; size: number; basis: File | null; url: string; user: string }
  | { kind: 'cancel'; id: number }
  /** the page is back (visible, shown, online) after it was away: running transfers' sockets
   *  are watched, and one that stays silent is taken for dead (worker.ts `Job.wake`) */
  | { kind: 'wake' };

/**
 * Where a transfer is: the sync client's phases, plus the two the worker can measure itself:
 * `sending` (Phase 3 of a push: `done` = how far into the file the Delta Bytes have got) and
 * `receiving` (a pull: bytes of the rebuilt file so far). `chunking` and `retrying` also carry
 * done/total (bytes chunked; attempt of retries).
 */
export type Step = Progress | 'sending' | 'receiving';

/** Why a transfer failed, as far as the worker can tell. */
export type FailureKind =
  /** no connection could be opened */
  | 'unreachable'
  /** the connection broke after it was open (retries included) */
  | 'lost'
  /** the server refused: not signed in, or no permission */
  | 'refused'
  /** a server limit (file size, chunk count, sessions) */
  | 'limit'
  /** the file could not be read on this device (moved, changed or not permitted) */
  | 'unreadable'
  /** another version landed in between */
  | 'stale'
  | 'cancelled'
  /** (decided by the page, before any transfer) larger than the server's maxFileSize */
  | 'too-large'
  /** anything else the server or the protocol reported */
  | 'error';

export interface Failure {
  kind: FailureKind;
  /** the underlying message, for the details line */
  message: string;
}

/** An upload that met a newer version on the server (shared/src/sync/guarded-push.ts): `conflict`,
 *  its bytes went up as `savedAs` and the server's version kept the name; `behind`, the file
 *  was unchanged since the version the page knew (`known`) and nothing was sent. */
export interface Guard {
  kind: 'conflict' | 'behind';
  known: number | null;
  /** the server's latest version and who made it, when it could be asked */
  server?: { version: number; client?: string };
  savedAs?: string;
}

/** Where a transfer's sockets and hashing ran: in workers the sync worker started, or in the
 *  sync worker itself, where a browser cannot start workers from a worker (Safari before 15,
 *  some WebViews) or they failed to start. */
export interface Threads {
  /** its sockets ran in the socket worker (worker-socket.ts); false: in the sync worker */
  socketWorker: boolean;
  /** hash workers that hashed its chunks (files of OFF_THREAD_MIN and more); 0: the sync worker did */
  hashWorkers: number;
}

export type FromWorker =
  | { kind: 'progress'; id: number; step: Step; done?: number; total?: number }
  | { kind: 'done'; id: number; report?: SyncReport; blob?: Blob; guard?: Guard; threads?: Threads }
  | { kind: 'failed'; id: number; failure: Failure };
