/**
 * A known basis (docs/protocol.md §3): a client that pushed (or pulled) a version remembers its
 * chunk index — lengths and strong hashes, kept per server and name — and pushes the next edit
 * of that file against it. It matches its chunks to the version's by strong hash itself and
 * sends those Match Tokens (Copies) with its Checksum List and Delta Bytes in one go, without
 * waiting for the server's: one round trip instead of two. The server checks the Copies and the
 * root as always, so a wrong memory can cost a retry, never a wrong file.
 */
import type { Run } from './matcher.ts';
import type { ChunkParams } from './protocol.ts';

/** What a client keeps of a version to push against it later. */
export interface KnownVersion {
  version: number;
  root: Uint8Array;
  params: ChunkParams;
  algo: number;
  lengths: Uint32Array;
  hashes: Uint8Array;
}

/** Where a client keeps its known versions, by `knownKey`. */
export interface KnownVersions {
  get(key: string): KnownVersion | undefined;
  set(key: string, v: KnownVersion): void;
  delete(key: string): void;
}

/** The key of a file on a server: its /sync URL and name. */
export const knownKey = (url: string, name: string) => `${url}\n${name}`;

/** Files larger than this are pushed as the paper's three phases: a known basis needs the whole
 *  file chunked before it sends, where the three phases send the list while they chunk. */
export const KNOWN_MAX_FILE = 64 << 20;

/** A push against a known basis sends every chunk it did not find there whole (no Basis
 *  Checksums come back to refine them): with more than this many such bytes, the three phases,
 *  one round trip longer, are pushed instead. At 100 Mbps and 30 ms RTT one round trip is worth
 *  about 375 KB of wire, and Delta Bytes deflate to about half (bench/results/README.md). */
export const KNOWN_MAX_DELTA = 768 << 10;

/** Known versions in memory, the most recently used kept up to `maxBytes` of hashes and lengths. */
export class MemoryKnown implements KnownVersions {
  private entries = new Map<string, KnownVersion>();
  private bytes = 0;
  constructor(private maxBytes = 64 << 20) {}

  get(key: string): KnownVersion | undefined {
    const v = this.entries.get(key);
    if (v) {
      this.entries.delete(key);
      this.entries.set(key, v);
    }
    return v;
  }

  set(key: string, v: KnownVersion) {
    this.delete(key);
    const size = v.hashes.byteLength + v.lengths.byteLength;
    if (size > this.maxBytes) return;
    this.entries.set(key, v);
    this.bytes += size;
    for (const k of this.entries.keys()) {
      if (this.bytes <= this.maxBytes) break;
      this.delete(k);
    }
  }

  delete(key: string) {
    const v = this.entries.get(key);
    if (!v) return;
    this.entries.delete(key);
    this.bytes -= v.hashes.byteLength + v.lengths.byteLength;
  }
}

/**
 * The target's chunks found in the known version by strong hash and length, merged into runs
 * of consecutive chunks (a chunk that continues the run before it is preferred to its first
 * occurrence elsewhere), and the target bytes left uncovered.
 */
export function matchKnown(target: { lengths: Uint32Array; hashes: Uint8Array }, known: KnownVersion, H: number): { runs: Run[]; uncovered: number } {
  const same = (ti: number, bi: number) => {
    if (target.lengths[ti] !== known.lengths[bi]) return false;
    for (let k = 0; k < H; k++) if (target.hashes[ti * H + k] !== known.hashes[bi * H + k]) return false;
    return true;
  };
  // the first 6 bytes of a hash, as a number
  const keyOf = (h: Uint8Array, i: number) => h[i * H] + h[i * H + 1] * 2 ** 8 + h[i * H + 2] * 2 ** 16 + h[i * H + 3] * 2 ** 24 + h[i * H + 4] * 2 ** 32 + h[i * H + 5] * 2 ** 40;
  const first = new Map<number, number>();
  for (let b = known.lengths.length - 1; b >= 0; b--) first.set(keyOf(known.hashes, b), b);
  const runs: Run[] = [];
  let uncovered = 0;
  for (let i = 0; i < target.lengths.length; i++) {
    const prev = runs[runs.length - 1];
    if (prev && prev.first + prev.count === i) {
      const next = prev.basisFirst + prev.count;
      if (next < known.lengths.length && same(i, next)) {
        prev.count++;
        continue;
      }
    }
    const b = first.get(keyOf(target.hashes, i));
    if (b !== undefined && same(i, b)) runs.push({ first: i, count: 1, basisFirst: b });
    else uncovered += target.lengths[i];
  }
  return { runs, uncovered };
}
