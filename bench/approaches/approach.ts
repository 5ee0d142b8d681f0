/**
 * What an approach of the benchmark is: the client's work before a sync (`prepare`), the sync
 * itself over an open WebSocket (`session`), and which server runs its other half. A baseline
 * served by bench/eval/baseline-server.ts also brings that half (`serve`). To add a baseline,
 * write one file like webr2sync.ts and list it in index.ts.
 */
import type WebSocket from 'ws';
import type { ChunkIndex, Source } from '../../shared/src/chunking/chunk-index.ts';
import type { Traffic } from '../../shared/src/transport/conn.ts';
import type { KnownVersion } from '../../shared/src/session/known.ts';
import type { MsgConn } from '../eval/wire.ts';

/** Which server a sync goes to: Dsync's (`dsync serve`), Dsync's in paper-exact mode, or the
 *  baselines' (bench/eval/baseline-server.ts). */
export type ServerKind = 'dsync' | 'dsync-paper' | 'baselines';

export interface Report {
  approach: string;
  size: number;
  timeMs: { client: number; server: number; network: number; total: number };
  /** opening the WebSocket (TCP + upgrade), before the sync: added to `total` on a cold sync,
   *  left out of it on a warm one */
  connectMs: number;
  traffic: Traffic & { wire: number };
  literalBytes: number;
  /** dsync: Match Tokens received; webr2sync+: weak lookups on the server */
  tokens?: number;
  lookups?: number;
}

export interface Prepared {
  approach: string;
  source: Source;
  size: number;
  /** wall and CPU milliseconds of the client's computation before the session */
  prepMs: number;
  prepCpuMs: number;
  /** dedup; dsync when its index was precomputed (load harness) */
  index?: ChunkIndex;
  /** dsync-known with a precomputed index: the finer cut it keeps after a push (load harness) */
  fine?: KnownVersion['fine'];
  triples?: Uint32Array;
  root?: Uint8Array;
}

/** What a baseline's server half is given: the client's Hello, the stored basis (null: none)
 *  and where the rebuilt target goes. */
export interface ServeContext {
  c: MsgConn;
  hello: { name: string; size: number; root: string; approach: string };
  basis: Uint8Array | null;
  out: { write(b: Uint8Array): Promise<void> };
}

export interface Approach {
  name: string;
  server: ServerKind;
  /** the client's computation on the target, before any traffic; `hashes`: chunk and hash now
   *  instead of during the session (load harness) */
  prepare(p: Prepared, opts: { hashes: boolean }): Promise<void>;
  /** one sync over `ws` (Dsync's /sync, or the baselines' server) */
  session(p: Prepared, ws: WebSocket, name: string): Promise<Omit<Report, 'connectMs'>>;
  /** a baseline's server half: rebuilds the target into `out`; returns its hash (FILE_ALGO,
   *  or the run hash for dedup), whether End was read, and the weak lookups made */
  serve?(ctx: ServeContext): Promise<{ root: Uint8Array; ended: boolean; lookups?: number }>;
}
