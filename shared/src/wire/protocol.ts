/**
 * Constants of the Dsync wire protocol. `docs/protocol.md` is the specification; every
 * number here appears there with the same name.
 */

import { CHUNK_SIZE_RANGES } from '../base/limits.ts';

export const PROTOCOL_VERSION = 11;

/** Hello's `basisVersion` on a push that expects no file at its name (a first push): the
 *  server refuses with StaleBasis when the name has a version (docs/protocol.md §7). */
export const BASIS_ABSENT = 0xffffffff;

/** Bits of Hello's `flags` (docs/protocol.md §4); any other bit set is Malformed. */
export const HelloFlag = {
  /** push, three phases only: an interrupted upload of this name may wait for this push to
   *  resume it (docs/protocol.md §3 "Resuming"); without it the server looks for none */
  Resume: 0x01,
  /** push: the Hello ends with `modified`, the pusher's modification time of the file, kept
   *  with the version it makes (docs/protocol.md §4) */
  Modified: 0x02,
  /** push: the Hello ends with a version of this name the client knows, and the first
   *  ROOT_PREFIX bytes of its root (docs/protocol.md §3 "A known basis") */
  Known: 0x04,
  /** the Hello carries its chunking parameters; without it they are DEFAULT_PARAMS */
  Params: 0x08,
} as const;

/** Bytes of a root that a Hello's known version and a Result carry: the first 8 of the root.
 *  Neither is what verifies a file (the last Verdict's whole root is, docs/protocol.md §4 "What
 *  each cut keeps"). */
export const ROOT_PREFIX = 8;

/** Bytes of the target's root that the last Verdict carries, which the receiver verifies the
 *  rebuilt file against: the first 16. The root guards against a rebuild that differs from the
 *  sender's file by accident (a bug, a damaged basis), which passes 16 bytes with probability
 *  2^-128; the receiver stores the whole root it computes from the bytes it wrote
 *  (docs/protocol.md §4 "What each cut keeps"). */
export const ROOT_CHECK = 16;

/** Hello's `flags` byte holds the strong hash's `algo` in bits 4–7, the flags in bits 0–3
 *  (docs/protocol.md §4). */
export const HELLO_ALGO_SHIFT = 4;

/** Bits of Ready's `flags` (docs/protocol.md §4); any other bit set is Malformed. */
export const ReadyFlag = {
  /** pull: the Ready ends with `modified`, the version's modification time as its pusher gave
   *  it, which the client sets on the file it writes */
  Modified: 0x01,
} as const;

/** Message type codes (the first byte of every binary frame). */
export const Msg = {
  Hello: 0x01,
  Ready: 0x02,
  Checksums: 0x03,
  ChecksumsEnd: 0x04,
  Tokens: 0x05,
  TokensEnd: 0x06,
  SplitRequest: 0x07,
  SplitHashes: 0x08,
  Verdict: 0x09,
  Delta: 0x0a,
  Result: 0x0b,
  BasisChecksums: 0x0c,
  Copies: 0x0d,
  DeltaRun: 0x0e,
  Error: 0x7f,
} as const;
export type MsgType = (typeof Msg)[keyof typeof Msg];

/** What a session does: push the client's file to the server, or pull a version. */
export const Op = { Push: 1, Pull: 2 } as const;

/** FastFp combine operation codes. */
export const FpOp = { Xor: 0, Add: 1 } as const;

/** Strong hash algorithm codes and digest lengths. */
export const Algo = { Sha1: 1, Sha256: 2, Blake3: 3 } as const;
export type AlgoCode = (typeof Algo)[keyof typeof Algo];
export const ALGO_NAMES: Record<number, string> = { 1: 'sha1', 2: 'sha256', 3: 'blake3' };
export function hashLength(algo: number): number {
  if (algo === Algo.Sha1) return 20;
  if (algo === Algo.Sha256 || algo === Algo.Blake3) return 32;
  throw new ProtocolError(ErrorCode.BadParams, `unknown strong hash algorithm ${algo}`);
}
export function algoByName(name: string): AlgoCode {
  const code = Number(Object.keys(ALGO_NAMES).find((k) => ALGO_NAMES[Number(k)] === name));
  if (!code) throw new Error(`unknown strong hash algorithm "${name}" (sha1, sha256, blake3)`);
  return code as AlgoCode;
}

/** Chunking parameters of FastCDC + FastFp, as sent in Hello. */
export interface ChunkParams {
  min: number;
  avg: number;
  max: number;
  /** FpOp code */
  op: number;
  /** FastFp sampling distance: 8, 16 or 32 bytes */
  every: number;
}

export const DEFAULT_PARAMS: ChunkParams = { min: 2048, avg: 8192, max: 65536, op: FpOp.Xor, every: 16 };
/** Chunk sizes of the finer level a receiver refines unmatched regions with (Basis Checksums,
 *  docs/protocol.md §3): min / avg / max. */
export interface FineParams {
  min: number;
  avg: number;
  max: number;
}
export const DEFAULT_FINE: FineParams = { min: 64, avg: 256, max: 1024 };
/** The default strong hash: BLAKE3 (see bench/results/strong-hash.md for the measurement). */
export const DEFAULT_ALGO: AlgoCode = Algo.Blake3;

/** Error codes carried by the Error message. */
export const ErrorCode = {
  /** A frame that does not decode: unknown type, truncated, trailing bytes, bad field. */
  Malformed: 1,
  /** A well-formed message the state machine does not expect now. */
  UnexpectedMessage: 2,
  /** Chunking parameters or algorithm outside what the server accepts. */
  BadParams: 3,
  /** Indices, counts or lengths that do not add up. */
  Inconsistent: 4,
  /** The rebuilt file's root hash differs from the sender's: nothing was stored. */
  VerifyFailed: 5,
  /** The requested file or version does not exist. */
  NotFound: 6,
  /** The basis the client expected is no longer the latest version. */
  StaleBasis: 7,
  /** A configured limit was hit (message, file or chunk size, chunk count, sessions, time). */
  LimitExceeded: 8,
  /** Invalid file name. */
  BadName: 9,
  /** Authentication missing or refused. */
  Unauthorized: 10,
  /** The server failed (I/O); the previous version is intact. */
  Internal: 11,
  /** Protocol version not supported. */
  Version: 12,
  /** The version a push's Hello says the client knows is not stored, or its root differs: the
   *  client forgets it and pushes without (docs/protocol.md §3, "A known basis"). */
  UnknownBasis: 13,
  /** The server runs as many sessions as it may (`--max-sessions`): nothing was done; the
   *  message says when to try again (busyMessage), and clients do (docs/protocol.md §6). */
  Busy: 14,
} as const;

/** The Busy error's message: the whole seconds to wait before trying again, in the one form
 *  clients read back (busyRetryS). */
export const busyMessage = (seconds: number) => `the server is busy; retry in ${seconds} s`;
/** The seconds a Busy error's message asks the client to wait (at least 1; 1 if it names none). */
export function busyRetryS(message: string): number {
  const m = /retry in (\d{1,6}) s$/.exec(message);
  return m ? Math.max(1, Number(m[1])) : 1;
}

/** An error with a wire code; thrown by the codec and the state machines. */
export class ProtocolError extends Error {
  constructor(
    public code: number,
    message: string,
  ) {
    super(message);
    this.name = 'ProtocolError';
  }
}

/** A message that contradicts the session so far (ErrorCode.Inconsistent). */
export const inconsistent = (why: string) => new ProtocolError(ErrorCode.Inconsistent, why);


/** Whether two sets of chunk parameters cut the same chunks. */
export const sameParams = (a: ChunkParams, b: ChunkParams) => a.min === b.min && a.avg === b.avg && a.max === b.max && a.op === b.op && a.every === b.every;

/** Validates chunk parameters against the ranges the wasm chunker accepts (CHUNK_SIZE_RANGES),
 *  `max` up to `maxChunk`. */
export function checkParams(p: ChunkParams, maxChunk: number = CHUNK_SIZE_RANGES.max.to): void {
  const bad = (why: string) => {
    throw new ProtocolError(ErrorCode.BadParams, why);
  };
  const { min, avg, max } = CHUNK_SIZE_RANGES;
  if (p.min < min.from || p.min > min.to || p.min % min.multipleOf) bad(`min ${p.min} must be a multiple of 32 in ${min.from}..${min.to}`);
  if (p.avg < avg.from || p.avg > avg.to || p.avg % avg.multipleOf) bad(`avg ${p.avg} must be even in ${avg.from}..${avg.to}`);
  if (p.max < max.from || p.max > maxChunk || p.max % max.multipleOf) bad(`max ${p.max} must be even in ${max.from}..${maxChunk}`);
  if (!(p.min < p.avg && p.avg < p.max)) bad('chunk sizes must satisfy min < avg < max');
  if (p.op !== FpOp.Xor && p.op !== FpOp.Add) bad(`FastFp op ${p.op} must be 0 (xor) or 1 (add)`);
  if (![8, 16, 32].includes(p.every)) bad(`FastFp distance ${p.every} must be 8, 16 or 32`);
}
