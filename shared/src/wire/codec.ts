/**
 * The binary codec of the Dsync wire protocol: one function to encode and one to decode every
 * message of `docs/protocol.md`. All integers are little-endian; `H` is the digest length of
 * the session's strong hash algorithm (20 for SHA-1, 32 for SHA-256 and BLAKE3).
 *
 * Decoding is strict: an unknown type, a truncated field, a count above the limit, trailing
 * bytes, invalid UTF-8 or a varint that is too long or not in its shortest form throw a
 * ProtocolError(Malformed); nothing is read out of bounds.
 *
 * The parts that grow with the file and the edit (Checksum List entries, Delta pieces, Copies,
 * Basis Checksums) are encoded and decoded in codec-lists.ts.
 */
import { DEFAULT_LIMITS, type Limits, MAX_MODIFIED_MS } from '../base/limits.ts';
import { Reader, Writer, malformed, varintSize } from './frame-bytes.ts';
import { decodeBasisChecksums, decodeCopies, decodeDelta, encodeBasisChecksums, encodeCopies, encodeDelta, listSize, readList, u32Of, writeList } from './codec-lists.ts';
import { type Failed, type Message } from './messages.ts';
import { DEFAULT_PARAMS, HELLO_ALGO_SHIFT, HelloFlag, Msg, ProtocolError, ROOT_CHECK, ROOT_PREFIX, ReadyFlag, sameParams } from './protocol.ts';

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true });

/** A modification time a message may carry: an integer in 0 … MAX_MODIFIED_MS. */
const isModified = (ms: number) => Number.isSafeInteger(ms) && ms >= 0 && ms <= MAX_MODIFIED_MS;
function checkModified(ms: number | undefined) {
  if (ms !== undefined && !isModified(ms)) throw new RangeError(`modification time ${ms} is not an integer in 0…${MAX_MODIFIED_MS}`);
}
/** Reads a modification time (varint), Malformed outside 0 … MAX_MODIFIED_MS. */
function readModified(r: Reader): number {
  const ms = r.varint('modified');
  if (ms > MAX_MODIFIED_MS) throw malformed(`modification time ${ms} is after ${MAX_MODIFIED_MS} (year 9999)`);
  return ms;
}

/** The last Verdict's root: the whole root, of which its first ROOT_CHECK bytes travel. */
function checkRootCheck(h: Uint8Array) {
  if (h.length < ROOT_CHECK) throw new RangeError(`root must be at least ${ROOT_CHECK} bytes, got ${h.length}`);
}
/** A root of which a message carries the first ROOT_PREFIX bytes (the whole root may be given). */
function checkPrefix(h: Uint8Array, what: string) {
  if (h.length < ROOT_PREFIX) throw new RangeError(`${what} must be at least ${ROOT_PREFIX} bytes, got ${h.length}`);
}

/** Encodes a message into one binary frame. `hashLen` is H of the session's algorithm;
 *  `room(size)`: a buffer of at least `size` bytes to write a Delta message into (the frame is
 *  a view of it) instead of a new one. */
export function encode(m: Message, hashLen = 32, room?: (size: number) => Uint8Array): Uint8Array {
  switch (m.type) {
    case Msg.Hello: {
      const name = utf8.encode(m.name);
      if (m.known) checkPrefix(m.known.root, 'known root');
      if (m.known && !(m.known.version >= 1)) throw new RangeError(`known version ${m.known.version} must be at least 1`);
      checkModified(m.modified);
      const params = !sameParams(m.params, DEFAULT_PARAMS);
      const flags = (m.resume ? HelloFlag.Resume : 0) | (m.modified !== undefined ? HelloFlag.Modified : 0) | (m.known ? HelloFlag.Known : 0) | (params ? HelloFlag.Params : 0);
      if (!(m.algo >= 0 && m.algo <= 15)) throw new RangeError(`algo ${m.algo} does not fit in Hello's flags (0 … 15)`);
      let size = 4 + varintSize(m.size) + varintSize(m.basisVersion) + varintSize(name.length) + name.length;
      if (params) size += varintSize(m.params.min) + varintSize(m.params.avg) + varintSize(m.params.max) + 2;
      if (m.known) size += varintSize(m.known.version) + ROOT_PREFIX;
      if (m.modified !== undefined) size += varintSize(m.modified);
      const w = new Writer(size);
      w.u8(m.type);
      w.u8(m.version);
      w.u8(m.op);
      w.u8(flags | (m.algo << HELLO_ALGO_SHIFT));
      w.varint(m.size);
      w.varint(m.basisVersion);
      w.varint(name.length);
      w.bytes(name);
      if (params) {
        w.varint(m.params.min);
        w.varint(m.params.avg);
        w.varint(m.params.max);
        w.u8(m.params.op);
        w.u8(m.params.every);
      }
      if (m.known) {
        w.varint(m.known.version);
        w.bytesOf(m.known.root, 0, ROOT_PREFIX);
      }
      if (m.modified !== undefined) w.varint(m.modified);
      return w.done();
    }
    case Msg.Ready: {
      checkModified(m.modified);
      const w = new Writer(2 + varintSize(m.version) + varintSize(m.size) + (m.modified !== undefined ? varintSize(m.modified) : 0));
      w.u8(m.type);
      w.u8(m.modified !== undefined ? ReadyFlag.Modified : 0);
      w.varint(m.version);
      w.varint(m.size);
      if (m.modified !== undefined) w.varint(m.modified);
      return w.done();
    }
    case Msg.Checksums: {
      const n = m.lengths.length;
      if (m.fastfps.length !== n) throw new RangeError('fastfps and lengths differ in length');
      const w = new Writer(1 + varintSize(n) + listSize(m.lengths, 0, n));
      w.u8(m.type);
      w.varint(n);
      writeList(w, m.fastfps, m.lengths, 0, n);
      return w.done();
    }
    case Msg.ChecksumsEnd: {
      const w = new Writer(1 + varintSize(m.count) + varintSize(m.size));
      w.u8(m.type);
      w.varint(m.count);
      w.varint(m.size);
      return w.done();
    }
    case Msg.Tokens: {
      const n = m.first.length;
      if (m.count.length !== n || m.hashes.length !== n * hashLen) throw new RangeError('token arrays differ');
      let size = 1 + varintSize(m.upTo) + varintSize(n) + n * hashLen;
      for (let i = 0; i < n; i++) size += varintSize(m.first[i]) + varintSize(m.count[i]);
      const w = new Writer(size);
      w.u8(m.type);
      w.varint(m.upTo);
      w.varint(n);
      for (let i = 0; i < n; i++) {
        w.varint(m.first[i]);
        w.varint(m.count[i]);
        w.bytesOf(m.hashes, i * hashLen, hashLen);
      }
      return w.done();
    }
    case Msg.TokensEnd: {
      const w = new Writer(1 + varintSize(m.count) + varintSize(m.resumeFrom));
      w.u8(m.type);
      w.varint(m.count);
      w.varint(m.resumeFrom);
      return w.done();
    }
    case Msg.SplitRequest: {
      let size = 1 + varintSize(m.tokens.length);
      for (const t of m.tokens) size += varintSize(t);
      const w = new Writer(size);
      w.u8(m.type);
      w.varint(m.tokens.length);
      for (const t of m.tokens) w.varint(t);
      return w.done();
    }
    case Msg.SplitHashes: {
      if (m.hashes.length % hashLen) throw new RangeError('split hashes not a multiple of H');
      const n = m.hashes.length / hashLen;
      const w = new Writer(1 + varintSize(m.token) + varintSize(n) + m.hashes.length);
      w.u8(m.type);
      w.varint(m.token);
      w.varint(n);
      w.bytes(m.hashes);
      return w.done();
    }
    case Msg.Verdict: {
      if (m.root) checkRootCheck(m.root);
      // n and final in one varint: 2n + final
      const nf = 2 * m.failed.length + (m.root ? 1 : 0);
      let size = 1 + varintSize(m.upTo) + (m.root ? ROOT_CHECK : 0) + varintSize(nf);
      for (const f of m.failed) size += varintSize(f.token) + 1 + (f.bitmap ? varintSize(f.bitmap.length) + f.bitmap.length : 0);
      const w = new Writer(size);
      w.u8(m.type);
      w.varint(m.upTo);
      w.varint(nf);
      if (m.root) w.bytesOf(m.root, 0, ROOT_CHECK);
      for (const f of m.failed) {
        w.varint(f.token);
        w.u8(f.bitmap ? 1 : 0);
        if (f.bitmap) {
          w.varint(f.bitmap.length);
          w.bytes(f.bitmap);
        }
      }
      return w.done();
    }
    case Msg.Delta:
      return encodeDelta(m, room);
    case Msg.Copies:
      return encodeCopies(m);
    case Msg.BasisChecksums:
      return encodeBasisChecksums(m);
    case Msg.Result: {
      checkPrefix(m.root, 'root');
      const w = new Writer(1 + varintSize(m.version) + ROOT_PREFIX + varintSize(m.micros) + varintSize(m.wireIn) + varintSize(m.wireOut));
      w.u8(m.type);
      w.varint(m.version);
      w.bytesOf(m.root, 0, ROOT_PREFIX);
      w.varint(m.micros);
      w.varint(m.wireIn);
      w.varint(m.wireOut);
      return w.done();
    }
    case Msg.Error: {
      let text = utf8.encode(m.message);
      for (let keep = 1000; text.length > 1024; keep -= 100) text = utf8.encode(m.message.slice(0, keep) + '…');
      const w = new Writer(1 + 2 + 2 + text.length);
      w.u8(m.type);
      w.u16(m.code);
      w.u16(text.length);
      w.bytes(text);
      return w.done();
    }
  }
}

/** The head of a Delta Run: type, n, then each chunk's index and length; the chunks' bytes
 *  follow it one after another (a browser sends them as slices of the file, never read by JS). */
export function deltaRunHead(indices: Uint32Array, lengths: Uint32Array): Uint8Array {
  const w = new Writer(5 + 8 * indices.length);
  w.u8(Msg.DeltaRun);
  w.u32(indices.length);
  for (let i = 0; i < indices.length; i++) {
    w.u32(indices[i]);
    w.u32(lengths[i]);
  }
  return w.done();
}

/**
 * Decodes a frame that holds one message. Byte arrays in the result are views into `frame` (no
 * copies). Throws ProtocolError(Malformed) on any deviation from docs/protocol.md, bytes after
 * the message included.
 */
export function decode(frame: Uint8Array, hashLen = 32, limits: Limits = DEFAULT_LIMITS): Message {
  const r = new Reader(frame);
  const m = decodeNext(r, hashLen, limits);
  r.end();
  return m;
}

/**
 * Decodes every message of a frame (a frame carries one or more, docs/protocol.md §1), each with
 * its size in bytes; Malformed as `decode`, a message cut off at the frame's end included.
 * `hashLenAfter(m)`: H for the messages after `m` (a Hello sets the session's algorithm).
 */
export function decodeFrame(frame: Uint8Array, hashLen = 32, limits: Limits = DEFAULT_LIMITS, hashLenAfter?: (m: Message) => number): { m: Message; bytes: number }[] {
  const r = new Reader(frame);
  const out: { m: Message; bytes: number }[] = [];
  do {
    const at = r.pos;
    const m = decodeNext(r, hashLen, limits);
    out.push({ m, bytes: r.pos - at });
    if (hashLenAfter) hashLen = hashLenAfter(m);
  } while (r.pos < frame.length);
  return out;
}

/** Reads a u32 field written as a varint (Malformed above 2^32 − 1). */
const u32v = (r: Reader, what: string) => u32Of(r.varint(what), what);

/** Reads one message at the reader's position. */
function decodeNext(r: Reader, hashLen: number, limits: Limits): Message {
  const type = r.u8('type');
  const maxN = limits.maxEntriesPerMessage;
  let m: Message;
  switch (type) {
    case Msg.Hello: {
      const version = r.u8('version');
      const op = r.u8('op');
      const bits = r.u8('flags');
      // the four flags in bits 0–3, the strong hash's algo in bits 4–7 (the server checks it)
      const flags = bits & 0x0f;
      const algo = bits >> HELLO_ALGO_SHIFT;
      const size = r.varint('size');
      const basisVersion = u32v(r, 'basis version');
      const nameLen = r.varint('name length');
      if (nameLen > limits.maxNameBytes) throw malformed(`name of ${nameLen} bytes exceeds ${limits.maxNameBytes}`);
      let name: string;
      try {
        name = utf8Strict.decode(r.bytes(nameLen, 'name'));
      } catch (e) {
        if (e instanceof ProtocolError) throw e;
        throw malformed('name is not valid UTF-8');
      }
      const params = flags & HelloFlag.Params ? { min: u32v(r, 'min'), avg: u32v(r, 'avg'), max: u32v(r, 'max'), op: r.u8('fastfp op'), every: r.u8('fastfp distance') } : { ...DEFAULT_PARAMS };
      // one encoding per Hello: the default chunking is left out, never given
      if (flags & HelloFlag.Params && sameParams(params, DEFAULT_PARAMS)) throw malformed('chunking parameters given that are the default');
      m = { type, version, op, params, algo, size, basisVersion, name };
      if (flags & HelloFlag.Resume) m.resume = true;
      if (flags & HelloFlag.Known) {
        const version = u32v(r, 'known version');
        if (version === 0) throw malformed('known version 0');
        m.known = { version, root: r.bytes(ROOT_PREFIX, 'known root') };
      }
      if (flags & HelloFlag.Modified) m.modified = readModified(r);
      break;
    }
    case Msg.Ready: {
      const flags = r.u8('flags');
      if (flags & ~ReadyFlag.Modified) throw malformed(`unknown Ready flags 0x${flags.toString(16).padStart(2, '0')}`);
      m = { type, version: u32v(r, 'version'), size: r.varint('size') };
      if (flags & ReadyFlag.Modified) m.modified = readModified(r);
      break;
    }
    case Msg.Checksums: {
      const n = r.varCount(maxN, 'checksum count');
      r.need(5 * n, 'checksums');
      const fastfps = new Uint32Array(n);
      const lengths = new Uint32Array(n);
      readList(r, n, fastfps, lengths, 0);
      m = { type, fastfps, lengths };
      break;
    }
    case Msg.ChecksumsEnd:
      m = { type, count: u32v(r, 'count'), size: r.varint('size') };
      break;
    case Msg.Tokens: {
      const upTo = u32v(r, 'up to');
      const n = r.varCount(maxN, 'token count');
      r.need(n * (2 + hashLen), 'tokens');
      const first = new Uint32Array(n);
      const count = new Uint32Array(n);
      const hashes = new Uint8Array(n * hashLen);
      for (let i = 0; i < n; i++) {
        first[i] = u32v(r, 'first');
        count[i] = u32v(r, 'count');
        r.bytesInto(hashLen, hashes, i * hashLen, 'hash');
      }
      m = { type, upTo, first, count, hashes };
      break;
    }
    case Msg.TokensEnd:
      m = { type, count: u32v(r, 'count'), resumeFrom: u32v(r, 'resume from') };
      break;
    case Msg.SplitRequest: {
      const n = r.varCount(maxN, 'split count');
      r.need(n, 'split tokens');
      const tokens = new Uint32Array(n);
      for (let i = 0; i < n; i++) tokens[i] = u32v(r, 'token');
      m = { type, tokens };
      break;
    }
    case Msg.SplitHashes: {
      const token = u32v(r, 'token');
      const n = r.varCount(maxN, 'hash count');
      m = { type, token, hashes: r.bytes(n * hashLen, 'hashes') };
      break;
    }
    case Msg.Verdict: {
      const upTo = u32v(r, 'up to');
      const nf = r.varint('failed count and final');
      const n = Math.floor(nf / 2);
      if (n > maxN) throw malformed(`failed count ${n} exceeds ${maxN}`);
      const root = nf % 2 ? r.bytes(ROOT_CHECK, 'root') : null;
      const failed: Failed[] = [];
      for (let i = 0; i < n; i++) {
        const token = u32v(r, 'token');
        const kind = r.u8('kind');
        if (kind > 1) throw malformed(`verdict kind ${kind}`);
        let bitmap: Uint8Array | null = null;
        if (kind === 1) {
          const len = r.varCount(maxN, 'bitmap length');
          bitmap = r.bytes(len, 'bitmap');
        }
        failed.push({ token, bitmap });
      }
      m = { type, upTo, root, failed };
      break;
    }
    case Msg.Delta:
      m = decodeDelta(r, maxN);
      break;
    case Msg.DeltaRun: {
      // the chunks' indices and lengths first, then their bytes one after another: decoded
      // into the Delta it carries
      const n = r.count(maxN, 'delta count');
      r.need(8 * n, 'delta run entries');
      const indices = new Uint32Array(n);
      const lengths = new Uint32Array(n);
      for (let i = 0; i < n; i++) {
        indices[i] = r.u32('index');
        lengths[i] = r.u32('length');
      }
      const chunks: Uint8Array[] = [];
      for (let i = 0; i < n; i++) chunks.push(r.bytes(lengths[i], 'chunk bytes'));
      m = { type: Msg.Delta, indices, chunks };
      break;
    }
    case Msg.Copies:
      m = decodeCopies(r, maxN);
      break;
    case Msg.BasisChecksums:
      m = decodeBasisChecksums(r, maxN);
      break;
    case Msg.Result:
      m = {
        type,
        version: u32v(r, 'version'),
        root: r.bytes(ROOT_PREFIX, 'root'),
        micros: r.varint('micros'),
        wireIn: r.varint('wire in'),
        wireOut: r.varint('wire out'),
      };
      break;
    case Msg.Error: {
      const code = r.u16('code');
      const len = r.u16('message length');
      if (len > 1024) throw malformed(`error message of ${len} bytes exceeds 1024`);
      let message: string;
      try {
        message = utf8Strict.decode(r.bytes(len, 'message'));
      } catch (e) {
        if (e instanceof ProtocolError) throw e;
        throw malformed('error message is not valid UTF-8');
      }
      m = { type, code, message };
      break;
    }
    default:
      throw malformed(`unknown message type 0x${type.toString(16).padStart(2, '0')}`);
  }
  return m;
}
