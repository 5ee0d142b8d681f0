/**
 * `dsync-kept`: the product client re-pushing a file it pushed before with that version's bytes
 * kept, as the CLI does (shared/src/session/kept.ts): one round trip, the chunks sent refined against
 * the kept bytes at byte granularity.
 */
import type { Approach } from './approach.ts';
import { dsyncKnown } from './dsync-known.ts';
import { dsyncSession } from './dsync.ts';
import { Algo } from '../../shared/src/wire/protocol.ts';

export const dsyncKept: Approach = {
  name: 'dsync-kept',
  server: 'dsync',
  prepare: dsyncKnown.prepare,
  session: (p, ws, name) => dsyncSession(p, ws, name, Algo.Blake3, 'kept'),
};
