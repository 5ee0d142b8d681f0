// Deterministic benchmark inputs and small helpers, shared by Node (bench/*.ts) and the
// benchmark page (bench/browser/page.js). Bit-for-bit the same as bench/native/src/gen.rs, so
// native, Node and Chromium chunk the very same bytes; the drivers compare chunk counts and
// checksums to prove it. Plain JS so the browser can load it without a build step.

const WEYL = 0x9e3779b9;

/** murmur3's finalizer over a Weyl sequence (a bijection: no word repeats within 16 GiB). */
export class Rng32 {
  constructor(seed) {
    this.s = seed >>> 0;
  }
  next() {
    this.s = (this.s + WEYL) >>> 0;
    let h = this.s;
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    return (h ^ (h >>> 16)) >>> 0;
  }
}

/** Random bytes, 4 per step, little endian (x86 and every browser here). */
export function fillRandom(u8, rng) {
  if (u8.length % 4 !== 0 || u8.byteOffset % 4 !== 0) throw new Error('fillRandom: length and offset must be multiples of 4');
  const u32 = new Uint32Array(u8.buffer, u8.byteOffset, u8.length >>> 2);
  let s = rng.s;
  for (let i = 0; i < u32.length; i++) {
    s = (s + WEYL) | 0;
    let h = s;
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    u32[i] = h ^ (h >>> 16);
  }
  rng.s = s >>> 0;
}

export function random(len, seed) {
  const u8 = new Uint8Array(len);
  fillRandom(u8, new Rng32(seed));
  return u8;
}

const LETTERS = 'etaoinshrdlucmfwypvbgkqjxz';
// A product of two 16-bit uniforms (exact in a double), skewed towards small values.
const skewed = (r) => (r & 0xffff) * (r >>> 16);

/** Pseudo-text: 2048 made-up words, skewed word choice, spaces, commas, full stops, newlines. */
export function text(len, seed) {
  const rng = new Rng32(seed);
  const vocab = [];
  for (let w = 0; w < 2048; w++) {
    const n = 2 + (rng.next() % 9);
    const word = new Uint8Array(n);
    for (let k = 0; k < n; k++) word[k] = LETTERS.charCodeAt(Math.floor((skewed(rng.next()) * 26) / 4294967296));
    vocab.push(word);
  }
  const seps = [
    [0x2e, 0x0a], // ".\n"
    [0x2c, 0x20], // ", "
    [0x2e, 0x20], // ". "
    [0x20],
  ].map((a) => Uint8Array.from(a));
  const out = new Uint8Array(len);
  let pos = 0;
  const put = (bytes) => {
    const n = Math.min(bytes.length, len - pos);
    for (let i = 0; i < n; i++) out[pos + i] = bytes[i];
    pos += n;
  };
  while (pos < len) {
    put(vocab[skewed(rng.next()) >>> 21]);
    const s = rng.next() & 63;
    put(seps[s < 2 ? 0 : s < 6 ? 1 : s < 8 ? 2 : 3]);
  }
  return out;
}

/** The order-sensitive checksum bench/native computes too: x * 31 + v mod 2^32. */
export const fold = (acc, v) => (Math.imul(acc, 31) + v) >>> 0;

/**
 * Chunks `data` with the wasm DsyncChunker, pushing `slice` bytes at a time, and returns the
 * seconds taken, the chunk count and checksums over lengths and FastFp values. `strong` is the
 * per-chunk strong hash code (0 none, 1 SHA-1, 2 SHA-256, 3 BLAKE3). Same code in Node and page.
 */
export function chunkWasm(DsyncChunker, data, { op = 0, every = 16, slice = 1 << 20, strong = 0 } = {}) {
  const t0 = performance.now();
  const ch = new DsyncChunker(2048, 8192, 65536, op, every, strong);
  let chunks = 0;
  let cuts = 0;
  let fp = 0;
  let strongBytes = 0;
  const drain = () => {
    const v = ch.take_chunks();
    for (let i = 0; i < v.length; i += 2) {
      cuts = fold(cuts, v[i]);
      fp = fold(fp, v[i + 1]);
    }
    chunks += v.length / 2;
    if (strong) strongBytes += ch.take_strong(v.length / 2).length;
  };
  for (let off = 0; off < data.length; off += slice) {
    ch.push(data.subarray(off, Math.min(off + slice, data.length)));
    drain();
  }
  ch.finish();
  drain();
  ch.free();
  const secs = (performance.now() - t0) / 1000;
  return { secs, chunks, cuts, fp, strongBytes };
}

/** Adler-32 in plain JS (zlib's NMAX blocking), what a JavaScript rsync client runs. */
export function adler32js(u8, start = 0, end = u8.length) {
  let a = 1;
  let b = 0;
  for (let i = start; i < end; ) {
    const stop = Math.min(i + 5552, end);
    for (; i < stop; i++) {
      a += u8[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return ((b << 16) | a) >>> 0;
}

export function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Chunk lengths of `data` (default parameters), for the per-chunk Adler32 and hash runs. */
export function chunkLengths(DsyncChunker, data) {
  const ch = new DsyncChunker(2048, 8192, 65536, 0, 16, 0);
  const out = [];
  const drain = () => {
    const v = ch.take_chunks();
    for (let i = 0; i < v.length; i += 2) out.push(v[i]);
  };
  for (let off = 0; off < data.length; off += 1 << 20) {
    ch.push(data.subarray(off, off + (1 << 20)));
    drain();
  }
  ch.finish();
  drain();
  ch.free();
  return Uint32Array.from(out);
}

/** Adler-32 of every chunk; `fn(data, start, end)`. Returns seconds and a checksum. */
export function adlerChunks(fn, data, lengths) {
  const t0 = performance.now();
  let check = 0;
  let off = 0;
  for (let i = 0; i < lengths.length; i++) {
    check = fold(check, fn(data, off, off + lengths[i]));
    off += lengths[i];
  }
  return { secs: (performance.now() - t0) / 1000, check };
}

/**
 * Hashes every `piece` bytes of `data` one-shot with `fn` (sync, or async like
 * crypto.subtle.digest, awaited one at a time as a chunk loop would). Returns seconds and the
 * XOR of every digest's first byte (so no call can be skipped, and runs can be compared).
 */
export async function hashPieces(fn, data, piece, isAsync) {
  const t0 = performance.now();
  let check = 0;
  for (let off = 0; off < data.length; off += piece) {
    const d = isAsync ? await fn(data.subarray(off, off + piece)) : fn(data.subarray(off, off + piece));
    check ^= (d instanceof ArrayBuffer ? new Uint8Array(d) : d)[0];
  }
  return { secs: (performance.now() - t0) / 1000, check };
}

/** Strong hash implementations by name, given what the environment offers. */
export function hashImpls({ wasm, subtle, noble, node }) {
  const impls = {};
  if (wasm) {
    impls['wasm'] = { sha1: (b) => wasm.strong_hash(1, b), sha256: (b) => wasm.strong_hash(2, b), blake3: (b) => wasm.strong_hash(3, b) };
  }
  if (subtle) {
    impls['webcrypto'] = { async: true, sha1: (b) => subtle.digest('SHA-1', b), sha256: (b) => subtle.digest('SHA-256', b) };
  }
  if (node) {
    impls['node:crypto'] = {
      sha1: (b) => node.createHash('sha1').update(b).digest(),
      sha256: (b) => node.createHash('sha256').update(b).digest(),
    };
  }
  if (noble) {
    impls['noble'] = { sha1: noble.sha1, sha256: noble.sha256, blake3: noble.blake3 };
  }
  return impls;
}
