/**
 * Finding a basis for a file name the server has never seen (a renamed or "save as" copy):
 * the similarity traits of Remote Differential Compression (Teodosiu et al., MSR-TR-2006-157).
 * Each file is summarised by TRAITS min-hashes of its chunks' FastFp values; two files whose
 * chunk sets overlap by a fraction J share about J·TRAITS traits. The stored file sharing the most traits (at least
 * MIN_SHARED) becomes the basis, so the copy syncs as a delta of it.
 */
export const TRAITS = 16;
export const MIN_SHARED = 4;

/** A 32-bit mix (lowbias32), seeded per trait. */
function mix(x: number, seed: number): number {
  x = (x ^ seed) >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

const SEEDS = Array.from({ length: TRAITS }, (_, k) => mix(k + 1, 0x9e3779b9));

/** The traits of a file: for each seed, the smallest mixed FastFp over its chunks. */
export function traitsOf(fastfps: Uint32Array): Uint32Array {
  const t = new Uint32Array(TRAITS).fill(0xffffffff);
  for (const fp of fastfps) {
    for (let k = 0; k < TRAITS; k++) {
      const h = mix(fp, SEEDS[k]);
      if (h < t[k]) t[k] = h;
    }
  }
  return t;
}

export function sharedTraits(a: Uint32Array, b: Uint32Array): number {
  let n = 0;
  for (let k = 0; k < TRAITS; k++) if (a[k] === b[k]) n++;
  return n;
}
