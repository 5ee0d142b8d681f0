/**
 * The store's errors, one class per kind, told apart with `instanceof` and never by their text
 * (as litestream's callers test its typed errors with errors.Is). They are ProtocolErrors with
 * the code Internal: their message is what a session's Error or a REST 500 tells the client.
 * A backend's own errors live with its contract (backend.ts: NotFoundError, StoreTimeoutError).
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';

/**
 * A stored object that is not what it should be (docs/store.md, "Integrity"): a head or object
 * that does not parse, an index or chunk that does not match its hash, a segment shorter than
 * its layout, or an object a head references that is `missing`. What it names is lost or
 * unreadable; nothing else is.
 */
export class DamageError extends ProtocolError {
  constructor(
    message: string,
    /** the object is absent rather than wrong (a missing index stops a collection, a damaged
     *  one does not: docs/store.md, "Garbage collection") */
    readonly missing = false,
    /** the id of the version index whose bytes are damaged, when a version's read found it
     *  (source.ts): a push session tells its basis' damage from any other */
    readonly version?: string,
  ) {
    super(ErrorCode.Internal, message);
    this.name = 'DamageError';
  }
}

/** A head or object whose body does not parse as what its key says it is. */
export const damagedObject = (what: string) => new DamageError(`damaged store object: ${what}`);

/** Whether `e` is the operating system's "no room": a full disk or an exhausted quota. */
export const isDiskFull = (e: unknown) => ['ENOSPC', 'EDQUOT'].includes((e as NodeJS.ErrnoException | undefined)?.code ?? '');

/** The store could not take a session's bytes (`cause`, the backend's error); a full disk says
 *  so. Nothing was stored. */
export class WriteFailed extends ProtocolError {
  constructor(cause: unknown) {
    super(ErrorCode.Internal, `${isDiskFull(cause) ? "the server's disk is full" : 'the store could not write'} (${(cause as Error).message}); nothing was stored, the previous version is intact`);
    this.name = 'WriteFailed';
  }
}
