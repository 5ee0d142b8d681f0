/**
 * Finding a basis for a file name the server has never seen (a renamed or "save as" copy):
 * the similarity traits of Remote Differential Compression (Teodosiu et al., MSR-TR-2006-157).
 * Each file is summarised by TRAITS min-hashes of its chunks' FastFp values; two files whose
 * chunk sets overlap by a fraction J share about J·TRAITS traits. The stored file sharing the most traits (at least
 * MIN_SHARED) becomes the basis, so the copy syncs as a delta of it.
 */
import type { Listing } from './listing.ts';
import type { Repo } from './repo.ts';

export const TRAITS = 16;
export const MIN_SHARED = 4;
/** Similarity traits are brought up to the folder catalogs when older than this (other processes commit). */
const TRAITS_REFRESH_MS = 30_000;

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

/** One user's files as bases for a new name: the traits of each file's latest version, read
 *  from the folder catalogs and the version indexes, kept for TRAITS_REFRESH_MS. */
export class SimilarFiles {
  /** similarity traits of each file's latest version, by index id */
  private traits: { at: number; map: Map<string, { index: string; traits: Uint32Array }> } | null = null;

  /** `latest`: the file's latest version now (0: none) */
  constructor(
    private readonly repo: Repo,
    private readonly listing: Listing,
    private readonly latest: (name: string) => Promise<number>,
  ) {}

  /** The stored file most similar to a target with these chunk FastFps, if any is similar enough. */
  async similar(fastfps: Uint32Array): Promise<{ name: string; version: number } | null> {
    if (fastfps.length < MIN_SHARED) return null;
    if (!this.traits || Date.now() - this.traits.at > TRAITS_REFRESH_MS) {
      const old = this.traits?.map;
      const map = new Map<string, { index: string; traits: Uint32Array }>();
      const latest: [string, string][] = [];
      try {
        await this.listing.walk('', (name, e) => e?.index && latest.push([name, e.index]));
      } catch {
        return null; // a catalog that cannot be read now: this push goes without a similar basis
      }
      for (const [name, index] of latest) {
        const had = old?.get(name);
        if (had?.index === index) map.set(name, had);
        else {
          try {
            map.set(name, { index, traits: traitsOf((await this.repo.readIndex(index, name)).index.fastfps) });
          } catch {
            // a damaged index is no basis; it breaks nothing else
          }
        }
      }
      this.traits = { at: Date.now(), map };
    }
    const want = traitsOf(fastfps);
    let best: string | null = null;
    let bestShared = MIN_SHARED - 1;
    for (const [name, t] of this.traits.map) {
      const n = sharedTraits(want, t.traits);
      if (n > bestShared) {
        bestShared = n;
        best = name;
      }
    }
    // the file's latest version now (the traits may be of an earlier one: still a good basis)
    const version = best ? await this.latest(best) : 0;
    return best && version ? { name: best, version } : null;
  }

  /** Records the similarity traits of `name`'s new latest version (its index `id`). */
  note(name: string, id: string, fastfps: Uint32Array): void {
    this.traits?.map.set(name, { index: id, traits: traitsOf(fastfps) });
  }
}
