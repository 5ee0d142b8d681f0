/**
 * A push that never puts an older copy over a newer version (docs/sync.md, "Conflicts"): the
 * one rule of `dsync push` and the page's drop upload.
 *
 * The client pushes against what it knows of the name: the version it last pushed or pulled
 * (KnownVersions), else nothing (a first push). The server checks that expectation before the
 * push and again at its commit (docs/protocol.md §7); when another device moved the file on,
 *   - a file unchanged since the known version is not pushed at all (the server's is newer);
 *   - an edited file, or a first push of a name another device created meanwhile, goes up
 *     under a conflict name beside it (conflict.ts), and the server's version keeps the name.
 * Nothing is lost either way: both contents stay on the server.
 */
import { bytesToHex as hex } from '@noble/hashes/utils';
import { type Source, chunkSource, equalBytes } from '../chunking/chunk-index.ts';
import { RemoteError } from '../transport/conn.ts';
import { conflictName } from './conflict.ts';
import { knownKey } from '../session/known.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS, ErrorCode, sameParams } from '../wire/protocol.ts';
import { type PushOptions, type SyncReport, push } from '../session/delta-client.ts';
import type { VersionInfo } from '../wire/api.ts';

/** How many conflict names are tried when each in turn was taken meanwhile. */
const CONFLICT_TRIES = 5;

/** The latest version of a name as the server lists it (GET /api/versions). */
export type LatestInfo = Pick<VersionInfo, 'version' | 'root' | 'algo' | 'client'>;

export type GuardedOutcome =
  /** pushed as a new version of the name (or found unchanged: the server holds these bytes) */
  | { kind: 'pushed'; report: SyncReport }
  /** the file is unchanged since version `known`, and the server has a newer one: nothing sent */
  | { kind: 'behind'; known: number; server: LatestInfo | null }
  /** the server's version stays at the name; the bytes went up as `report.name` */
  | { kind: 'conflict'; report: SyncReport; known: number | null; server: LatestInfo | null };

export interface GuardedOptions extends Omit<PushOptions, 'expect'> {
  /** this device's label, in a conflict copy's name */
  device: string;
  /** the time in a conflict copy's name (default now) */
  now?: Date;
  /** the server's latest version of a name (null: none), asked when the push was refused: a
   *  file whose bytes the server already holds there is no conflict */
  latestOf?: (name: string) => Promise<LatestInfo | null>;
}

const isStale = (e: unknown) => e instanceof RemoteError && e.code === ErrorCode.StaleBasis;

/** Pushes `source` as `opts.name` against the version this client knows of it (see above). */
export async function guardedPush(source: Source, opts: GuardedOptions): Promise<GuardedOutcome> {
  const known = opts.known?.get(knownKey(opts.url, opts.name));
  try {
    return { kind: 'pushed', report: await push(source, { ...opts, expect: known ? { version: known.version } : 'absent' }) };
  } catch (e) {
    if (!isStale(e)) throw e;
  }
  const params = opts.params ?? DEFAULT_PARAMS;
  const algo = opts.algo ?? DEFAULT_ALGO;
  const [server, local] = await Promise.all([opts.latestOf?.(opts.name).catch(() => null) ?? null, chunkSource(source, params, algo)]);
  // the server's latest holds these very bytes (pushed by this client before it remembered,
  // or the same edit made elsewhere): pushed against it, it is found unchanged
  if (server && server.algo === algo && server.root === hex(local.root)) {
    try {
      return { kind: 'pushed', report: await push(source, { ...opts, expect: { version: server.version } }) };
    } catch (e) {
      if (!isStale(e)) throw e;
    }
  }
  if (known && known.algo === algo && sameParams(known.params, params) && equalBytes(local.root, known.root)) return { kind: 'behind', known: known.version, server };
  const when = opts.now ?? new Date();
  const tried = new Set<string>();
  for (let n = 0; ; n++) {
    const name = conflictName(opts.name, opts.device, when, (c) => tried.has(c));
    tried.add(name);
    try {
      // the copy is a new name: it must not land on a copy another run made meanwhile
      const report = await push(source, { ...opts, name, expect: 'absent' });
      return { kind: 'conflict', report, known: known?.version ?? null, server };
    } catch (e) {
      if (!isStale(e) || n + 1 >= CONFLICT_TRIES) throw e;
    }
  }
}
