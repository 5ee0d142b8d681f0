/**
 * The byte-level reader and writer the codec (codec.ts) builds and parses frames with: fixed
 * little-endian fields, and varints (LEB128: 7 bits a byte, low bits first, the high bit set
 * on every byte but the last) of values up to 2^53 − 1, for lengths, counts and offsets that
 * are mostly small.
 */
import { ErrorCode, ProtocolError } from './protocol.ts';

/** Bytes of the varint of `v` (0 ≤ v ≤ 2^53 − 1): at most 8. */
export function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

/** A signed value as an unsigned one for a varint, small magnitudes small: 0, −1, 1, −2 … →
 *  0, 1, 2, 3 … */
export const zigzag = (v: number): number => (v >= 0 ? 2 * v : -2 * v - 1);
export const unzigzag = (z: number): number => (z % 2 === 0 ? z / 2 : -(z + 1) / 2);

/** Writes little-endian fields into a frame of a known size. */
export class Writer {
  buf: Uint8Array;
  view: DataView;
  pos = 0;
  /** `into`: where to write (at least `size` bytes; the frame is its first `size`) */
  constructor(size: number, into?: Uint8Array) {
    this.buf = into ? into.subarray(0, size) : new Uint8Array(size);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, size);
  }
  u8(v: number) {
    this.view.setUint8(this.pos, v);
    this.pos += 1;
  }
  u16(v: number) {
    this.view.setUint16(this.pos, v, true);
    this.pos += 2;
  }
  u32(v: number) {
    this.view.setUint32(this.pos, v, true);
    this.pos += 4;
  }
  u64(v: number) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`u64 field out of range: ${v}`);
    this.view.setBigUint64(this.pos, BigInt(v), true);
    this.pos += 8;
  }
  varint(v: number) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`varint out of range: ${v}`);
    while (v >= 128) {
      this.buf[this.pos++] = (v % 128) | 128;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }
  bytes(b: Uint8Array) {
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  /** `n` bytes of `b` from `from`, copied one by one: for the short fields of many entries,
   *  where a view per entry would cost more than the copy (~400 k per 1 GiB push). */
  bytesOf(b: Uint8Array, from: number, n: number) {
    for (let k = 0; k < n; k++) this.buf[this.pos + k] = b[from + k];
    this.pos += n;
  }
  done(): Uint8Array {
    if (this.pos !== this.buf.length) throw new Error(`codec bug: wrote ${this.pos} of ${this.buf.length}`);
    return this.buf;
  }
}

/** Reads little-endian fields of a received frame; every read is bounds-checked, and a frame
 *  that runs short, carries a count above its limit or bytes after its last field is Malformed. */
export class Reader {
  view: DataView;
  pos = 0;
  constructor(public buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  need(n: number, what: string) {
    if (this.pos + n > this.buf.length) throw malformed(`truncated ${what}`);
  }
  u8(what: string) {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }
  u16(what: string) {
    this.need(2, what);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }
  u32(what: string) {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  u64(what: string) {
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw malformed(`${what} exceeds 2^53-1`);
    return Number(v);
  }
  /** A varint of at most 8 bytes, ≤ 2^53 − 1, in its shortest form (else Malformed). */
  varint(what: string): number {
    let v = 0;
    for (let k = 0, scale = 1; ; k++, scale *= 128) {
      const b = this.u8(what);
      v += (b & 127) * scale;
      if (b < 128) {
        if (k > 0 && b === 0) throw malformed(`${what}: a varint not in its shortest form`);
        if (v > Number.MAX_SAFE_INTEGER) throw malformed(`${what} exceeds 2^53-1`);
        return v;
      }
      if (k === 7) throw malformed(`${what}: a varint of more than 8 bytes`);
    }
  }
  /** A varint count of at most `max`. */
  varCount(max: number, what: string): number {
    const n = this.varint(what);
    if (n > max) throw malformed(`${what} ${n} exceeds the limit ${max}`);
    return n;
  }
  bytes(n: number, what: string): Uint8Array {
    this.need(n, what);
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  /** `n` bytes copied into `to` at `at` (Writer.bytesOf's counterpart). */
  bytesInto(n: number, to: Uint8Array, at: number, what: string) {
    this.need(n, what);
    for (let k = 0; k < n; k++) to[at + k] = this.buf[this.pos + k];
    this.pos += n;
  }
  count(max: number, what: string): number {
    const n = this.u32(what);
    if (n > max) throw malformed(`${what} ${n} exceeds the limit ${max}`);
    return n;
  }
  end() {
    if (this.pos !== this.buf.length) throw malformed(`${this.buf.length - this.pos} trailing bytes`);
  }
}

export function malformed(why: string): ProtocolError {
  return new ProtocolError(ErrorCode.Malformed, `malformed message: ${why}`);
}
