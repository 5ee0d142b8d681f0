/**
 * `dsync-paper`: Dsync as the paper has it — SHA-1, and a server that chunks and hashes its
 * basis on every sync (`dsync serve --paper-exact`), no refinement.
 */
import { chunkSource } from '../../shared/src/chunk-index.ts';
import { Algo, DEFAULT_PARAMS } from '../../shared/src/protocol.ts';
import type { Approach } from './approach.ts';
import { dsyncSession } from './dsync.ts';

export const dsyncPaper: Approach = {
  name: 'dsync-paper',
  server: 'dsync-paper',
  async prepare(p, { hashes }) {
    if (hashes) p.index = await chunkSource(p.source, DEFAULT_PARAMS, Algo.Sha1);
  },
  session: (p, ws, name) => dsyncSession(p, ws, name, Algo.Sha1, 'none'),
};
