/**
 * Deterministic data for tests and benchmarks: the same SplitMix64 byte generators as
 * wasm/tests/common (so golden vectors need not store their inputs) and the Dsync paper's
 * modification generator (§V-A): cut / insert / inverse edits of a given total size, in
 * fragments of at most 256 bytes, placed at the beginning / middle / end of the file with
 * probability 70% / 10% / 20%.
 */

const M64 = (1n << 64n) - 1n;

/** SplitMix64; `next64` matches the Rust generator, `next` gives floats in [0, 1). */
export class Rng {
  private s: bigint;
  constructor(seed: number | bigint) {
    this.s = BigInt(seed) & M64;
  }
  next64(): bigint {
    this.s = (this.s + 0x9e3779b97f4a7c15n) & M64;
    let z = this.s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
    return z ^ (z >> 31n);
  }
  next(): number {
    return Number(this.next64() >> 11n) / 2 ** 53;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
}

/** SplitMix64 output as little-endian bytes (wasm/tests/common `random_bytes`). */
export function randomBytes(seed: number | bigint, len: number): Uint8Array {
  const out = new Uint8Array(Math.ceil(len / 8) * 8);
  const view = new DataView(out.buffer);
  const r = new Rng(seed);
  for (let o = 0; o < out.length; o += 8) view.setBigUint64(o, r.next64(), true);
  return out.subarray(0, len);
}

/** Fast non-cryptographic filler for large test files (xorshift32; not the golden generator). */
export function fastRandomBytes(seed: number, len: number): Uint8Array {
  const words = new Uint32Array(Math.ceil(len / 4));
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  return new Uint8Array(words.buffer, 0, len);
}

const WORDS = ['delta', 'sync', 'chunk', 'the', 'of', 'server', 'browser', 'file', 'and', 'weak', 'strong', 'hash', 'a', 'version', 'match', 'token'];

/** Pseudo-text (wasm/tests/common `text_bytes`). */
export function textBytes(seed: number | bigint, len: number): Uint8Array {
  const r = randomBytes(seed, len);
  const enc = WORDS.map((w) => new TextEncoder().encode(w));
  const out = new Uint8Array(len + 16);
  let n = 0;
  for (let i = 0; n < len; i++) {
    const w = enc[r[i % r.length] & 15];
    out.set(w, n);
    n += w.length;
    out[n++] = i % 13 === 12 ? 10 : 32;
  }
  return out.subarray(0, len);
}

export type EditKind = 'cut' | 'insert' | 'inverse';
export const EDIT_KINDS: EditKind[] = ['cut', 'insert', 'inverse'];

export interface EditSpec {
  kind: EditKind;
  /** total bytes cut, inserted or inverted */
  total: number;
  /** largest fragment (paper: 256 B) */
  maxFragment?: number;
  /** probabilities of the beginning / middle / end third (paper: 0.7 / 0.1 / 0.2) */
  placement?: [number, number, number];
}

/**
 * Applies one modification of `spec.total` bytes to a copy of `data`, in fragments of at most
 * `maxFragment` bytes, each placed uniformly inside a third of the file drawn by `placement`.
 * Fragments are placed in the original file's coordinates and applied in one sweep.
 */
export function applyEdits(data: Uint8Array, rng: Rng, spec: EditSpec): Uint8Array {
  const maxFragment = spec.maxFragment ?? 256;
  const [pb, pm] = spec.placement ?? [0.7, 0.1, 0.2];
  const len = data.length;
  const frags: { at: number; n: number }[] = [];
  for (let left = spec.total; left > 0; ) {
    const n = Math.min(left, 1 + rng.int(maxFragment));
    const u = rng.next();
    const third = u < pb ? 0 : u < pb + pm ? 1 : 2;
    const lo = Math.floor((len * third) / 3);
    const hi = Math.floor((len * (third + 1)) / 3);
    frags.push({ at: lo + rng.int(Math.max(1, hi - lo)), n });
    left -= n;
  }
  frags.sort((a, b) => a.at - b.at);
  if (spec.kind === 'inverse') {
    const out = data.slice();
    let cursor = 0;
    for (const f of frags) {
      // consecutive fragments do not overlap, so the total inverted stays `total` where it fits
      const start = Math.max(f.at, cursor);
      const end = Math.min(len, start + f.n);
      for (let i = start; i < end; i++) out[i] = ~out[i] & 0xff;
      cursor = end;
    }
    return out;
  }
  const parts: Uint8Array[] = [];
  let cursor = 0;
  for (const f of frags) {
    if (spec.kind === 'insert') {
      parts.push(data.subarray(cursor, f.at), randomBytes(rng.next64(), f.n));
      cursor = f.at;
    } else {
      const start = Math.max(f.at, cursor);
      parts.push(data.subarray(cursor, start));
      cursor = Math.min(len, start + f.n);
    }
  }
  parts.push(data.subarray(cursor));
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
