// A fuzzer for the server's session state machine (harness: shared by server/test/fuzz.test.ts
// and bench/hardening/run.ts). It records what real clients send in a few scenarios (push with
// and without a basis, identical, empty, other chunking, against a known version in one round
// trip, pull), then replays those transcripts to the real session code and the real store with
// one or more mutations each: dropped, replayed, swapped or foreign messages, fields out of
// range, lengths that do not add up, garbled bytes, a wrong root, truncation. Invariants per case:
//   - the session ends (by Result, Error or its idle timeout) — no crash, no hang;
//   - an Error carries a known code;
//   - a stored new version is exactly the scenario's target; the basis stays intact;
//   - nothing is left in the store's tmp/ once interrupted uploads are dropped.
// The transport is an in-memory WebSocket pair so that 10^5 cases run in minutes; the real
// `ws` transport is exercised by the other server tests.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { decode, decodeFrame, encode } from '../shared/src/wire/codec.ts';
import { type Message, type Piece } from '../shared/src/wire/messages.ts';
import { type ChunkParams, DEFAULT_PARAMS, ErrorCode, Msg } from '../shared/src/wire/protocol.ts';
import { MemoryKnown } from '../shared/src/session/known.ts';
import { Rng, applyEdits, randomBytes, textBytes } from './testdata.ts';
import { pull, push } from '../shared/src/session/delta-client.ts';
import '../shared/src/chunking/wasm.ts';
import { type ServerConfig, loadConfig } from '../server/src/config.ts';
import { Store } from '../server/src/store/store.ts';
import { Repo } from '../server/src/store/repo.ts';
import { localBackend } from '../server/src/store/local.ts';
import { mark, runGc } from '../server/src/store/gc.ts';
import { JOURNAL_PREFIX } from '../server/src/store/journal.ts';
import { runConnection } from '../server/src/sessions.ts';
import { memPair } from './mem-socket.ts';


interface Scenario {
  label: string;
  name: string;
  op: 'push' | 'pull';
  /** client frames in order */
  frames: Uint8Array[];
  hashLen: number;
  /** what a successful push must store */
  target?: Uint8Array;
  basis?: Uint8Array;
}

export class Fuzzer {
  store!: Store;
  /** content objects written since the case began */
  written: string[] = [];
  cfg!: ServerConfig;
  dir!: string;
  scenarios: Scenario[] = [];
  stats = { cases: 0, results: 0, errors: new Map<number, number>(), silent: 0 };

  async setup() {
    this.dir = mkdtempSync(path.join(process.platform === 'linux' ? '/dev/shm' : '/tmp', 'dsync-fuzz-'));
    this.cfg = loadConfig({ data: this.dir, 'idle-timeout-ms': '15', 'hello-timeout-ms': '15', 'max-chunks': '100000' }, {});
    // the real local directory; the keys each case writes are noted, to find what it leaves
    const real = localBackend(this.dir);
    this.store = new Store(new Repo({ ...real, putIfAbsent: (key, body) => (this.written.push(key), real.putIfAbsent(key, body)) }), 'local');
    const r = new Rng(42);
    const mixed = (n: number) => {
      const a = textBytes(r.next64(), n >> 1);
      const b = randomBytes(r.next64(), n - (n >> 1));
      const out = new Uint8Array(n);
      out.set(a);
      out.set(b, a.length);
      return out;
    };
    const basis = mixed(200_000);
    const small: ChunkParams = { min: 64, avg: 256, max: 1024, op: 1, every: 8 };
    const cases: [string, Uint8Array | null, Uint8Array, ChunkParams, number][] = [
      ['new file', null, mixed(40_000), DEFAULT_PARAMS, 3],
      ['edit', basis, applyEdits(basis, r, { kind: 'insert', total: 300 }), DEFAULT_PARAMS, 3],
      ['inverse edit, sha256', basis, applyEdits(basis, r, { kind: 'inverse', total: 100 }), DEFAULT_PARAMS, 2],
      ['identical', basis, basis, DEFAULT_PARAMS, 3],
      ['emptied', basis, new Uint8Array(0), DEFAULT_PARAMS, 3],
      ['small chunks, sha1', basis.subarray(0, 30_000), applyEdits(basis.subarray(0, 30_000), r, { kind: 'cut', total: 500 }), small, 1],
    ];
    for (const [label, b, target, params, algo] of cases) {
      const name = `s${this.scenarios.length}`;
      if (b) await this.record({ label, name, op: 'push', frames: [], hashLen: 0 }, b, params, algo, true);
      const sc: Scenario = { label, name, op: 'push', frames: [], hashLen: algo === 1 ? 20 : 32, target, basis: b ?? undefined };
      await this.record(sc, target, params, algo, false);
      this.scenarios.push(sc);
    }
    // a push against a known version: the client pushed the basis itself, and sends its own
    // Copies, refined Delta Bytes (copies of the basis) and Verdicts without waiting; refined
    // against the basis cut finer, or (kept) against its bytes, byte by byte
    for (const [label, keep] of [['known basis', false], ['kept basis', true]] as const) {
      const known = new MemoryKnown(undefined, undefined, keep);
      const kb = mixed(150_000);
      const kName = `s${this.scenarios.length}`;
      await this.record({ label, name: kName, op: 'push', frames: [], hashLen: 0 }, kb, DEFAULT_PARAMS, 3, true, known);
      const kt = applyEdits(kb, r, { kind: 'insert', total: 2000 });
      const ksc: Scenario = { label, name: kName, op: 'push', frames: [], hashLen: 32, target: kt, basis: kb };
      await this.record(ksc, kt, DEFAULT_PARAMS, 3, false, known);
      assert.ok(ksc.frames.some((f) => f[0] === Msg.Copies), `the ${label} transcript has Copies`);
      this.scenarios.push(ksc);
    }
    // a pull: the client is the receiver (its local copy is an older file)
    const pullSc: Scenario = { label: 'pull', name: 's1', op: 'pull', frames: [], hashLen: 32, basis };
    await this.recordPull(pullSc, applyEdits(basis, r, { kind: 'cut', total: 200 }));
    this.scenarios.push(pullSc);
  }

  /** Runs one real session between the client library and the server; records client frames.
   *  With `keep` the new version stays (setting up a basis), else it is removed again. */
  private async record(sc: Scenario, bytes: Uint8Array, params: ChunkParams, algo: number, keep: boolean, known?: MemoryKnown) {
    const [c, s] = memPair();
    const session = runConnection(s, { bytesRead: 0, bytesWritten: 0 }, this.store, { ...this.cfg, idleTimeoutMs: 10_000, helloTimeoutMs: 10_000 }, () => {});
    // slices of 16 KiB: a push sends its Checksum List in parts, and several Verdicts, each
    // followed by its Delta Bytes, come between them
    const before = await this.store.latest(sc.name);
    const rep = await push(bufferSource(bytes), { url: 'ws://fuzz.invalid/sync', name: sc.name, params, algo, sliceBytes: 16 << 10, known, WebSocket: class { constructor() { queueMicrotask(() => c.emit('open', {})); return c; } } as any });
    await session;
    sc.frames = oneEach(c.sent, algo === 1 ? 20 : 32);
    // (an identical push is no new version: nothing to remove)
    if (!keep && rep.version > before) await this.dropVersion(sc.name, rep.version);
  }

  private async recordPull(sc: Scenario, local: Uint8Array) {
    const [c, s] = memPair();
    const session = runConnection(s, { bytesRead: 0, bytesWritten: 0 }, this.store, { ...this.cfg, idleTimeoutMs: 10_000, helloTimeoutMs: 10_000 }, () => {});
    await pull({
      url: 'ws://fuzz.invalid/sync',
      name: sc.name,
      basis: bufferSource(local),
      sink: { write: async () => {}, commit: async () => 0, abort: async () => {} },
      WebSocket: class { constructor() { queueMicrotask(() => c.emit('open', {})); return c; } } as any,
    });
    await session;
    sc.frames = oneEach(c.sent, 32);
  }

  private async dropVersion(name: string, v: number) {
    // and collect its objects at once (nothing else runs here), so that what an aborted upload
    // leaves stands out
    await this.store.remove(name, v);
    await runGc(this.store.repo, { minAgeMs: 0, windowMs: 0, repackPercent: 20 });
  }

  /** Runs one mutated replay and checks the invariants. */
  async runCase(r: Rng) {
    const sc = this.scenarios[r.int(this.scenarios.length)];
    const frames = mutate(sc.frames, r, sc.hashLen);
    const before = await this.store.versionNumbers(sc.name);
    const [c, s] = memPair();
    const session = runConnection(s, { bytesRead: 0, bytesWritten: 0 }, this.store, this.cfg, () => {});
    for (const f of frames) c.send(f);
    let watchdog: NodeJS.Timeout | undefined;
    await Promise.race([
      session,
      new Promise((_, reject) => (watchdog = setTimeout(() => reject(new Error(`session hung: ${sc.label}`)), 10_000))),
    ]);
    clearTimeout(watchdog);
    this.stats.cases++;
    // what the server said
    let result: Extract<Message, { type: typeof Msg.Result }> | null = null;
    for (const f of s.sent) {
      if (f[0] !== Msg.Error && f[0] !== Msg.Result) continue; // others may use a mutated algorithm's H
      const m = decode(f, sc.hashLen);
      if (m.type === Msg.Error) {
        assert.ok(Object.values(ErrorCode).includes(m.code as never), `unknown error code ${m.code}`);
        this.stats.errors.set(m.code, (this.stats.errors.get(m.code) ?? 0) + 1);
      }
      if (m.type === Msg.Result) result = m;
    }
    const after = await this.store.versionNumbers(sc.name);
    const added = after.filter((v) => !before.includes(v));
    if (sc.op === 'push' && added.length) {
      // a new version exists only if it is exactly the target
      assert.equal(added.length, 1);
      assert.deepEqual(await this.store.bytes(sc.name, added[0]), Buffer.from(sc.target!), `${sc.label}: stored a wrong file`);
      await this.dropVersion(sc.name, added[0]);
    } else {
      assert.deepEqual(after, before, `${sc.label}: versions changed without a commit`);
    }
    if (result) this.stats.results++;
    if (!result && !s.sent.some((f) => f[0] === Msg.Error)) this.stats.silent++;
    // the basis is intact (checked on a sample: it costs a read)
    if (sc.basis && this.stats.cases % 50 === 0) assert.deepEqual(await this.store.bytes(sc.name, 1), Buffer.from(sc.basis));
    // what this case wrote and left in the store is referenced by a version or an upload
    const written = this.written.splice(0);
    const left: string[] = [];
    // a journal mark is no upload's object: it is deleted in the background once its change is
    // noted (on a loaded machine, after this check), or left for the repair pass (journal.ts)
    for (const k of written) if (!k.startsWith(JOURNAL_PREFIX) && (await this.store.backend.size(k)) !== null) left.push(k);
    if (left.length) {
      const m = await mark(this.store.repo);
      const stray = left.filter((k) => !(k.startsWith('data/') ? m.segments : m.indexes).has(k.split('/')[2]));
      assert.deepEqual(stray, [], `${sc.label}: an aborted upload left objects`);
    }
  }

  cleanup() {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Applies 1–3 random mutations to a transcript. */
/** The client's frames cut into one message each (a frame carries one or more, the sender
 *  batching what it sends between two waits: docs/protocol.md §1), so that each is mutated and
 *  sent on its own. */
function oneEach(frames: Uint8Array[], hashLen: number): Uint8Array[] {
  return frames.flatMap((f) => {
    if (f[0] === Msg.Hello) return [f]; // (a Hello goes alone; the session's H follows it)
    let at = 0;
    return decodeFrame(f, hashLen).map(({ bytes }) => f.subarray(at, (at += bytes)));
  });
}

export function mutate(frames: Uint8Array[], r: Rng, hashLen: number): Uint8Array[] {
  let out: Uint8Array[] = frames.map((f) => f.slice());
  const n = 1 + r.int(3);
  for (let k = 0; k < n && out.length; k++) {
    const i = r.int(out.length);
    switch (r.int(9)) {
      case 0: // drop a message
        out.splice(i, 1);
        break;
      case 1: // replay a message
        out.splice(i, 0, out[i].slice());
        break;
      case 2: // swap two neighbours
        if (i + 1 < out.length) [out[i], out[i + 1]] = [out[i + 1], out[i]];
        break;
      case 3: // truncate the transcript (client disconnects)
        out = out.slice(0, i);
        break;
      case 4: // garble bytes
        for (let j = 0; j < 1 + r.int(4); j++) out[i][r.int(out[i].length)] = r.int(256);
        break;
      case 5: // cut a frame short or extend it
        out[i] = r.int(2) ? out[i].subarray(0, r.int(out[i].length)) : concat(out[i], randomBytes(r.next64(), 1 + r.int(16)));
        break;
      case 6: // insert a foreign message
        out.splice(i, 0, foreign(r, hashLen));
        break;
      default: // change one field of a decoded message
        out[i] = fieldMutation(out[i], r, hashLen);
    }
  }
  return out;
}

function concat(a: Uint8Array, b: Uint8Array) {
  const c = new Uint8Array(a.length + b.length);
  c.set(a);
  c.set(b, a.length);
  return c;
}

const edge = (r: Rng, v: number) => [0, 1, v - 1, v + 1, 2 ** 32 - 1, r.int(2 ** 32), v * 2][r.int(7)] >>> 0;

function foreign(r: Rng, H: number): Uint8Array {
  const hash = randomBytes(r.next64(), H || 32);
  const ms: Message[] = [
    { type: Msg.SplitRequest, tokens: Uint32Array.of(r.int(5), r.int(5)) },
    { type: Msg.SplitHashes, token: r.int(3), hashes: hash },
    { type: Msg.Verdict, upTo: r.int(40), root: r.int(2) ? hash : null, failed: [{ token: r.int(4), bitmap: r.int(2) ? Uint8Array.of(r.int(256)) : null }] },
    { type: Msg.Delta, indices: Uint32Array.of(r.int(40)), chunks: [randomBytes(r.next64(), r.int(3000))] },
    { type: Msg.TokensEnd, count: r.int(3), resumeFrom: r.int(3) },
    { type: Msg.Tokens, upTo: r.int(30), first: Uint32Array.of(r.int(30)), count: Uint32Array.of(r.int(30)), hashes: hash },
    { type: Msg.Checksums, fastfps: Uint32Array.of(r.int(2 ** 32)), lengths: Uint32Array.of(r.int(70_000)) },
    { type: Msg.ChecksumsEnd, count: r.int(30), size: r.int(300_000) },
    { type: Msg.Result, version: 1, root: hash, micros: 0, wireIn: 0, wireOut: 0 },
    { type: Msg.Error, code: r.int(20), message: 'client error' },
    { type: Msg.Ready, version: 1, size: 0 },
    { type: Msg.Copies, listed: Uint32Array.of(1), fastfps: Uint32Array.of(r.int(2 ** 32)), lengths: Uint32Array.of(r.int(70_000)), count: Uint32Array.of(r.int(30)), basisFirst: Uint32Array.of(r.int(30)) },
  ];
  return encode(ms[r.int(ms.length)], H || 32);
}

function fieldMutation(frame: Uint8Array, r: Rng, H: number): Uint8Array {
  let m: Message;
  try {
    m = decode(frame, H || 32);
  } catch {
    return frame;
  }
  switch (m.type) {
    case Msg.Hello: {
      const f = r.int(m.known ? 10 : 8);
      if (f === 0) m.version = r.int(4);
      else if (f === 1) m.op = r.int(4);
      else if (f === 2) m.params = { ...m.params, [(['min', 'avg', 'max', 'op', 'every'] as const)[r.int(5)]]: edge(r, m.params.min) % 70000 };
      else if (f === 3) m.algo = r.int(5);
      else if (f === 4) m.size = edge(r, m.size);
      else if (f === 5) m.basisVersion = r.int(4);
      else if (f === 6) m.name = ['', '../x', 'a/../../b', 'CON', 'x\u0001y', 's0', 's1', 'other'][r.int(8)];
      else if (f === 7) m.name = m.name + '/sub';
      else if (f === 8) m.known!.version = edge(r, m.known!.version) || 1;
      else m.known!.root[r.int(m.known!.root.length)] ^= 1;
      break;
    }
    case Msg.Copies: {
      if (!m.count.length) break;
      const i = r.int(m.count.length);
      const f = r.int(4);
      // a run or a listed chunk changed; a run one chunk off (what a stale chunk index says)
      if (f === 0) m.count[i] = edge(r, m.count[i]);
      else if (f === 1) m.basisFirst[i] = edge(r, m.basisFirst[i]);
      else if (f === 2) m.basisFirst[i] += r.int(2) ? 1 : -1;
      else if (m.lengths.length) m.lengths[r.int(m.lengths.length)] = edge(r, m.lengths[0]);
      else m.listed[i] = edge(r, m.listed[i]);
      break;
    }
    case Msg.Checksums: {
      const i = r.int(Math.max(1, m.lengths.length));
      if (m.lengths.length === 0) break;
      if (r.int(2)) m.lengths[i] = edge(r, m.lengths[i]);
      else m.fastfps[i] = r.int(2 ** 32);
      break;
    }
    case Msg.ChecksumsEnd:
      if (r.int(2)) m.count = edge(r, m.count);
      else m.size = edge(r, m.size);
      break;
    case Msg.Verdict: {
      const f = r.int(5);
      if (f === 0) m.upTo = edge(r, m.upTo);
      else if (f === 1 && m.root) m.root[r.int(m.root.length)] ^= 1;
      else if (f === 1) m.root = randomBytes(r.next64(), H || 32);
      else if (f === 2 && m.root) m.root = null;
      else if (m.failed.length && r.int(2)) m.failed[r.int(m.failed.length)].token = edge(r, 0);
      else m.failed.push({ token: r.int(6), bitmap: r.int(2) ? randomBytes(r.next64(), r.int(4)) : null });
      break;
    }
    case Msg.Delta: {
      if (!m.indices.length) break;
      const i = r.int(m.indices.length);
      const f = r.int(4);
      const c = m.chunks[i];
      if (f === 0) m.indices[i] = edge(r, m.indices[i]);
      else if (f === 1 && c instanceof Uint8Array) m.chunks[i] = c.subarray(0, r.int(c.length + 1));
      else if (f === 1) m.chunks[i] = c.length > 1 && r.int(2) ? c.slice(0, -1) : (c as Piece[]).map((p) => (p instanceof Uint8Array ? p : { ...p, length: edge(r, p.length) }));
      else if (f === 2 && c instanceof Uint8Array) {
        const d = c.slice();
        if (d.length) d[r.int(d.length)] ^= 0xff;
        m.chunks[i] = d;
      } else if (f === 2) {
        // a copy from elsewhere in the basis (or beyond it), or a few bytes off (what kept bytes
        // that are stale or damaged make), or a changed literal piece
        const shift = r.int(2) ? 0 : r.int(9) - 4;
        m.chunks[i] = (c as Piece[]).map((p) => (p instanceof Uint8Array ? p.map((x) => x ^ 1) : { ...p, offset: shift ? Math.max(0, p.offset + shift) : edge(r, p.offset) }));
      } else {
        m.indices = Uint32Array.from([...m.indices, m.indices[i]]);
        m.chunks = [...m.chunks, m.chunks[i]];
      }
      break;
    }
    case Msg.Tokens:
      if (m.first.length && r.int(2)) m.first[r.int(m.first.length)] = edge(r, m.first[0]);
      else m.upTo = edge(r, m.upTo);
      break;
    case Msg.TokensEnd:
      if (r.int(2)) m.count = edge(r, m.count);
      else m.resumeFrom = edge(r, m.resumeFrom);
      break;
    case Msg.Result:
      m.root[r.int(m.root.length)] ^= 1;
      break;
    case Msg.BasisChecksums: {
      const f = r.int(4);
      if (f === 0) m.offset = edge(r, m.offset);
      else if (f === 1 && m.lengths.length) m.lengths[r.int(m.lengths.length)] = edge(r, m.lengths[0]);
      else if (f === 2) m.fine = { ...m.fine, [(['min', 'avg', 'max'] as const)[r.int(3)]]: edge(r, m.fine.avg) };
      else if (m.prefixes.length) m.prefixes[r.int(m.prefixes.length)] ^= 1;
      break;
    }
    default:
      return frame;
  }
  try {
    return encode(m, H || 32);
  } catch {
    return frame;
  }
}
