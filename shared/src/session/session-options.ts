/**
 * What the sender (sender.ts) and the receiver (receiver.ts) of a session are given and what
 * they return.
 */
import type { Refiner } from './basis-checksums.ts';
import type { ChunkIndex, ListPart, Source } from '../chunking/chunk-index.ts';
import type { Result } from '../wire/messages.ts';
import type { KnownVersion } from './known.ts';
import type { WeakList } from './matcher.ts';
import type { ReceiverLimits } from '../base/limits.ts';
import type { FineParams } from '../wire/protocol.ts';

/** The target as its sender produces it: its size, and its Checksum List with each chunk's
 *  strong hash, in parts in chunk order (`chunkParts` while reading a file, or `indexParts`
 *  of a stored index). */
export interface TargetList {
  size: number;
  parts: AsyncIterable<ListPart>;
}

export interface SenderOptions {
  splitThreshold?: number;
  deltaMessageBytes?: number;
  /** awaited before the first Match Tokens are read (a push reads Ready here) */
  beforeTokens?: () => Promise<void> | void;
  /** called as this side enters each phase after the first: `tokens` once the whole Checksum
   *  List is sent, `delta` once Tokens End is in (not against a known basis), `result` once
   *  every Delta Bytes message is sent */
  onPhase?: (p: Exclude<Phase, 'checksums'>) => void;
  /** a known basis (Hello's `known`, known.ts): the sender finds its chunks there itself as
   *  their hashes come and sends those Match Tokens as Copies, each part before the Verdict
   *  that judges it; the receiver sends none */
  known?: KnownVersion;
  /** and what the chunks sent are refined against: the known basis cut finer (its Basis
   *  Checksums) or its bytes kept (kept.ts) */
  basisChecksums?: Refiner;
  /** told the bytes the session's Checksum List is about to grow by; throws to refuse (a
   *  memory budget, server/src/memory.ts) */
  reserve?: (bytes: number) => void;
  /** aborted: the sender sends nothing more and fails with the signal's reason, at once
   *  wherever it waits (room in the socket, Match Tokens, a part); a sender whose last message
   *  already went out is not stopped */
  signal?: AbortSignal;
}

export interface SendOutcome {
  result: Result;
  /** bytes of the target covered by confirmed Match Tokens or copied from the basis by
   *  refined chunks / sent as literal Delta Bytes / already held by the receiver from an
   *  interrupted session */
  matchedBytes: number;
  /** of matchedBytes, those refined chunks copied (Basis Checksums) */
  refinedBytes: number;
  literalBytes: number;
  resumedBytes: number;
  chunks: number;
  tokens: number;
  failedTokens: number;
  /** the target's chunk lengths and strong hashes (what a later push may know it by) */
  lengths: Uint32Array;
  hashes: Uint8Array;
}

/**
 * The phases of a session (docs/protocol.md §3), as both sides name them: the Checksum List
 * (`checksums`, Phase 1, with Match Tokens sent as it arrives when streamed); the list is
 * whole and the last Match Tokens go out (`tokens`, Phase 2); Tokens End is sent and the rest
 * is Verdicts and Delta Bytes (`delta`, Phase 3); every Delta Bytes message is sent and the
 * Result is due (`result`, the sender's only).
 */
export type Phase = 'checksums' | 'tokens' | 'delta' | 'result';


export interface ReceiverOptions {
  limits: ReceiverLimits;
  /** the size Hello announced, which the Checksum List must add up to */
  expectedSize?: number;
  /** match only once the whole Checksum List is in: for a sink that may resume an interrupted
   *  session, which its digest decides (a basis chosen from the list implies it) */
  wholeList?: boolean;
  /** fills the Result's timing and wire fields */
  resultExtra?: () => Pick<Result, 'micros' | 'wireIn' | 'wireOut'>;
  /** called as each phase is entered (the server times the phases) */
  onPhase?: (p: Exclude<Phase, 'result'>) => void;
  /** finer chunk sizes to refine the basis stretches no Match Token covers with (Basis
   *  Checksums, refine.ts); absent: no refinement */
  refine?: FineParams;
  /** at most this many basis bytes are refined per session (default MAX_REFINE_BYTES) */
  maxRefineBytes?: number;
  /** the sender holds the basis' chunk index (Hello's known version, which `basis` must be):
   *  it sends its own Match Tokens as Copies, each before the Verdict that judges it, and the
   *  receiver sends none, no Basis Checksums and no Tokens End (docs/protocol.md §3, "A known
   *  basis") */
  known?: boolean;
  /** told the bytes the session is about to hold (its Checksum List as it grows, the basis
   *  bytes refinement keeps) before they are allocated; throws to refuse (a memory budget) */
  reserve?: (bytes: number) => void;
}

export interface ReceiveOutcome {
  index: ChunkIndex;
  version: number;
  matchedBytes: number;
  literalBytes: number;
  tokens: number;
  /** chunks an interrupted earlier session had already written */
  resumedChunks: number;
  /** of matchedBytes, those refined chunks copied */
  refinedBytes: number;
  /** basis bytes listed in Basis Checksums */
  refineListed: number;
}

/** The basis: its chunk index and its bytes. */
export interface Basis {
  index: ChunkIndex;
  source: Source;
  /** the basis' bytes being verified while the session runs (a server's stored version):
   *  the commit waits for it, and fails with its error */
  verified?: Promise<void>;
}

/** A basis given up front, none (null: everything is sent), or chosen once the whole
 *  Checksum List is known. */
export type BasisChoice = Basis | null | ((target: WeakList) => Promise<Basis | null>);
