/**
 * What the store needs of the place it keeps its objects (docs/store.md, "Backends"). Two
 * implementations: a local directory (local.ts) and any S3-compatible object store (s3.ts).
 * The store's logic is written once, over this interface, as restic's repository is written
 * over its backends.
 *
 * Keys are '/'-separated strings of [A-Za-z0-9_.%-] components, none of them "." or "..";
 * the store builds them (keys.ts) and a backend may rely on that.
 *
 * Two kinds of object live in a backend:
 * - content objects, written once with `putIfAbsent` and never changed (segments, indexes);
 * - heads, small objects changed only by compare-and-swap (`putHead` with the tag that
 *   `getHead` returned), so two processes on one store never lose each other's update.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';

export interface Backend {
  /** A short description for logs: "dir /srv/dsync", "s3://bucket/prefix at http://…". */
  readonly where: string;

  /**
   * Writes a content object unless one exists under `key`. Returns false (and writes
   * nothing) when it exists. The object is durable once the promise resolves, and a reader
   * sees either no object or all of `body`, never a part. `stamped`, when given, is told the
   * stamp (see `stamp`) of the object written, if the write tells it (S3: the ETag the PUT
   * returns; a local file written a moment ago has none, its change time being too recent).
   */
  putIfAbsent(key: string, body: Uint8Array, stamped?: (stamp: string) => void): Promise<boolean>;

  /**
   * Bytes [offset, offset + length) of an object (the whole object without a range). Throws
   * NotFoundError when there is no object under `key`. Returns fewer bytes only when the object
   * is shorter; the caller decides whether that is damage.
   */
  get(key: string, range?: { offset: number; length: number }): Promise<Uint8Array>;

  /** `get`, with the object's stamp (see `stamp`) as of the bytes returned. */
  getStamped(key: string, range?: { offset: number; length: number }): Promise<{ body: Uint8Array; stamp: string | null }>;

  /**
   * A string that changes whenever the bytes of the object under `key` change, so that a
   * cache of what was verified can tell it still holds (docs/store.md, "Integrity"); null
   * when there is no object, or when no such string can be given now. S3: the ETag. Local
   * directory: device, inode, size, modification and change times (ns), or null while the
   * change time is too recent to tell a later write in the same timestamp tick apart.
   */
  stamp(key: string): Promise<string | null>;

  /** `stamp` of each of `keys`, all under `prefix`, in order. S3 lists the prefix (one request
   *  for up to 1 000 objects, a HEAD each for the rest of a longer listing) when more than one
   *  key is asked; a local directory stats each. */
  stamps(prefix: string, keys: string[]): Promise<(string | null)[]>;

  /** The object's size in bytes, or null when it does not exist. */
  size(key: string): Promise<number | null>;

  /** A head and its tag (the S3 ETag; the generation on a local directory), or null. */
  getHead(key: string): Promise<{ body: Uint8Array; tag: string } | null>;

  /**
   * Compare-and-swap of a head: writes `body` only if the head's tag is still `tag` (`null`:
   * only if there is no head yet). Returns the new tag, or null when another writer got there
   * first (S3: 412 PreconditionFailed); the caller reads the head again and retries.
   */
  putHead(key: string, body: Uint8Array, tag: string | null): Promise<string | null>;

  /** Keys under `prefix`, in ascending byte order, starting after `after`; with each
   *  object's size and last modification time, and a head's tag where the listing shows it. */
  list(prefix: string, opts?: { after?: string; limit?: number }): AsyncIterable<ListEntry>;

  /** Removes an object or a head; removing what is not there is not an error. */
  delete(key: string): Promise<void>;

  /** Releases connections and handles. */
  close(): Promise<void>;

  /** Removes what crashed writers left that is older than `olderThanMs` (temporary files of a
   *  local directory; gc calls it); returns how many. Absent where writes leave nothing (S3). */
  sweepTemporaries?(olderThanMs: number): Promise<number>;
}

export interface ListEntry {
  key: string;
  size: number;
  /** milliseconds since the epoch */
  modified: number;
  /** the tag `getHead` would return for the object listed (a head: its generation on a local
   *  directory; S3: the ETag of any object), when the listing tells it. Two listings that show
   *  one key with the same tag, size and time show the same bytes: a local generation is
   *  written once and never reused (an empty one marks a delete), and an ETag is the MD5 of
   *  the bytes of a plain PutObject. */
  tag?: string;
}

/** Writes a new content object (a segment) under a key no other object may hold; an object
 *  already there (an id taken) fails the write rather than being referenced. */
export async function putNew(backend: Backend, key: string, body: Uint8Array, stamped?: (stamp: string) => void): Promise<void> {
  if (!(await backend.putIfAbsent(key, body, stamped))) throw new Error(`${key} exists already`);
}

/** No object under the key. */
export class NotFoundError extends Error {
  constructor(readonly key: string) {
    super(`no object ${key}`);
    this.name = 'NotFoundError';
  }
}

/** A store operation that took longer than the store timeout: a frozen or unreachable store.
 *  Its message is for the client (a session's Error, a REST 500). */
export class StoreTimeoutError extends ProtocolError {
  constructor(what: string, ms: number) {
    super(ErrorCode.Internal, `the store did not answer within ${ms} ms (${what}); nothing is lost, try again`);
    this.name = 'StoreTimeoutError';
  }
}

/** A compare-and-swap of a head whose outcome cannot be known: an S3 client's retry was refused
 *  while the head holds other bytes, so the first attempt may or may not have landed (s3.ts). */
export class UnknownOutcome extends Error {
  constructor(where: string, key: string) {
    super(`${where}: the outcome of a compare-and-swap of ${key} is unknown (a retried write was refused, and the head holds other bytes)`);
    this.name = 'UnknownOutcome';
  }
}

/**
 * `backend` with a deadline on every operation (`--store-timeout-ms`): one that has not
 * settled after `ms` (the object store's own retries included) fails with StoreTimeoutError,
 * so a request to a frozen store ends with a clear error instead of hanging. Listings are left
 * alone: a local directory lists a whole prefix at once, which may take long in a big store
 * (gc, check), and S3 bounds each page's request itself (s3.ts). The operation itself may
 * still land later, as any request whose answer is lost may.
 */
/** How much earlier than asked a timer may fire, as performance.now() measures it. */
const TIMER_SLACK_MS = 5;

export function withTimeout<B extends Backend>(backend: B, ms: number): B {
  const limit = <T>(what: string, op: () => Promise<T>): Promise<T> => {
    const t0 = performance.now();
    const p = op();
    let timer: NodeJS.Timeout;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new StoreTimeoutError(what, ms)), ms)));
    // a failure at the deadline is the deadline's: S3 abandons its request then (s3.ts), by a
    // timer of its own that may fire a little before this one
    const settled = p.catch((e) => {
      const aborted = ['AbortError', 'TimeoutError'].includes((e as Error)?.name);
      throw aborted || performance.now() - t0 >= ms - TIMER_SLACK_MS ? new StoreTimeoutError(what, ms) : e;
    });
    return Promise.race([settled, late]).finally(() => clearTimeout(timer));
  };
  return {
    ...backend,
    putIfAbsent: (key, body, stamped) => limit(`put ${key}`, () => backend.putIfAbsent(key, body, stamped)),
    get: (key, range) => limit(`get ${key}`, () => backend.get(key, range)),
    getStamped: (key, range) => limit(`get ${key}`, () => backend.getStamped(key, range)),
    stamp: (key) => limit(`stamp ${key}`, () => backend.stamp(key)),
    stamps: (prefix, keys) => limit(`stamps ${prefix}`, () => backend.stamps(prefix, keys)),
    size: (key) => limit(`size ${key}`, () => backend.size(key)),
    getHead: (key) => limit(`get ${key}`, () => backend.getHead(key)),
    putHead: (key, body, tag) => limit(`put ${key}`, () => backend.putHead(key, body, tag)),
    delete: (key) => limit(`delete ${key}`, () => backend.delete(key)),
  };
}
