/**
 * Whether bytes are worth deflating, from their order-0 entropy: compressed media, archives and
 * random data sit near 8 bits per byte, where deflate shrinks nothing and costs the most CPU
 * (a 100 MB random file's pull took 3.7× as long with its Delta frames deflated,
 * bench/results/delta-compression.md, "Frames that do not compress").
 */

/** Above this many bits per byte, deflate saves under 10 % (shared/test/deflate-choice.test.ts). */
const COMPRESSIBLE_BITS = 7.9;
/** Bytes sampled from a large buffer, in `SAMPLES` evenly spaced pieces: enough that random
 *  bytes estimate above `COMPRESSIBLE_BITS` (the estimate's bias is about 255 / (2 n ln 2)). */
const SAMPLE_BYTES = 16 << 10;
const SAMPLES = 4;

/** Whether `samples`, counted together, are below `COMPRESSIBLE_BITS` (no bytes: true). */
export function compressible(samples: Iterable<Uint8Array>): boolean {
  const counts = new Float64Array(256);
  let n = 0;
  for (const bytes of samples) {
    for (let i = 0; i < bytes.length; i++) counts[bytes[i]]++;
    n += bytes.length;
  }
  let bits = 0;
  for (const c of counts) if (c) bits -= (c / n) * Math.log2(c / n);
  return n === 0 || bits < COMPRESSIBLE_BITS;
}

/** `compressible` of a buffer: whole up to SAMPLE_BYTES, else SAMPLES evenly spaced pieces. */
export function compressibleBuffer(bytes: Uint8Array): boolean {
  if (bytes.length <= SAMPLE_BYTES) return compressible([bytes]);
  const len = SAMPLE_BYTES / SAMPLES;
  const pieces: Uint8Array[] = [];
  for (let k = 0; k < SAMPLES; k++) {
    const at = Math.floor(((bytes.length - len) * k) / (SAMPLES - 1));
    pieces.push(bytes.subarray(at, at + len));
  }
  return compressible(pieces);
}
