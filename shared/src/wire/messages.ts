/**
 * Every message of the Dsync wire protocol (docs/protocol.md §4) as a type; codec.ts encodes and
 * decodes them.
 */
import type { ChunkParams, FineParams, Msg } from './protocol.ts';

export interface Hello {
  type: typeof Msg.Hello;
  version: number;
  op: number;
  params: ChunkParams;
  algo: number;
  /** push: size of the client's file (the target); pull: size of the client's basis (0: none) */
  size: number;
  /** push: the basis version the client expects to be latest (0: no check; BASIS_ABSENT: no
   *  file at the name); pull: the version wanted (0: latest) */
  basisVersion: number;
  name: string;
  /** push: a version of this name whose chunk index the client holds, and that version's root
   *  (its first ROOT_PREFIX bytes travel; a longer root is cut to them):
   *  the client sends its own Match Tokens against it (Copies) without waiting for the
   *  server's (docs/protocol.md §3, "A known basis"); absent: none */
  known?: { version: number; root: Uint8Array };
  /** push with the three phases: this push may resume an interrupted upload of the name (a
   *  retry after a lost connection, an upload the client's record says was cut off, or, with
   *  no record, a file large enough that resuming matters: delta-client.ts `mayResume`): the server
   *  reads the file head and looks for one (docs/protocol.md §3 "Resuming"); absent or false:
   *  it looks for none (Hello's `flags`, bit HelloFlag.Resume) */
  resume?: boolean;
  /** push: the pusher's modification time of the file, ms since the epoch, 0 …
   *  MAX_MODIFIED_MS (Hello's `flags`, bit HelloFlag.Modified); kept with the version the push
   *  makes (its entry's `modified`); absent: none */
  modified?: number;
}
export interface Ready {
  type: typeof Msg.Ready;
  /** push: the basis version (0: none); pull: the version being sent */
  version: number;
  /** size of that version */
  size: number;
  /** pull: the version's modification time as its pusher gave it (ms since the epoch; Ready's
   *  `flags`, bit ReadyFlag.Modified), which the client sets on the file it writes; absent:
   *  none (always on a push) */
  modified?: number;
}
/** A slice of the Checksum List: FastFp and length per chunk, in chunk order. */
export interface Checksums {
  type: typeof Msg.Checksums;
  fastfps: Uint32Array;
  lengths: Uint32Array;
}
export interface ChecksumsEnd {
  type: typeof Msg.ChecksumsEnd;
  count: number;
  size: number;
}
/** Match Tokens: merged runs of weak-matched chunks, each with the run hash of the basis chunks. */
export interface Tokens {
  type: typeof Msg.Tokens;
  /** the receiver's matching is final below this chunk: every token below it has been sent */
  upTo: number;
  first: Uint32Array;
  count: Uint32Array;
  /** count.length * H bytes */
  hashes: Uint8Array;
}
export interface TokensEnd {
  type: typeof Msg.TokensEnd;
  count: number;
  /** chunks [0, resumeFrom) the receiver already holds from an interrupted session */
  resumeFrom: number;
}
export interface SplitRequest {
  type: typeof Msg.SplitRequest;
  tokens: Uint32Array;
}
export interface SplitHashes {
  type: typeof Msg.SplitHashes;
  token: number;
  /** one hash per chunk of the token, n * H bytes */
  hashes: Uint8Array;
}
export interface Failed {
  token: number;
  /** bit k set: chunk first+k matched its basis chunk; null: the whole run is sent */
  bitmap: Uint8Array | null;
}
/** The judgement of the Match Tokens that end at or below chunk `upTo`; the last Verdict has
 *  upTo = the chunk count and carries the target's root. */
export interface Verdict {
  type: typeof Msg.Verdict;
  upTo: number;
  /** run hash over all chunks of the target, H(h_0 || ... || h_{n-1}): in the last Verdict only;
   *  its first ROOT_CHECK bytes travel (a longer root is cut to them) */
  root: Uint8Array | null;
  failed: Failed[];
}
/** A stretch of the basis the receiver copies into a chunk sent in Delta Bytes. */
export interface Copy {
  /** byte offset in the basis */
  offset: number;
  length: number;
}
/** A piece of a refined chunk: literal bytes or a copy from the basis. */
export type Piece = Uint8Array | Copy;
/** Delta Bytes: the target's chunks not covered by Match Tokens, ascending index; each is its
 *  bytes, or (refined) pieces that add up to it. */
export interface Delta {
  type: typeof Msg.Delta;
  indices: Uint32Array;
  chunks: (Uint8Array | Piece[])[];
}
/** The receiver's Checksum List of a stretch of its basis that no Match Token covers, cut in
 *  finer chunks: the sender may copy any of them into the chunks it sends. */
export interface BasisChecksums {
  type: typeof Msg.BasisChecksums;
  /** byte offset of the stretch in the basis */
  offset: number;
  fine: FineParams;
  lengths: Uint32Array;
  /** the first 8 bytes of each chunk's strong hash, 8n bytes */
  prefixes: Uint8Array;
}
/** A push against a known basis: the sender's own Match Tokens, each saying that the next
 *  `count` target chunks are the known version's chunks [basisFirst, basisFirst + count), each
 *  run after `listed` chunks of the Checksum List (their FastFps and lengths the next ones of
 *  `fastfps` and `lengths`). */
export interface Copies {
  type: typeof Msg.Copies;
  listed: Uint32Array;
  fastfps: Uint32Array;
  lengths: Uint32Array;
  count: Uint32Array;
  basisFirst: Uint32Array;
}
/** Bytes of a strong hash a Basis Checksums entry carries. */
export const PREFIX = 8;
/** A chunk's length in a Delta message: its bytes, or the sum of its pieces. */
export const chunkLength = (c: Uint8Array | Piece[]): number => (c instanceof Uint8Array ? c.length : c.reduce((a, p) => a + p.length, 0));
export interface Result {
  type: typeof Msg.Result;
  version: number;
  /** the root of the rebuilt target: its first ROOT_PREFIX bytes travel (a longer root is cut to
   *  them), which the sender compares with its own */
  root: Uint8Array;
  /** time the receiver spent working on this session, microseconds */
  micros: number;
  /** bytes the receiver's socket received / sent for this session, 0 if unknown */
  wireIn: number;
  wireOut: number;
}
export interface ErrorMsg {
  type: typeof Msg.Error;
  code: number;
  message: string;
}
export type Message =
  | Hello
  | Ready
  | Checksums
  | ChecksumsEnd
  | Tokens
  | TokensEnd
  | SplitRequest
  | Copies
  | SplitHashes
  | Verdict
  | Delta
  | Result
  | BasisChecksums
  | ErrorMsg;
