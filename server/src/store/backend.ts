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
export interface Backend {
  /** A short description for logs: "dir /srv/dsync", "s3://bucket/prefix at http://…". */
  readonly where: string;

  /**
   * Writes a content object unless one exists under `key`. Returns false (and writes
   * nothing) when it exists. The object is durable once the promise resolves, and a reader
   * sees either no object or all of `body`, never a part.
   */
  putIfAbsent(key: string, body: Uint8Array): Promise<boolean>;

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
   *  object's size and last modification time. */
  list(prefix: string, opts?: { after?: string; limit?: number }): AsyncIterable<ListEntry>;

  /** Removes an object or a head; removing what is not there is not an error. */
  delete(key: string): Promise<void>;

  /** Releases connections and handles. */
  close(): Promise<void>;
}

export interface ListEntry {
  key: string;
  size: number;
  /** milliseconds since the epoch */
  modified: number;
}

/** No object under the key. */
export class NotFoundError extends Error {
  constructor(readonly key: string) {
    super(`no object ${key}`);
    this.name = 'NotFoundError';
  }
}
