/**
 * A known basis (docs/protocol.md §3): a client that pushed (or pulled) a version remembers its
 * chunk index — lengths and strong hashes, kept per server and name — and pushes the next edit
 * of that file against it. It matches its chunks to the version's by strong hash itself and
 * sends those Match Tokens (Copies) with its Checksum List and Delta Bytes in one go, without
 * waiting for the server's: one round trip instead of two. The server checks the Copies and the
 * root as always, so a wrong memory can cost a retry, never a wrong file.
 *
 * A version the client pushed it also keeps cut finer (its own Basis Checksums of the whole
 * file, refine.ts): the chunks it sends are then refined against them as against the server's
 * list, copies of the known version's bytes and literal pieces, still in one round trip. A
 * client whose store keeps bytes (`KnownVersions.keeps`) also keeps the version's bytes, checked
 * against its chunk index before they are kept, and refines against them at byte granularity
 * instead (kept.ts).
 */
import { giveBuffers, takeBuffer } from '../base/buffers.ts';
import { type Source, chunkSource, concat, equalBytes } from '../chunking/chunk-index.ts';
import { type ChunkParams, type FineParams, Msg } from '../wire/protocol.ts';
import { BasisChecksumTable } from './basis-checksums.ts';
import { fineCut } from './refine.ts';

/** What a client keeps of a version to push against it later. */
export interface KnownVersion {
  version: number;
  root: Uint8Array;
  params: ChunkParams;
  algo: number;
  lengths: Uint32Array;
  hashes: Uint8Array;
  /** the version cut finer (refine.ts fineCut, in windows of FINE_WINDOW bytes): each finer
   *  chunk's length and the first 8 bytes of its strong hash, consecutive from offset 0 */
  fine?: { params: FineParams; lengths: Uint32Array; prefixes: Uint8Array };
  /** the version's bytes (a kept basis, kept.ts), whose chunk index is the one above */
  kept?: Uint8Array;
}

/** Bytes a known version takes in memory. */
export const knownBytes = (v: KnownVersion) => v.hashes.byteLength + v.lengths.byteLength + (v.fine ? v.fine.lengths.byteLength + v.fine.prefixes.byteLength : 0) + (v.kept?.byteLength ?? 0);

/** Bytes cut finer at once (the last finer chunk of each window ends at its end). */
const FINE_WINDOW = 4 << 20;

/** A file cut finer, the whole of it: what a receiver would list of it as Basis Checksums. */
export async function fineIndex(source: Source, params: FineParams, algo: number): Promise<NonNullable<KnownVersion['fine']>> {
  const lengths: Uint32Array[] = [];
  const prefixes: Uint8Array[] = [];
  const buf = takeBuffer(Math.min(FINE_WINDOW, source.size));
  for (let o = 0; o < source.size; o += FINE_WINDOW) {
    const c = fineCut(await source.read(o, Math.min(FINE_WINDOW, source.size - o), buf), params, algo);
    lengths.push(c.lengths);
    prefixes.push(c.prefixes);
  }
  giveBuffers([buf]); // (every read into it was awaited; on a failure it is left to the GC)
  return { params, lengths: concat(lengths, Uint32Array), prefixes: concat(prefixes, Uint8Array) };
}

/** Whether `source`'s bytes chunk and hash to the chunk index of `v`: kept bytes are used, and
 *  kept, only then (a file changed since it was pushed, or bytes damaged where they are kept,
 *  do not). */
export async function chunksTo(source: Source, v: KnownVersion): Promise<boolean> {
  const ix = await chunkSource(source, v.params, v.algo);
  const u8 = (a: Uint32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  return equalBytes(ix.hashes, v.hashes) && equalBytes(u8(ix.lengths), u8(v.lengths));
}

/** Where a client keeps its known versions, by `knownKey`. */
export interface KnownVersions {
  get(key: string): KnownVersion | undefined;
  set(key: string, v: KnownVersion): void;
  delete(key: string): void;
  /** whether a version of `size` bytes is kept with its bytes (absent: never) */
  keeps?(size: number): boolean;
  /** `set` writes the version out and `get` reads it back anew (the CLI's cache on disk): what
   *  a push would make ahead for the next one is of no use */
  readsBack?: boolean;
  /** the client's record of the uploads it began and has not seen commit (absent: it keeps
   *  none, and a push decides whether it may resume by the file's size, delta-client.ts
   *  `mayResume`) */
  uploads?: UploadRecord;
}

/**
 * Uploads a client began and has not seen commit, by `knownKey`: what tells a push run again
 * that an earlier upload of its file to its server was cut off (by a lost connection, a killed
 * client or a killed server), so that its Hello says it may resume (docs/protocol.md §3
 * "Resuming"), and that no upload was, so that it does not (one store request less on S3,
 * docs/store.md §4). A push notes only uploads that can leave a checkpoint (files of
 * RESUME_MIN_FILE and more, with the three phases); a missed note costs the bytes sent again,
 * never a version.
 */
export interface UploadRecord {
  /** whether an upload of `key` was noted begun and not ended; undefined: the record cannot be
   *  read (the push then decides by the file's size) */
  cutOff(key: string): boolean | undefined;
  /** notes an upload of `key` begun; called before its first byte goes out, and kept through a
   *  killed process */
  begin(key: string): void;
  /** notes the upload of `key` ended: the server committed it (or found it unchanged) */
  end(key: string): void;
}

/** The key of a file on a server: its /sync URL and name. */
export const knownKey = (url: string, name: string) => `${url}\n${name}`;

/** Versions of files larger than this are not pushed against (their finer cut would take
 *  tens of MB of memory: 12 bytes per 256): such files are pushed with the three phases, and
 *  their known version serves only as the basis a push names (guarded-push.ts). */
export const KNOWN_MAX_FILE = 64 << 20;

/** A push against a version known without its finer cut (a pulled one) sends every chunk it
 *  did not find there whole: with more than this many such bytes, the three phases, one round
 *  trip longer but refined by the server's Basis Checksums, are pushed instead. At 100 Mbps and
 *  30 ms RTT one round trip is worth about 375 KB of wire, and Delta Bytes deflate to about half. */
export const KNOWN_MAX_DELTA = 768 << 10;

const tables = new WeakMap<object, BasisChecksumTable>();

/** A known version's finer cut as the table a sender refines against (basis-checksums.ts),
 *  made once per cut: ~5 ms per 10 MB, which a push made after its predecessor's Result need
 *  not wait for. */
export function basisChecksumsOf(fine: NonNullable<KnownVersion['fine']>, algo: number): BasisChecksumTable {
  let t = tables.get(fine);
  if (!t) {
    t = new BasisChecksumTable(algo);
    t.add({ type: Msg.BasisChecksums, offset: 0, fine: fine.params, lengths: fine.lengths, prefixes: fine.prefixes });
    tables.set(fine, t);
  }
  return t;
}

/** Known versions in memory, the most recently used kept up to `maxBytes` of hashes and
 *  lengths, and their bytes with `keepBytes` (`onEvict` hears of those dropped for room). */
export class MemoryKnown implements KnownVersions {
  private entries = new Map<string, KnownVersion>();
  private bytes = 0;
  constructor(
    private maxBytes = 64 << 20,
    private onEvict?: (key: string) => void,
    private keepBytes = false,
  ) {}

  keeps(size: number): boolean {
    return this.keepBytes && size <= this.maxBytes;
  }

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
    const size = knownBytes(v);
    if (size > this.maxBytes) return;
    this.entries.set(key, v);
    this.bytes += size;
    for (const k of this.entries.keys()) {
      if (this.bytes <= this.maxBytes) break;
      this.delete(k);
      this.onEvict?.(k);
    }
  }

  delete(key: string) {
    const v = this.entries.get(key);
    if (!v) return;
    this.entries.delete(key);
    this.bytes -= knownBytes(v);
  }
}
