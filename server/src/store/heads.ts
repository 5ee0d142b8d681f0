/** Changing a head by compare-and-swap, retried until it lands (docs/store.md, "Heads"). */
import { type Backend, UnknownOutcome } from './backend.ts';

/** Unknown outcomes of one merge's writes decided again before it fails (`updateHead`). */
const MERGE_UNKNOWN = 3;

/**
 * Reads the head at `key`, asks `change` for its new body (null: leave it as it is) and a
 * result, and writes it with the tag it read; when another writer got there first, reads
 * again and asks again. `change` may throw to give up (e.g. StaleBasis).
 */
export interface Change<T> {
  body: Uint8Array | null;
  result: T;
}

/** Heads this process read or wrote last, per backend: guesses of a head's current body and
 *  tag, for the first compare-and-swap of a change (`updateHead` with `guess`: the folder
 *  catalogs; `guessHead`: a push session's file head; docs/store.md §12). At most GUESSES heads
 *  and GUESS_BYTES of bodies per backend, the oldest noted forgotten first. */
const GUESSES = 4096;
const GUESS_BYTES = 64 << 20;
const guesses = new WeakMap<Backend, { bytes: number; m: Map<string, { body: Uint8Array; tag: string }> }>();

/** Notes the head at `key` as read or written by this process (null: none there, or unknown). */
export function noteHead(backend: Backend, key: string, got: { body: Uint8Array; tag: string } | null): void {
  let g = guesses.get(backend);
  if (!g) guesses.set(backend, (g = { bytes: 0, m: new Map() }));
  const had = g.m.get(key);
  if (had) {
    g.bytes -= had.body.length;
    g.m.delete(key);
  }
  if (!got || got.body.length > GUESS_BYTES / 4) return;
  g.m.set(key, got);
  g.bytes += got.body.length;
  while (g.m.size > GUESSES || g.bytes > GUESS_BYTES) {
    const [k, v] = g.m.entries().next().value!;
    g.m.delete(k);
    g.bytes -= v.body.length;
  }
}

/**
 * The head at `key` as this process last read or wrote it, or null. Only a guess: another
 * process may have changed it since. A compare-and-swap against its tag lands only if it is
 * still current, so a change made from it is right whenever it lands; a change that decides
 * not to write, or throws, must be decided again from a fresh read. Never an answer to a reader.
 */
export function guessHead(backend: Backend, key: string): { body: Uint8Array; tag: string } | null {
  return guesses.get(backend)?.m.get(key) ?? null;
}

/** `backend.getHead`, noted as this process's latest view of the head. */
export async function readHead(backend: Backend, key: string): Promise<{ body: Uint8Array; tag: string } | null> {
  const got = await backend.getHead(key);
  noteHead(backend, key, got);
  return got;
}

/** `backend.putHead`, noted when it lands (forgotten when it does not, or fails). */
export async function writeHead(backend: Backend, key: string, body: Uint8Array, tag: string | null): Promise<string | null> {
  let t: string | null = null;
  try {
    t = await backend.putHead(key, body, tag);
  } finally {
    noteHead(backend, key, t === null ? null : { body, tag: t });
  }
  return t;
}

/**
 * Both options are only for changes that may be applied twice (a folder catalog's merge by
 * seq, recomputed from the body read):
 * - `guess`: the first attempt starts from this process's last view of the head, when it has
 *   one (no read); a change it does not write, or refuses, is decided again from a read, and so
 *   is one whose write failed (a write against a stale tag that an S3 client retried reports
 *   an unknown outcome, though it never lands);
 * - `merge`: a write whose outcome is unknown (UnknownOutcome: it may have landed) is decided
 *   again from a read, up to MERGE_UNKNOWN times: if it landed, the read shows it.
 */
export async function updateHead<T>(backend: Backend, key: string, change: (body: Uint8Array | null) => Change<T> | Promise<Change<T>>, o: { guess?: boolean; merge?: boolean } = {}): Promise<T> {
  let unknown = 0;
  for (let attempt = 0; ; attempt++) {
    const guess = o.guess && attempt === 0 ? guessHead(backend, key) : null;
    const cur = guess ?? (await readHead(backend, key));
    let out: Change<T>;
    try {
      out = await change(cur?.body ?? null);
    } catch (e) {
      if (guess) continue;
      throw e;
    }
    if (out.body === null) {
      if (guess) continue;
      return out.result;
    }
    let landed;
    try {
      landed = (await writeHead(backend, key, out.body, cur?.tag ?? null)) !== null;
    } catch (e) {
      if (guess || (o.merge && e instanceof UnknownOutcome && ++unknown <= MERGE_UNKNOWN)) continue;
      throw e;
    }
    if (landed) return out.result;
    // contention: back off a little, growing, so many writers of one name all land
    if (attempt > 2) await new Promise((r) => setTimeout(r, Math.min(50, attempt * 2) * Math.random()));
  }
}
