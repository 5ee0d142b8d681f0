/**
 * The garbage collector's state (gc/state) and the guard every head change that adds
 * references runs against it (docs/store.md §8). Below the collector (gc.ts), the commit
 * (commit.ts), the writer, the repack and check: what they share of gc's protocol.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/protocol.ts';
import { damagedObject } from './errors.ts';
import { parseJson } from './format.ts';
import { GC_STATE, isContentKey } from './keys.ts';
import type { Repo } from './repo.ts';

/** The gc/state head. */
export interface GcState {
  epoch: number;
  phase: 'idle' | 'condemned' | 'deleting';
  /** keys of the content objects condemned (phase condemned) or being deleted */
  candidates: string[];
  /** ms since the epoch when the phase began or its collector last renewed it (Lease) */
  since: number;
  /** the collector that set the phase (random), so a slow one sees it was taken over */
  owner?: string;
}

const IDLE: GcState = { epoch: 0, phase: 'idle', candidates: [], since: 0 };

export function parseGcState(body: Uint8Array | null): GcState {
  if (!body) return IDLE;
  const s = parseJson(body, GC_STATE);
  const ok = s && Number.isSafeInteger(s.epoch) && ['idle', 'condemned', 'deleting'].includes(s.phase) && Array.isArray(s.candidates) && s.candidates.every((k: unknown) => typeof k === 'string' && isContentKey(k)) && Number.isFinite(s.since);
  if (!ok) throw damagedObject(GC_STATE);
  return s as GcState;
}

export const gcStateBody = (s: GcState) => Buffer.from(JSON.stringify(s));

export async function readGcState(repo: Repo): Promise<{ state: GcState; tag: string | null }> {
  const got = await repo.backend.getHead(GC_STATE);
  return { state: parseGcState(got?.body ?? null), tag: got?.tag ?? null };
}

/** The current gc epoch. A session reads it before it writes its first object: what it writes
 *  is then known to exist at that epoch (docs/store.md §8). */
export async function gcEpoch(repo: Repo): Promise<number> {
  return (await readGcState(repo)).state.epoch;
}

/**
 * The content objects a head change adds references to, each with the epoch at which it is
 * known to have existed: a moment when gc/state's epoch was at least that (docs/store.md §8).
 */
export type Refs = Map<string, number>;

/** Adds `key`, known at `epoch`, to `refs` (the lowest epoch wins). */
export function addRef(refs: Refs, key: string, epoch: number): void {
  const had = refs.get(key);
  if (had === undefined || epoch < had) refs.set(key, epoch);
}

/** The epoch all of `refs` are known at (the lowest). */
export function knownAt(refs: Refs): number {
  let min = Infinity;
  for (const e of refs.values()) min = Math.min(min, e);
  return min;
}

/** A head change that adds references refused by the collector (retryable: nothing is lost). */
export class GcRefusal extends ProtocolError {
  constructor(why: string) {
    super(ErrorCode.Internal, why);
  }
}

/**
 * A head change's part of the protocol with the collector (docs/store.md §8), run just before
 * its swap and again once the swap has landed, before the change is reported done: reads
 * gc/state; rescues the references that are condemned (compare-and-swap, serialised with the
 * collector's swap to deleting); refuses (GcRefusal) when one is being deleted; and checks that
 * each reference known only from an epoch before the state's still exists (refuses if not).
 * Returns the references' epochs brought up to date (an object found to exist now is known at
 * the state's epoch) and when the state was read.
 */
export async function guardRefs(repo: Repo, refs: Refs): Promise<{ refs: Refs; readAt: number }> {
  for (;;) {
    const readAt = Date.now();
    const { state, tag } = await readGcState(repo);
    if (state.phase !== 'idle') {
      const hits = new Set(state.candidates.filter((k) => refs.has(k)));
      if (hits.size && state.phase === 'deleting') throw new GcRefusal('the store is collecting garbage this version needs; push again');
      if (hits.size) {
        const t = await repo.backend.putHead(GC_STATE, gcStateBody({ ...state, candidates: state.candidates.filter((k) => !hits.has(k)) }), tag);
        if (!t) continue; // the state moved: look again
      }
    }
    const now: Refs = new Map(refs);
    for (const [k, e] of refs) {
      if (e >= state.epoch) continue;
      if ((await repo.backend.size(k)) === null) throw new GcRefusal(`the store collected ${k}, which this version needs; push again`);
      now.set(k, state.epoch);
    }
    return { refs: now, readAt };
  }
}
