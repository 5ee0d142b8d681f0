/**
 * `dsync-known`: the product client re-pushing a file it pushed before, against the version it
 * knows when little is new: one round trip (docs/protocol.md §3, "A known basis").
 */
import { chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import { fineIndex } from '../../shared/src/session/known.ts';
import { Algo, DEFAULT_FINE, DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import type { Approach } from './approach.ts';
import { dsyncSession } from './dsync.ts';

export const dsyncKnown: Approach = {
  name: 'dsync-known',
  server: 'dsync',
  async prepare(p, { hashes }) {
    if (!hashes) return;
    p.index = await chunkSource(p.source, DEFAULT_PARAMS, Algo.Blake3);
    p.fine = await fineIndex(p.source, DEFAULT_FINE, Algo.Blake3);
  },
  session: (p, ws, name) => dsyncSession(p, ws, name, Algo.Blake3, 'known'),
};
