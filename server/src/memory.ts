/**
 * The server-wide memory budget for what sync sessions hold: their Checksum Lists as they grow
 * (checksum-list.ts `listBytesPerChunk`: 52 bytes per chunk with BLAKE3; the sender's list of a pull
 * too) and the basis bytes refinement keeps (the listed bytes, up to refine.ts KEEP_LISTED, and
 * its COPY_WINDOW). Each session takes a `Share`. A session that would hold more than
 * `perSession` (--max-session-memory), or more than the budget (--memory-budget) has left, is
 * refused with LimitExceeded and ends; the others go on. A session's share is released when
 * it ends.
 */
import { ErrorCode, ProtocolError } from '../../shared/src/wire/protocol.ts';

const MiB = (n: number) => `${Math.round(n / 2 ** 20)} MiB`;

export class MemoryBudget {
  /** bytes all shares hold together */
  used = 0;

  constructor(
    readonly total: number,
    readonly perSession: number,
  ) {}

  /** A new session's share, holding nothing yet. */
  share(): Share {
    return new Share(this);
  }
}

export class Share {
  /** bytes this session holds */
  held = 0;

  constructor(private budget: MemoryBudget) {}

  /** Counts `bytes` more, or throws LimitExceeded (counting nothing) if they do not fit. */
  take = (bytes: number): void => {
    const b = this.budget;
    if (this.held + bytes > b.perSession) {
      throw new ProtocolError(ErrorCode.LimitExceeded, `this session would hold more than its share of the server's memory (${MiB(b.perSession)}, --max-session-memory): the Checksum List has too many chunks`);
    }
    if (b.used + bytes > b.total) {
      throw new ProtocolError(ErrorCode.LimitExceeded, `the server's memory for sessions is in use (${MiB(b.total)}, --memory-budget); try again later`);
    }
    this.held += bytes;
    b.used += bytes;
  };

  /** Gives back everything this session held. */
  release(): void {
    this.budget.used -= this.held;
    this.held = 0;
  }
}
