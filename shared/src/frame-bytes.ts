/**
 * The byte-level reader and writer the codec (codec.ts) builds and parses frames with.
 */
import { ErrorCode, ProtocolError } from './protocol.ts';

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
