/**
 * The parts of the codec (codec.ts) that grow with the file and the edit: Checksum List
 * entries, Delta pieces, Copies and Basis Checksums. Lengths and counts are varints; the
 * offsets of copies and the indices of chunks are signed varints relative to the entry before,
 * so that an edit of a few bytes costs a few bytes of framing (docs/protocol.md §4–§6).
 * Decoding is strict, as in codec.ts.
 */
import { grown } from '../base/buffers.ts';
import { COPY_END_MAX } from '../base/limits.ts';
import { Reader, Writer, malformed, unzigzag, varintSize, zigzag } from './frame-bytes.ts';
import { type BasisChecksums, type Copies, type Delta, type Piece, PREFIX, chunkLength } from './messages.ts';
import { Msg } from './protocol.ts';

/** A Delta message; `room(size)` as in codec.ts `encode`. */
export function encodeDelta(m: Delta, room?: (size: number) => Uint8Array): Uint8Array {
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
    size += varintSize(zigzag(m.indices[i] - prev - 1));
    prev = m.indices[i];
    if (c instanceof Uint8Array) {
      size += 1 + varintSize(length) + c.length;
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
    // a chunk sent in pieces has the length of its pieces: only a whole one gives its own
    if (c instanceof Uint8Array) {
      w.u8(0);
      w.varint(c.length);
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

export function decodeDelta(r: Reader, maxN: number): Delta {
  const n = r.varCount(maxN, 'delta count');
  r.need(3 * n, 'delta chunks');
  const indices = new Uint32Array(n);
  const chunks: (Uint8Array | Piece[])[] = [];
  let prev = -1;
  let end = 0;
  for (let i = 0; i < n; i++) {
    prev = indices[i] = u32Of(nonNegative(prev + 1 + unzigzag(r.varint('index')), 'index'), 'index');
    const p = r.varCount(maxN, 'piece count');
    if (p === 0) {
      chunks.push(r.bytes(u32Of(r.varint('length'), 'length'), 'chunk bytes'));
      continue;
    }
    const pieces: Piece[] = [];
    let sum = 0;
    for (let k = 0; k < p; k++) {
      const head = r.varint('piece head');
      const length = Math.floor(head / 2);
      if (length === 0 || length > 0xffffffff - sum) throw malformed(`a piece of ${length} bytes after ${sum} in pieces before it: a chunk is at most 2^32 - 1 bytes`);
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
    chunks.push(pieces);
  }
  return { type: Msg.Delta, indices, chunks };
}

export function encodeCopies(m: Copies): Uint8Array {
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

export function decodeCopies(r: Reader, maxN: number): Copies {
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
      fastfps = grown(fastfps, size);
      lengths = grown(lengths, size);
    }
    readList(r, l, fastfps, lengths, at);
    at += l;
    count[i] = u32Of(r.varint('count'), 'count');
    basisFirst[i] = u32Of(nonNegative(end + unzigzag(r.varint('basis first')), 'basis first'), 'basis first');
    end = basisFirst[i] + count[i];
  }
  return { type: Msg.Copies, listed, fastfps: fastfps.slice(0, at), lengths: lengths.slice(0, at), count, basisFirst };
}

export function encodeBasisChecksums(m: BasisChecksums): Uint8Array {
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

export function decodeBasisChecksums(r: Reader, maxN: number): BasisChecksums {
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
  return { type: Msg.BasisChecksums, offset, fine, lengths, prefixes };
}

/** Bytes of Checksum List entries [from, to): each a FastFp (u32) and a length (varint). */
export function listSize(lengths: Uint32Array, from: number, to: number): number {
  let size = 4 * (to - from);
  for (let i = from; i < to; i++) size += varintSize(lengths[i]);
  return size;
}

export function writeList(w: Writer, fastfps: Uint32Array, lengths: Uint32Array, from: number, to: number) {
  for (let i = from; i < to; i++) {
    w.u32(fastfps[i]);
    w.varint(lengths[i]);
  }
}

/** `n` Checksum List entries into `fastfps` and `lengths` at `at`. */
export function readList(r: Reader, n: number, fastfps: Uint32Array, lengths: Uint32Array, at: number) {
  for (let i = at; i < at + n; i++) {
    fastfps[i] = r.u32('fastfp');
    lengths[i] = u32Of(r.varint('length'), 'length');
  }
}

export function u32Of(v: number, what: string): number {
  if (v > 0xffffffff) throw malformed(`${what} ${v} exceeds 2^32-1`);
  return v;
}

function nonNegative(v: number, what: string): number {
  if (v < 0) throw malformed(`${what} ${v} is negative`);
  return v;
}

