/**
 * The garbage collector's state (gc/state) and the guard every head change that adds
 * references runs against it (docs/store.md §8). Below the collector (gc.ts), the commit
 * (commit.ts), the writer, the repack and check: what they share of gc's protocol.
 */
import { ErrorCode, ProtocolError } from '../../../shared/src/wire/protocol.ts';
import { damagedObject } from './errors.ts';
import { parseJson } from './format.ts';
import { GC_STATE, isContentKey } from './keys.ts';
import type { Backend } from './backend.ts';
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

/** gc/state as read, its tag, and when the read was sent (Date.now()). */
export interface SeenGcState {
  state: GcState;
  tag: string | null;
  readAt: number;
}

/** gc/state as this process last read it, per backend (`recentGcState`). */
const lastRead = new WeakMap<Backend, SeenGcState>();

export async function readGcState(repo: Repo): Promise<SeenGcState> {
  const readAt = Date.now();
  const got = await repo.backend.getHead(GC_STATE);
  const seen = { state: parseGcState(got?.body ?? null), tag: got?.tag ?? null, readAt };
  lastRead.set(repo.backend, seen);
  return seen;
}

/** Per backend: the gc/state read under way, and the one queued to start after it
 *  (`freshGcState`). */
const fresh = new WeakMap<Backend, { running: Promise<SeenGcState> | null; next: Promise<SeenGcState> | null }>();

/**
 * gc/state as read by a read that starts after this call: the confirmations of commits landing
 * at once share one (docs/store.md §4 "Commits at once"). A caller joins the read queued to
 * start once the read under way ends (or, with none under way, at the end of this turn of the
 * event loop), else queues one; never a read already under way, which may have been sent
 * before its swap landed.
 */
export function freshGcState(repo: Repo): Promise<SeenGcState> {
  let q = fresh.get(repo.backend);
  if (!q) fresh.set(repo.backend, (q = { running: null, next: null }));
  const f = q;
  const start = (): Promise<SeenGcState> => {
    const p = readGcState(repo);
    f.running = p;
    const done = () => {
      if (f.running === p) f.running = null;
    };
    p.then(done, done);
    return p;
  };
  if (f.next) return f.next;
  // after the read under way, else once this turn of the event loop is over (setImmediate: the
  // confirmations of swaps landing in it join)
  const after = f.running
    ? f.running.then(
        () => {},
        () => {},
      )
    : new Promise<void>((r) => setImmediate(r));
  f.next = after.then(() => {
    f.next = null;
    return start();
  });
  return f.next;
}

/**
 * gc/state as this process read it less than `maxAgeMs` ago (any session's read, the last
 * confirmation's most often), else as read now. For what a state read some time ago answers
 * as well as one read now (docs/store.md §8): the epoch before a session's first write, and
 * the guard before a swap, which must start within W/2 of the state it read anyway.
 */
export async function recentGcState(repo: Repo, maxAgeMs: number): Promise<SeenGcState> {
  const seen = lastRead.get(repo.backend);
  return seen && Date.now() - seen.readAt < maxAgeMs ? seen : readGcState(repo);
}

/** The gc epoch, as read now or (`maxAgeMs`) less than that long ago. A session takes it before
 *  it writes its first object: what it writes is then known to exist at that epoch (epochs
 *  only grow, so any read before the write will do; docs/store.md §8). */
export async function gcEpoch(repo: Repo, maxAgeMs = 0): Promise<number> {
  return (await recentGcState(repo, maxAgeMs)).state.epoch;
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
 * the state's epoch) and when the state was read. `maxAgeMs` (the guard before a swap, never
 * the confirmation): a state this process read less than that long ago will do, unless it
 * names one of the references (then the state is read again before anything is decided).
 */
export async function guardRefs(repo: Repo, refs: Refs, o: { maxAgeMs?: number } = {}): Promise<{ refs: Refs; readAt: number }> {
  for (let recent = !!o.maxAgeMs; ; recent = false) {
    const { state, tag, readAt } = recent ? await recentGcState(repo, o.maxAgeMs!) : await freshGcState(repo);
    if (state.phase !== 'idle') {
      const hits = new Set(state.candidates.filter((k) => refs.has(k)));
      if (hits.size && recent) continue;
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
