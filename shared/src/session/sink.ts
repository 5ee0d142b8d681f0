/**
 * Where a receiver writes the target it rebuilds (the server's store, the page's file, the
 * CLI's file), and what an interrupted receiver keeps so that a new session can resume.
 */
import type { ChunkIndex, Source } from '../chunking/chunk-index.ts';

/** Where the receiver writes the rebuilt target. */
export interface Sink {
  /** Appends bytes: a view of a buffer the receiver reuses once the promise resolves.
   *  `basis`: stretches of them that are copies of basis bytes (the pieces of refined chunks),
   *  which a sink that copies by reference (`copy`) may store so. */
  write(bytes: Uint8Array, basis?: BasisSpans): Promise<void>;
  /**
   * Optional: appends `length` bytes of `from` at `offset` (a stretch of the basis) without
   * the receiver reading them, e.g. by reference. A sink offers this only where the basis'
   * bytes are known to match its chunk index (the server's stored versions, verified when
   * they were written): the receiver then takes the copied chunks' strong hashes from the
   * basis index instead of hashing them again, so its work follows the size of the change.
   */
  copy?(from: Source, offset: number, length: number): Promise<void>;
  /** Called once the target is verified; returns the version number it was stored as. */
  commit(index: ChunkIndex): Promise<number>;
  /** Called on any failure: nothing of the target may remain visible. */
  abort(): Promise<void>;
  /** Optional: called instead of abort when the connection is lost, with chunks [0, held)
   *  written, so that a new session for the same target can resume (see `SinkFor`). */
  suspend?(held: Held): Promise<void>;
  /** Optional: records chunks [0, held) as written while the session goes on, so that a new
   *  session can resume them even when this process dies before it could suspend (a server
   *  killed mid-upload). The receiver calls it every RESUME_CHECKPOINT_BYTES once the whole
   *  Checksum List is in; the sink forgets the record before it commits or aborts. */
  checkpoint?(held: Held): Promise<void>;
}

/** Stretches of a write's bytes that equal bytes of the basis `from`: bytes [at, at + length)
 *  of the write are bytes [offset, offset + length) of the basis; ascending, disjoint. */
export interface BasisSpans {
  from: Source;
  spans: { at: number; offset: number; length: number }[];
}

/** What an interrupted receiver kept: the first `count` chunks, written, and their hashes. */
export interface Held {
  /** the Checksum List's digest (see `SinkFor`) */
  digest: Uint8Array;
  count: number;
  hashes: Uint8Array;
}

/** Opens the sink for a target. With `digest` (a strong hash of the whole Checksum List,
 *  lengths and FastFps), a suspended earlier session with the same list may be resumed:
 *  `held` is what it already wrote into that sink; the root check at the end covers those
 *  chunks too. Without (the list is still arriving), the sink is a new one. */
export type SinkFor = (target: { digest: Uint8Array | null }) => Promise<{ sink: Sink; held?: Held }>;
