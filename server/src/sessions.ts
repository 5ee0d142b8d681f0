/**
 * The sync sessions of one connection on the server, one after another: each reads Hello, then
 * runs the receiver (push, shared/src/session/receiver.ts) or the sender (pull, shared/src/session/sender.ts) against the store. An
 * error ends its session and the connection, with an Error message carrying its code; nothing
 * is stored unless the rebuilt file verified.
 */
import { type ChunkIndex, type Source, chunkSource } from '../../shared/src/chunking/chunk-index.ts';
import type { Hello } from '../../shared/src/wire/messages.ts';
import { Conn, ConnectionLost, RemoteError, type WebSocketLike } from '../../shared/src/transport/conn.ts';
import { BASIS_ABSENT, DEFAULT_FINE, ErrorCode, Msg, Op, PROTOCOL_VERSION, ProtocolError, ROOT_PREFIX, checkParams, hashLength, sameParams } from '../../shared/src/wire/protocol.ts';
import { indexParts } from '../../shared/src/session/checksum-list.ts';
import { receiveTarget } from '../../shared/src/session/receiver.ts';
import { sendTarget } from '../../shared/src/session/sender.ts';
import type { ServerConfig } from './config.ts';
import type { MemoryBudget } from './memory.ts';
import { validateName } from '../../shared/src/wire/names.ts';
import type { Store } from './store/store.ts';
import { DamageError, WriteFailed, isDiskFull } from './store/errors.ts';
import type { FileHead } from './store/format.ts';
import { GcRefusal } from './store/gc-state.ts';

export interface SessionLog {
  (event: Record<string, unknown>): void;
}

/** Basis or target index for a stored version: the cached one, or recomputed when the
 *  session's chunking differs or the server runs paper-exact. */
async function indexFor(store: Store, cfg: ServerConfig, hello: Hello, name: string, version: number, source: Source, head?: FileHead | null): Promise<ChunkIndex> {
  if (!cfg.paperExact) {
    const ix = await store.readIndex(name, version, head);
    if (ix.algo === hello.algo && sameParams(ix.params, hello.params)) return ix;
  }
  return chunkSource(source, hello.params, hello.algo);
}

/** A stored version to build on, verified while the session runs (Store.openBasis
 *  `meanwhile`: the Match Tokens need only its index; the commit waits for the verification)
 *  or, when this process found damage in it before, first; a known version that is not stored
 *  is UnknownBasis. A damaged version is no basis: a damaged latest one is none (null: the push
 *  sends everything, and stores a good version), a damaged known one is UnknownBasis (the
 *  client forgets it and pushes again without). */
async function knownOrLatest(store: Store, name: string, version: number, known: boolean, head: FileHead | null) {
  try {
    return await store.openBasis(name, version, head, { asked: false, meanwhile: true });
  } catch (e) {
    if (known && e instanceof ProtocolError && e.code === ErrorCode.NotFound) throw new ProtocolError(ErrorCode.UnknownBasis, `${name} has no version ${version}`);
    if (known && e instanceof DamageError) throw new ProtocolError(ErrorCode.UnknownBasis, `version ${version} of ${name} is damaged on the store: push without it`);
    if (!known && e instanceof DamageError) return null;
    throw e;
  }
}

function checkHello(h: Hello, cfg: ServerConfig) {
  if (h.version !== PROTOCOL_VERSION) throw new ProtocolError(ErrorCode.Version, `protocol version ${h.version} is not supported (server speaks ${PROTOCOL_VERSION})`);
  if (h.op !== Op.Push && h.op !== Op.Pull) throw new ProtocolError(ErrorCode.Malformed, `unknown operation ${h.op}`);
  if (h.known && h.op !== Op.Push) throw new ProtocolError(ErrorCode.Malformed, 'a known version comes with a push only');
  if (h.resume && (h.op !== Op.Push || h.known)) throw new ProtocolError(ErrorCode.Malformed, 'the resume flag comes with a push with the three phases only');
  // (the codec took `modified` in 0 … MAX_MODIFIED_MS)
  if (h.modified !== undefined && h.op !== Op.Push) throw new ProtocolError(ErrorCode.Malformed, 'a modification time comes with a push only');
  checkParams(h.params, cfg.maxChunkSize);
  hashLength(h.algo);
  h.name = validateName(h.name);
  if (h.op === Op.Push && h.size > cfg.maxFileSize) {
    throw new ProtocolError(ErrorCode.LimitExceeded, `file of ${h.size} bytes exceeds the limit of ${cfg.maxFileSize}`);
  }
}

/** Byte counters of the connection's socket (net.Socket has them). */
export interface SocketCounters {
  readonly bytesRead: number;
  readonly bytesWritten: number;
}

/** What a connection is held to besides `cfg`, and what it tells: whether its sign-in still
 *  holds (checked at each later Hello), a signal that ends it at once (logout), the memory
 *  budget its sessions take their share of, its user's turns (each session waits for one after
 *  its Hello), the label it gave itself, and the hooks of each session's start and end. */
export interface ConnectionGuards {
  authorized?: () => boolean;
  signedOut?: AbortSignal;
  budget?: MemoryBudget;
  turn?: () => Promise<() => void>;
  /** the client's label, kept with the versions it pushes (clientLabel) */
  client?: string;
  hooks?: SessionHooks;
}

/** A session's start and end, as the server around the connection sees them. */
export interface SessionHooks {
  /** A session starts: its Hello is in (and its user's turn taken). Throwing a ProtocolError
   *  refuses it (admission: Busy); nothing else of it runs, and `end` still follows. */
  start?(hello: Hello): void | Promise<void>;
  /** The session that started is over, however it ended (`end` of what `start` began). */
  end?(ended: SessionEnd): void;
}

/** How a session ended: its operation and name (from its Hello), and the version a push
 *  committed or found unchanged. */
export interface SessionEnd {
  op: 'push' | 'pull';
  name: string;
  version?: number;
}

/** What one session runs with: the connection's parts, and the session's own hooks. */
interface SessionContext {
  conn: Conn;
  socket: SocketCounters;
  store: Store;
  cfg: ServerConfig;
  log: SessionLog;
  client?: string;
  /** arms the phase clock for the named phase */
  phase: (name: string) => void;
  /** the session's Hello is in: waits for its turn, then calls the start hook (which may refuse) */
  started: (hello: Hello) => Promise<void>;
  /** counts bytes against the session's memory share (memory.ts), or throws LimitExceeded */
  reserve?: (bytes: number) => void;
}

/**
 * Runs the sessions of one connection, one after another: after a session's Result the client
 * may send the next Hello on the same WebSocket (docs/protocol.md §3), so a page syncing a
 * folder, or re-syncing an edited file, pays for the TCP and WebSocket handshakes once. An
 * error ends the connection. `storeP` may still be opening: the connection queues messages
 * meanwhile.
 */
export async function runConnection(ws: WebSocketLike, socket: SocketCounters, storeP: Store | Promise<Store>, cfg: ServerConfig, log: SessionLog, guards: ConnectionGuards = {}): Promise<void> {
  const { authorized = () => true, signedOut, budget, turn, client, hooks } = guards;
  const conn = new Conn(ws, { maxQueuedBytes: Math.max(cfg.maxInFlight, cfg.maxMessage) });
  // a logout ends the login's sockets at once, a session under way included
  const onSignOut = () => conn.sendError(ErrorCode.Unauthorized, 'signed out: the sign-in this connection was opened with has ended');
  signedOut?.addEventListener('abort', onSignOut, { once: true });
  // Two clocks end a session that stalls: no message for idleTimeoutMs, or one phase lasting
  // longer than phaseTimeoutMs. Between sessions only the first runs, and closes quietly.
  let between = false;
  let idle: NodeJS.Timeout | undefined;
  let phaseTimer: NodeJS.Timeout | undefined;
  let over = false; // messages that arrive after the connection's end (a client still sending after an Error) arm nothing
  let heard = false; // a new socket has helloTimeoutMs to send its first message
  const resetIdle = () => {
    clearTimeout(idle);
    if (over) return;
    const ms = heard ? cfg.idleTimeoutMs : cfg.helloTimeoutMs;
    heard = true;
    idle = setTimeout(() => {
      if (between) conn.close(1000, 'idle');
      else conn.sendError(ErrorCode.LimitExceeded, `no message for ${ms} ms`);
    }, ms);
  };
  const phase = (name: string) => {
    clearTimeout(phaseTimer);
    phaseTimer = setTimeout(() => conn.sendError(ErrorCode.LimitExceeded, `the ${name} phase took longer than ${cfg.phaseTimeoutMs} ms`), cfg.phaseTimeoutMs);
  };
  ws.addEventListener('message', resetIdle);
  resetIdle();
  try {
    let store: Store;
    try {
      store = await storeP;
    } catch (e) {
      log({ error: ErrorCode.Internal, message: `store: ${(e as Error).message}` });
      conn.sendError(ErrorCode.Internal, 'internal error: the store cannot be opened');
      return;
    }
    for (let n = 0; ; n++) {
      between = n > 0;
      let endTurn: (() => void) | undefined;
      let began: Hello | undefined;
      const started = async (hello: Hello) => {
        between = false;
        // the sign-in the socket was opened with is checked again for every later session, so
        // a logout or an expired login also ends what an open socket may do
        if (n > 0 && !authorized()) throw new ProtocolError(ErrorCode.Unauthorized, 'the sign-in this connection was opened with has ended; sign in again');
        // waiting for a turn is not the client's silence
        clearTimeout(idle);
        endTurn = await turn?.();
        resetIdle();
        began = hello;
        await hooks?.start?.(hello);
      };
      const share = budget?.share();
      let ended: Ended = { more: false };
      try {
        ended = await oneSession({ conn, socket, store, cfg, log, client, phase, started, reserve: share?.take });
      } finally {
        share?.release();
        endTurn?.();
        if (began) hooks?.end?.({ op: began.op === Op.Pull ? 'pull' : 'push', name: began.name, version: ended.version });
      }
      clearTimeout(phaseTimer);
      if (!ended.more) break;
    }
  } finally {
    signedOut?.removeEventListener('abort', onSignOut);
    over = true;
    clearTimeout(idle);
    clearTimeout(phaseTimer);
  }
}

/** How one session ended: whether the connection goes on (false: closed by the client between
 *  sessions, or ended by an error), and the version a push committed or found unchanged. */
interface Ended {
  more: boolean;
  version?: number;
}

/** One session on the connection: Hello to Result. */
async function oneSession(s: SessionContext): Promise<Ended> {
  const { conn, socket, store, cfg, log, phase, reserve, client } = s;
  let t0 = 0; // the session's clock starts at its Hello: waiting for it is not its time
  const in0 = socket.bytesRead;
  const out0 = socket.bytesWritten;
  const extra = () => ({
    micros: Math.round((performance.now() - t0 - conn.waitedMs) * 1000),
    wireIn: socket.bytesRead - in0,
    wireOut: socket.bytesWritten - out0,
  });
  let hello: Hello | undefined;
  let committed: number | undefined;
  try {
    const h = (hello = await conn.expect(Msg.Hello));
    t0 = performance.now();
    conn.resetCounters();
    await s.started(h);
    phase('hello');
    checkHello(h, cfg);
    conn.hashLen = hashLength(hello.algo);
    const name = hello.name;
    const limits = { maxFileSize: cfg.maxFileSize, maxChunks: cfg.maxChunks };
    if (hello.op === Op.Push) {
      // the version the client built on, if it names one (BASIS_ABSENT: none, the name is new)
      const expect = hello.basisVersion === 0 ? undefined : hello.basisVersion === BASIS_ABSENT ? 0 : hello.basisVersion;
      const known = hello.known;
      // the file head, once: the latest version, the basis' entry and the commit's
      // compare-and-swap come from it. A push starts from the head as this process last read
      // or wrote it, when it has one (a guess, docs/store.md §4 step 0): the swap lands only if
      // it is still current, and a refusal decided from a guess is decided again from a read.
      // A push that may resume an interrupted upload (Hello's resume flag) reads it: whether
      // one may wait comes from its mark (§6), which a guess from before it would not show
      const resume = !!hello.resume;
      const refuses = (h: FileHead | null) => (expect !== undefined && expect !== (h?.versions.at(-1)?.version ?? 0)) || (!!known && !h?.versions.some((v) => v.version === known.version));
      let seen = resume ? await store.headSeen(name) : await store.headGuess(name);
      if (seen.guessed && refuses(seen.head)) seen = await store.headSeen(name);
      const head = seen.head;
      const latest = head?.versions.at(-1)?.version ?? 0;
      if (expect !== undefined && expect !== latest) {
        // the client's listing may lag the head (a server killed before its catalog's note)
        if (head) await store.noteListed(head).catch(() => {});
        throw new ProtocolError(ErrorCode.StaleBasis, expect ? `${name} is at version ${latest}, not ${expect}` : `${name} exists (version ${latest})`);
      }
      // The basis: the version the client knows (Hello's `known`: its Copies refer to it), else
      // the latest version of this name, or for a new name the most similar stored file,
      // picked from the Checksum List (see similarity.ts).
      const basisVersion = known?.version ?? latest;
      // a session from a guess that fails leaves no guess behind: the client's next try reads
      // the head. A refusal because a collection took what the push copies from is decided
      // again from a read: a basis removed since the guess is UnknownBasis, as a read at Hello
      // would have answered for a known version (the client pushes again without it) and as
      // for a basis found damaged (the client pushes again, reading the head)
      const unguess = async (e: unknown): Promise<never> => {
        if (!seen.guessed) throw e;
        store.forgetHead(name);
        if (basisVersion && e instanceof GcRefusal) {
          const now = await store.head(name).catch(() => undefined);
          if (now !== undefined && !now?.versions.some((v) => v.version === basisVersion)) {
            throw new ProtocolError(ErrorCode.UnknownBasis, known ? `${name} has no version ${basisVersion} (removed meanwhile): push again without it` : `${name} has no version ${basisVersion} (removed meanwhile), which this push built on: push again`);
          }
        }
        throw e;
      };
      let opened = basisVersion ? await knownOrLatest(store, name, basisVersion, !!known, head).catch(unguess) : null;
      try {
        const knownIndex = known && (await indexFor(store, cfg, hello, name, known.version, opened!.source, head));
        // (the Hello carries the first ROOT_PREFIX bytes of the root: a version that differs
        // and shares them is refused by the last Verdict's whole root, VerifyFailed)
        if (knownIndex && !Buffer.from(knownIndex.root.subarray(0, ROOT_PREFIX)).equals(known.root)) {
          throw new ProtocolError(ErrorCode.UnknownBasis, `version ${known.version} of ${name} is not the one the client knows`);
        }
        // (none against a known version: the client knows that basis, docs/protocol.md §3)
        if (!known) await conn.send({ type: Msg.Ready, version: basisVersion, size: opened?.source.size ?? 0 });
        let similarTo: string | undefined;
        const basis = opened
          ? { index: knownIndex || (await indexFor(store, cfg, hello, name, latest, opened.source, head)), source: opened.source, verified: opened.verified }
          : async (target: { fastfps: Uint32Array }) => {
              const like = await store.similar(target.fastfps);
              if (!like) return null;
              opened = await store.openBasis(like.name, like.version, undefined, { asked: false }).catch((e) => {
                if (e instanceof DamageError) return null; // no basis
                throw e;
              });
              if (!opened) return null;
              similarTo = like.name;
              return { index: await indexFor(store, cfg, h, like.name, like.version, opened.source), source: opened.source };
            };
        // A writer that named its basis must still be building on the latest at commit time.
        const sinkFor = store.sinkFor(name, basisVersion, hello.params, hello.algo, expect, client, seen, hello.modified);
        // An interrupted upload of this name waiting to be resumed, for a push that may resume
        // one (never one with a known basis: its sender sends Copies, not its whole list
        // first): match once the whole list is in, whose digest says whether this push resumes
        // it. A push that may not looks for none: one it misses costs only bytes sent again.
        const wholeList = resume && (await store.holdsResumable(name, latest, head));
        const out = await receiveTarget(conn, hello.params, hello.algo, basis, sinkFor, {
          limits,
          resultExtra: extra,
          expectedSize: hello.size,
          wholeList,
          onPhase: phase,
          refine: cfg.refine && !cfg.paperExact ? DEFAULT_FINE : undefined,
          maxRefineBytes: cfg.maxRefineBytes,
          known: !!known,
          reserve,
        }).catch((e) => {
          // damage of the basis found by its verification, a read or the commit's verification:
          // nothing was stored; the client pushes again, and the next session through this
          // process verifies the basis before building on it (the read noted it damaged) and
          // finds the damage there
          if (e instanceof DamageError && opened && e.version === opened.source.id) throw new ProtocolError(ErrorCode.UnknownBasis, `${e.message}; the version this push builds on is damaged on the store: push again without it`);
          throw e;
        });
        committed = out.version;
        log({ op: 'push', name, version: out.version, known: known?.version, resume, guessed: seen.guessed, size: out.index.size, matchedBytes: out.matchedBytes, refinedBytes: out.refinedBytes, refineListed: out.refineListed, literalBytes: out.literalBytes, resumedChunks: out.resumedChunks, tokens: out.tokens, similarTo, ms: Math.round(performance.now() - t0) });
      } catch (e) {
        await unguess(e);
      } finally {
        await opened?.close();
      }
    } else {
      // the head, once: the version, its modification time and its index come from it
      const head = await store.head(name);
      const version = hello.basisVersion || (head?.versions.at(-1)?.version ?? 0);
      if (!version) throw new ProtocolError(ErrorCode.NotFound, `${name} does not exist`);
      const opened = await store.openVersion(name, version, head);
      try {
        // the version's modification time, for the client to set on the file it writes
        const modified = head?.versions.find((v) => v.version === version)?.modified;
        await conn.send({ type: Msg.Ready, version, size: opened.source.size, ...(modified !== undefined && { modified }) });
        const target = await indexFor(store, cfg, hello, name, version, opened.source, head);
        phase('checksums');
        const out = await sendTarget(conn, hello.algo, { size: target.size, parts: indexParts(target) }, opened.source, {
          splitThreshold: cfg.splitThreshold,
          reserve,
          // (the wait for the Result stays on the Delta phase's clock)
          onPhase: (p) => void (p !== 'result' && phase(p)),
        });
        log({ op: 'pull', name, version, size: target.size, literalBytes: out.literalBytes, ms: Math.round(performance.now() - t0) });
      } finally {
        await opened.close();
      }
    }
    return { more: true, version: committed };
  } catch (e) {
    const err = e as Error;
    if (err instanceof ConnectionLost || err instanceof RemoteError) {
      // a client that closes between sessions is done, not aborted
      if (hello) log({ op: hello.op === Op.Pull ? 'pull' : 'push', name: hello.name, aborted: err.message });
      conn.close();
    } else {
      const code = err instanceof ProtocolError ? err.code : ErrorCode.Internal;
      const message = err instanceof ProtocolError ? err.message : isDiskFull(err) ? new WriteFailed(err).message : 'internal error; the previous version is intact';
      log({ op: hello?.op === Op.Pull ? 'pull' : 'push', name: hello?.name, error: code, message: err.message });
      conn.sendError(code, message);
    }
    return { more: false };
  }
}

export { clientLabel } from './http/guard.ts';
