/**
 * The binary codec of the Dsync wire protocol: one function to encode and one to decode every
 * message of `docs/protocol.md`. All integers are little-endian; `H` is the digest length of
 * the session's strong hash algorithm (20 for SHA-1, 32 for SHA-256 and BLAKE3).
 *
 * Decoding is strict: an unknown type, a truncated field, a count above the limit, trailing
 * bytes, invalid UTF-8 or a varint that is too long or not in its shortest form throw a
 * ProtocolError(Malformed); nothing is read out of bounds.
 *
 * The parts that grow with the file and the edit (the Checksum List, Copies, Basis Checksums,
 * Delta pieces) carry lengths and counts as varints and the offsets of copies and the indices
 * of chunks as signed varints relative to the entry before, so that an edit of a few bytes
 * costs a few bytes of framing.
 */
import { COPY_END_MAX, DEFAULT_LIMITS, type Limits } from './limits.ts';
import { Reader, Writer, malformed, unzigzag, varintSize, zigzag } from './frame-bytes.ts';
import { type Hello, type Ready, type Checksums, type ChecksumsEnd, type Tokens, type TokensEnd, type SplitRequest, type SplitHashes, type Failed, type Verdict, type Piece, type Delta, type BasisChecksums, type Copies, type Result, type Message, PREFIX, chunkLength } from './messages.ts';
import { Msg, type ChunkParams, type FineParams, ProtocolError, hashLength } from './protocol.ts';

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true });


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
      const w = new Writer(1 + 2 + 12 + 3 + 8 + 4 + 4 + 2 + name.length + (m.known ? m.known.root.length : 0));
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
      w.u16(name.length);
      w.bytes(name);
      if (m.known) w.bytes(m.known.root);
      return w.done();
    }
    case Msg.Ready: {
      const w = new Writer(1 + 4 + 8 + 4);
      w.u8(m.type);
      w.u32(m.version);
      w.u64(m.size);
      w.u32(m.maxMessage);
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
    case Msg.Delta: {
      const n = m.indices.length;
      if (m.chunks.length !== n) throw new RangeError('indices and chunks differ in length');
      // the sizes first (the varints of relative indices and offsets depend on the entries before)
      let size = 1 + varintSize(n);
      let prev = -1;
      let end = 0; // where the last copy of this message ended in the basis
      for (let i = 0; i < n; i++) {
        const c = m.chunks[i];
        const length = chunkLength(c);
        if (length > 0xffffffff || (!(c instanceof Uint8Array) && !c.length)) throw new RangeError(`a Delta chunk of ${length} bytes or without pieces`);
        size += varintSize(zigzag(m.indices[i] - prev - 1)) + varintSize(length);
        prev = m.indices[i];
        if (c instanceof Uint8Array) {
          size += 1 + c.length;
          continue;
        }
        size += varintSize(c.length);
        for (const p of c) {
          size += varintSize(2 * p.length + (p instanceof Uint8Array ? 0 : 1));
          if (p instanceof Uint8Array) size += p.length;
          else {
            if (!Number.isSafeInteger(p.offset) || p.offset < 0 || p.offset + p.length > COPY_END_MAX) throw new RangeError(`a copy of [${p.offset}, +${p.length}) ends beyond 2^52`);
            size += varintSize(zigzag(p.offset - end));
            end = p.offset + p.length;
          }
        }
      }
      const w = new Writer(size, room?.(size));
      w.u8(m.type);
      w.varint(n);
      prev = -1;
      end = 0;
      for (let i = 0; i < n; i++) {
        const c = m.chunks[i];
        w.varint(zigzag(m.indices[i] - prev - 1));
        prev = m.indices[i];
        w.varint(chunkLength(c));
        if (c instanceof Uint8Array) {
          w.u8(0);
          w.bytes(c);
          continue;
        }
        w.varint(c.length);
        for (const p of c) {
          if (p instanceof Uint8Array) {
            w.varint(2 * p.length);
            w.bytes(p);
          } else {
            w.varint(2 * p.length + 1);
            w.varint(zigzag(p.offset - end));
            end = p.offset + p.length;
          }
        }
      }
      return w.done();
    }
    case Msg.Copies: {
      const n = m.count.length;
      if (m.listed.length !== n || m.basisFirst.length !== n || m.fastfps.length !== m.lengths.length || m.listed.reduce((a, x) => a + x, 0) !== m.lengths.length) throw new RangeError('copy arrays differ');
      let size = 1 + varintSize(n) + listSize(m.lengths, 0, m.lengths.length);
      for (let i = 0, end = 0; i < n; i++) {
        size += varintSize(m.listed[i]) + varintSize(m.count[i]) + varintSize(zigzag(m.basisFirst[i] - end));
        end = m.basisFirst[i] + m.count[i];
      }
      const w = new Writer(size);
      w.u8(m.type);
      w.varint(n);
      for (let i = 0, end = 0, at = 0; i < n; i++) {
        w.varint(m.listed[i]);
        writeList(w, m.fastfps, m.lengths, at, at + m.listed[i]);
        at += m.listed[i];
        w.varint(m.count[i]);
        w.varint(zigzag(m.basisFirst[i] - end));
        end = m.basisFirst[i] + m.count[i];
      }
      return w.done();
    }
    case Msg.BasisChecksums: {
      const n = m.lengths.length;
      if (m.prefixes.length !== n * PREFIX) throw new RangeError('prefixes and lengths differ in length');
      let size = 1 + 8 + 12 + varintSize(n) + PREFIX * n;
      for (let i = 0; i < n; i++) size += varintSize(m.lengths[i]);
      const w = new Writer(size);
      w.u8(m.type);
      w.u64(m.offset);
      w.u32(m.fine.min);
      w.u32(m.fine.avg);
      w.u32(m.fine.max);
      w.varint(n);
      for (let i = 0; i < n; i++) {
        w.varint(m.lengths[i]);
        w.bytesOf(m.prefixes, i * PREFIX, PREFIX);
      }
      return w.done();
    }
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

/** Bytes of Checksum List entries [from, to): each a FastFp (u32) and a length (varint). */
function listSize(lengths: Uint32Array, from: number, to: number): number {
  let size = 4 * (to - from);
  for (let i = from; i < to; i++) size += varintSize(lengths[i]);
  return size;
}

function writeList(w: Writer, fastfps: Uint32Array, lengths: Uint32Array, from: number, to: number) {
  for (let i = from; i < to; i++) {
    w.u32(fastfps[i]);
    w.varint(lengths[i]);
  }
}

/** `n` Checksum List entries into `fastfps` and `lengths` at `at`. */
function readList(r: Reader, n: number, fastfps: Uint32Array, lengths: Uint32Array, at: number) {
  for (let i = at; i < at + n; i++) {
    fastfps[i] = r.u32('fastfp');
    lengths[i] = u32Of(r.varint('length'), 'length');
  }
}

function u32Of(v: number, what: string): number {
  if (v > 0xffffffff) throw malformed(`${what} ${v} exceeds 2^32-1`);
  return v;
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
      if (knownVersion) {
        if (algo < 1 || algo > 3) throw malformed(`a known version's root in a Hello of unknown algorithm ${algo}`);
        m.known = { version: knownVersion, root: r.bytes(hashLength(algo), 'known root') };
      }
      break;
    }
    case Msg.Ready:
      m = { type, version: r.u32('version'), size: r.u64('size'), maxMessage: r.u32('max message') };
      break;
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
    case Msg.Delta: {
      const n = r.varCount(maxN, 'delta count');
      r.need(3 * n, 'delta chunks');
      const indices = new Uint32Array(n);
      const chunks: (Uint8Array | Piece[])[] = [];
      let prev = -1;
      let end = 0;
      for (let i = 0; i < n; i++) {
        prev = indices[i] = u32Of(nonNegative(prev + 1 + unzigzag(r.varint('index')), 'index'), 'index');
        const len = u32Of(r.varint('length'), 'length');
        const p = r.varCount(maxN, 'piece count');
        if (p === 0) {
          chunks.push(r.bytes(len, 'chunk bytes'));
          continue;
        }
        const pieces: Piece[] = [];
        let sum = 0;
        for (let k = 0; k < p; k++) {
          const head = r.varint('piece head');
          const length = Math.floor(head / 2);
          if (length === 0 || length > len - sum) throw malformed(`a piece of ${length} bytes in a chunk of ${len} (${sum} in pieces before it)`);
          let piece: Piece;
          if (head % 2 === 0) piece = r.bytes(length, 'piece bytes');
          else {
            const offset = nonNegative(end + unzigzag(r.varint('copy offset')), 'copy offset');
            if (offset + length > COPY_END_MAX) throw malformed(`a copy of [${offset}, +${length}) ends beyond 2^52`);
            piece = { offset, length };
            end = offset + length;
          }
          sum += length;
          pieces.push(piece);
        }
        if (sum !== len) throw malformed(`pieces of ${sum} bytes for a chunk of ${len}`);
        chunks.push(pieces);
      }
      m = { type, indices, chunks };
      break;
    }
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
    case Msg.Copies: {
      const n = r.varCount(maxN, 'copy count');
      r.need(3 * n, 'copies');
      const listed = new Uint32Array(n);
      const count = new Uint32Array(n);
      const basisFirst = new Uint32Array(n);
      let fastfps = new Uint32Array(0);
      let lengths = new Uint32Array(0);
      let at = 0;
      for (let i = 0, end = 0; i < n; i++) {
        const l = (listed[i] = r.varCount(maxN - at, 'chunks listed in Copies'));
        r.need(5 * l, 'listed chunks');
        if (at + l > lengths.length) {
          const size = Math.min(maxN, Math.max(2 * lengths.length, at + l, 64));
          fastfps = grownTo(fastfps, size);
          lengths = grownTo(lengths, size);
        }
        readList(r, l, fastfps, lengths, at);
        at += l;
        count[i] = u32Of(r.varint('count'), 'count');
        basisFirst[i] = u32Of(nonNegative(end + unzigzag(r.varint('basis first')), 'basis first'), 'basis first');
        end = basisFirst[i] + count[i];
      }
      m = { type, listed, fastfps: fastfps.slice(0, at), lengths: lengths.slice(0, at), count, basisFirst };
      break;
    }
    case Msg.BasisChecksums: {
      const offset = r.u64('offset');
      const fine = { min: r.u32('fine min'), avg: r.u32('fine avg'), max: r.u32('fine max') };
      const n = r.varCount(maxN, 'basis checksum count');
      r.need((1 + PREFIX) * n, 'basis checksums');
      const lengths = new Uint32Array(n);
      const prefixes = new Uint8Array(n * PREFIX);
      for (let i = 0; i < n; i++) {
        lengths[i] = u32Of(r.varint('length'), 'length');
        r.bytesInto(PREFIX, prefixes, i * PREFIX, 'prefix');
      }
      m = { type, offset, fine, lengths, prefixes };
      break;
    }
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

function nonNegative(v: number, what: string): number {
  if (v < 0) throw malformed(`${what} ${v} is negative`);
  return v;
}

const grownTo = (a: Uint32Array, size: number) => {
  const b = new Uint32Array(size);
  b.set(a);
  return b;
};
