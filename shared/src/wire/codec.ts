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
import { decodeBasisChecksums, decodeCopies, decodeDelta, encodeBasisChecksums, encodeCopies, encodeDelta, listSize, readList, writeList } from './codec-lists.ts';
import { type Failed, type Message } from './messages.ts';
import { HelloFlag, Msg, ProtocolError, ReadyFlag, hashLength } from './protocol.ts';

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true });

/** A modification time a message may carry: an integer in 0 … MAX_MODIFIED_MS. */
const isModified = (ms: number) => Number.isSafeInteger(ms) && ms >= 0 && ms <= MAX_MODIFIED_MS;
function checkModified(ms: number | undefined) {
  if (ms !== undefined && !isModified(ms)) throw new RangeError(`modification time ${ms} is not an integer in 0…${MAX_MODIFIED_MS}`);
}
/** Reads a modification time (u64), Malformed outside 0 … MAX_MODIFIED_MS. */
function readModified(r: Reader): number {
  const ms = r.u64('modified');
  if (ms > MAX_MODIFIED_MS) throw malformed(`modification time ${ms} is after ${MAX_MODIFIED_MS} (year 9999)`);
  return ms;
}

function checkHash(h: Uint8Array, hashLen: number, what: string) {
  if (h.length !== hashLen) throw new RangeError(`${what} must be ${hashLen} bytes, got ${h.length}`);
}

/** Encodes a message into one binary frame. `hashLen` is H of the session's algorithm;
 *  `room(size)`: a buffer of at least `size` bytes to write a Delta message into (the frame is
 *  a view of it) instead of a new one. */
export function encode(m: Message, hashLen = 32, room?: (size: number) => Uint8Array): Uint8Array {
  switch (m.type) {
    case Msg.Hello: {
      const name = utf8.encode(m.name);
      if (m.known) checkHash(m.known.root, hashLength(m.algo), 'known root');
      checkModified(m.modified);
      const w = new Writer(1 + 2 + 12 + 3 + 8 + 4 + 4 + 1 + 2 + name.length + (m.known ? m.known.root.length : 0) + (m.modified !== undefined ? 8 : 0));
      w.u8(m.type);
      w.u8(m.version);
      w.u8(m.op);
      w.u32(m.params.min);
      w.u32(m.params.avg);
      w.u32(m.params.max);
      w.u8(m.params.op);
      w.u8(m.params.every);
      w.u8(m.algo);
      w.u64(m.size);
      w.u32(m.basisVersion);
      w.u32(m.known?.version ?? 0);
      w.u8((m.resume ? HelloFlag.Resume : 0) | (m.modified !== undefined ? HelloFlag.Modified : 0));
      w.u16(name.length);
      w.bytes(name);
      if (m.known) w.bytes(m.known.root);
      if (m.modified !== undefined) w.u64(m.modified);
      return w.done();
    }
    case Msg.Ready: {
      checkModified(m.modified);
      const w = new Writer(1 + 4 + 8 + 4 + 1 + (m.modified !== undefined ? 8 : 0));
      w.u8(m.type);
      w.u32(m.version);
      w.u64(m.size);
      w.u32(m.maxMessage);
      w.u8(m.modified !== undefined ? ReadyFlag.Modified : 0);
      if (m.modified !== undefined) w.u64(m.modified);
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
      const w = new Writer(1 + 4 + 8);
      w.u8(m.type);
      w.u32(m.count);
      w.u64(m.size);
      return w.done();
    }
    case Msg.Tokens: {
      const n = m.first.length;
      if (m.count.length !== n || m.hashes.length !== n * hashLen) throw new RangeError('token arrays differ');
      const w = new Writer(1 + 4 + 4 + n * (8 + hashLen));
      w.u8(m.type);
      w.u32(m.upTo);
      w.u32(n);
      for (let i = 0; i < n; i++) {
        w.u32(m.first[i]);
        w.u32(m.count[i]);
        w.bytesOf(m.hashes, i * hashLen, hashLen);
      }
      return w.done();
    }
    case Msg.TokensEnd: {
      const w = new Writer(9);
      w.u8(m.type);
      w.u32(m.count);
      w.u32(m.resumeFrom);
      return w.done();
    }
    case Msg.SplitRequest: {
      const w = new Writer(1 + 4 + 4 * m.tokens.length);
      w.u8(m.type);
      w.u32(m.tokens.length);
      for (const t of m.tokens) w.u32(t);
      return w.done();
    }
    case Msg.SplitHashes: {
      if (m.hashes.length % hashLen) throw new RangeError('split hashes not a multiple of H');
      const w = new Writer(1 + 4 + 4 + m.hashes.length);
      w.u8(m.type);
      w.u32(m.token);
      w.u32(m.hashes.length / hashLen);
      w.bytes(m.hashes);
      return w.done();
    }
    case Msg.Verdict: {
      if (m.root) checkHash(m.root, hashLen, 'root');
      let size = 1 + 4 + 1 + (m.root ? hashLen : 0) + 4;
      for (const f of m.failed) size += 5 + (f.bitmap ? 4 + f.bitmap.length : 0);
      const w = new Writer(size);
      w.u8(m.type);
      w.u32(m.upTo);
      w.u8(m.root ? 1 : 0);
      if (m.root) w.bytes(m.root);
      w.u32(m.failed.length);
      for (const f of m.failed) {
        w.u32(f.token);
        w.u8(f.bitmap ? 1 : 0);
        if (f.bitmap) {
          w.u32(f.bitmap.length);
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
      checkHash(m.root, hashLen, 'root');
      const w = new Writer(1 + 4 + 8 + hashLen + 8 * 3);
      w.u8(m.type);
      w.u32(m.version);
      w.u64(m.size);
      w.bytes(m.root);
      w.u64(m.micros);
      w.u64(m.wireIn);
      w.u64(m.wireOut);
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
 * Decodes one frame. Byte arrays in the result are views into `frame` (no copies).
 * Throws ProtocolError(Malformed) on any deviation from docs/protocol.md.
 */
export function decode(frame: Uint8Array, hashLen = 32, limits: Limits = DEFAULT_LIMITS): Message {
  const r = new Reader(frame);
  const type = r.u8('type');
  const maxN = limits.maxEntriesPerMessage;
  let m: Message;
  switch (type) {
    case Msg.Hello: {
      const version = r.u8('version');
      const op = r.u8('op');
      const params = {
        min: r.u32('min'),
        avg: r.u32('avg'),
        max: r.u32('max'),
        op: r.u8('fastfp op'),
        every: r.u8('fastfp distance'),
      };
      const algo = r.u8('algo');
      const size = r.u64('size');
      const basisVersion = r.u32('basis version');
      const knownVersion = r.u32('known version');
      const flags = r.u8('flags');
      if (flags & ~(HelloFlag.Resume | HelloFlag.Modified)) throw malformed(`unknown Hello flags 0x${flags.toString(16).padStart(2, '0')}`);
      const nameLen = r.u16('name length');
      if (nameLen > limits.maxNameBytes) throw malformed(`name of ${nameLen} bytes exceeds ${limits.maxNameBytes}`);
      let name: string;
      try {
        name = utf8Strict.decode(r.bytes(nameLen, 'name'));
      } catch (e) {
        if (e instanceof ProtocolError) throw e;
        throw malformed('name is not valid UTF-8');
      }
      m = { type, version, op, params, algo, size, basisVersion, name };
      if (flags & HelloFlag.Resume) m.resume = true;
      if (knownVersion) {
        if (algo < 1 || algo > 3) throw malformed(`a known version's root in a Hello of unknown algorithm ${algo}`);
        m.known = { version: knownVersion, root: r.bytes(hashLength(algo), 'known root') };
      }
      if (flags & HelloFlag.Modified) m.modified = readModified(r);
      break;
    }
    case Msg.Ready: {
      m = { type, version: r.u32('version'), size: r.u64('size'), maxMessage: r.u32('max message') };
      const flags = r.u8('flags');
      if (flags & ~ReadyFlag.Modified) throw malformed(`unknown Ready flags 0x${flags.toString(16).padStart(2, '0')}`);
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
      m = { type, count: r.u32('count'), size: r.u64('size') };
      break;
    case Msg.Tokens: {
      const upTo = r.u32('up to');
      const n = r.count(maxN, 'token count');
      r.need(n * (8 + hashLen), 'tokens');
      const first = new Uint32Array(n);
      const count = new Uint32Array(n);
      const hashes = new Uint8Array(n * hashLen);
      for (let i = 0; i < n; i++) {
        first[i] = r.u32('first');
        count[i] = r.u32('count');
        r.bytesInto(hashLen, hashes, i * hashLen, 'hash');
      }
      m = { type, upTo, first, count, hashes };
      break;
    }
    case Msg.TokensEnd:
      m = { type, count: r.u32('count'), resumeFrom: r.u32('resume from') };
      break;
    case Msg.SplitRequest: {
      const n = r.count(maxN, 'split count');
      r.need(4 * n, 'split tokens');
      const tokens = new Uint32Array(n);
      for (let i = 0; i < n; i++) tokens[i] = r.u32('token');
      m = { type, tokens };
      break;
    }
    case Msg.SplitHashes: {
      const token = r.u32('token');
      const n = r.count(maxN, 'hash count');
      m = { type, token, hashes: r.bytes(n * hashLen, 'hashes') };
      break;
    }
    case Msg.Verdict: {
      const upTo = r.u32('up to');
      const final = r.u8('final');
      if (final > 1) throw malformed(`verdict root flag ${final}`);
      const root = final ? r.bytes(hashLen, 'root') : null;
      const n = r.count(maxN, 'failed count');
      const failed: Failed[] = [];
      for (let i = 0; i < n; i++) {
        const token = r.u32('token');
        const kind = r.u8('kind');
        if (kind > 1) throw malformed(`verdict kind ${kind}`);
        let bitmap: Uint8Array | null = null;
        if (kind === 1) {
          const len = r.count(maxN, 'bitmap length');
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
        version: r.u32('version'),
        size: r.u64('size'),
        root: r.bytes(hashLen, 'root'),
        micros: r.u64('micros'),
        wireIn: r.u64('wire in'),
        wireOut: r.u64('wire out'),
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
  r.end();
  return m;
}
