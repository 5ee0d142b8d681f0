/**
 * `dsync`: the product — the three phases of shared/src/session/delta-client.ts push() (`pushSession`)
 * against `dsync serve` with its defaults (BLAKE3, cached chunk index, refinement). The
 * session here serves its variants too (dsync-known.ts, dsync-paper.ts).
 */
import type WebSocket from 'ws';
import { chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { Conn, type WebSocketLike } from '../../shared/src/transport/conn.ts';
import { MemoryKnown, knownKey } from '../../shared/src/session/known.ts';
import { Algo, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { planKnown, pushSession, remember } from '../../shared/src/session/delta-client.ts';
import type { Approach, Prepared, Report, ServerKind } from './approach.ts';

/** Bytes read and written on the socket so far (the wire, after permessage-deflate). */
export const socketBytes = (ws: WebSocket) => {
  const s = (ws as unknown as { _socket: { bytesRead: number; bytesWritten: number } })._socket;
  return s.bytesRead + s.bytesWritten;
};

/** What `dsync-known` and `dsync-kept` clients remember: the last version each pushed of each
 *  name (the bench runs one server per approach at a time, so the name is the key), one memory
 *  per approach; `dsync-kept`'s keeps the bytes too, as the CLI does. */
const memories = new Map<string, MemoryKnown>();
const memoryOf = (approach: string, kept: boolean) => {
  if (!memories.has(approach)) memories.set(approach, new MemoryKnown(1 << 30, undefined, kept));
  return memories.get(approach)!;
};
/** A new server (a new data directory) holds none of the versions remembered. */
export const forgetKnown = () => memories.clear();

/** How a Dsync client pushes: the three phases always, against the version it pushed before
 *  (known by its chunk index and finer cut, as the page), or with that version's bytes kept (as
 *  the CLI). */
export type KnownMode = 'none' | 'known' | 'kept';

/** Dsync's push on an index precomputed or made as it goes; with `known`, against the version
 *  this client pushed before. */
export async function dsyncSession(p: Prepared, ws: WebSocket, name: string, algo: number, known: KnownMode): Promise<Omit<Report, 'connectMs'>> {
  const t0 = performance.now();
  const wire0 = socketBytes(ws);
  const conn = new Conn(ws as unknown as WebSocketLike);
  try {
    const memory = known === 'none' ? null : memoryOf(p.approach, known === 'kept');
    const key = knownKey('bench', name);
    const { index, against } = memory ? await planKnown(p.source, DEFAULT_PARAMS, algo, memory.get(key), { index: p.index }) : { index: p.index, against: null };
    const out = await pushSession(conn, p.source, { name, params: DEFAULT_PARAMS, algo, index, against });
    const tEnd = performance.now();
    // after the Result, as push() does: outside the sync's time, inside the client's CPU time
    if (memory) await remember(memory, key, out, DEFAULT_PARAMS, algo, p.source, p.fine);
    return {
      approach: p.approach,
      size: p.size,
      timeMs: { client: 0 /* syncPrepared: CPU time */, server: out.result.micros / 1000, network: 0, total: tEnd - t0 },
      traffic: { ...conn.traffic, wire: socketBytes(ws) - wire0 },
      literalBytes: out.literalBytes,
      tokens: out.tokens,
    };
  } finally {
    conn.close(1000, 'done');
  }
}

/** A Dsync approach that pushes with the three phases always, hashing with `algo`, against
 *  `server` (dsync-paper.ts is this with SHA-1 and the paper-exact server). */
export function threePhases(approach: string, server: ServerKind, algo: number): Approach {
  return {
    name: approach,
    server,
    async prepare(p, { hashes }) {
      if (hashes) p.index = await chunkSource(p.source, DEFAULT_PARAMS, algo);
    },
    session: (p, ws, name) => dsyncSession(p, ws, name, algo, 'none'),
  };
}

export const dsync: Approach = threePhases('dsync', 'dsync', Algo.Blake3);
