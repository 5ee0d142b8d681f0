// Types for gen.js (plain JS so the benchmark page loads it without a build step).
export declare class Rng32 {
  constructor(seed: number);
  s: number;
  next(): number;
}
export declare function fillRandom(u8: Uint8Array, rng: Rng32): void;
export declare function random(len: number, seed: number): Uint8Array;
export declare function text(len: number, seed: number): Uint8Array;
export declare const fold: (acc: number, v: number) => number;
export interface ChunkRun {
  secs: number;
  chunks: number;
  cuts: number;
  fp: number;
  strongBytes: number;
}
export interface ChunkerCtor {
  new (min: number, avg: number, max: number, op: number, every: number, strong: number): {
    push(data: Uint8Array): number;
    finish(): number;
    take_chunks(): Uint32Array;
    take_strong(count: number): Uint8Array;
    free(): void;
  };
}
export declare function chunkWasm(
  DsyncChunker: ChunkerCtor,
  data: Uint8Array,
  opts?: { op?: number; every?: number; slice?: number; strong?: number },
): ChunkRun;
export declare function adler32js(u8: Uint8Array, start?: number, end?: number): number;
export declare function median(xs: number[]): number;
export declare function chunkLengths(DsyncChunker: ChunkerCtor, data: Uint8Array): Uint32Array;
export declare function adlerChunks(
  fn: (data: Uint8Array, start: number, end: number) => number,
  data: Uint8Array,
  lengths: Uint32Array,
): { secs: number; check: number };
type Digest = Uint8Array | ArrayBuffer;
export declare function hashPieces(
  fn: (b: Uint8Array) => Digest | Promise<Digest>,
  data: Uint8Array,
  piece: number,
  isAsync: boolean,
): Promise<{ secs: number; check: number }>;
export declare function hashImpls(env: {
  wasm?: { strong_hash(algo: number, b: Uint8Array): Uint8Array };
  subtle?: SubtleCrypto;
  noble?: Record<string, (b: Uint8Array) => Uint8Array>;
  node?: typeof import('node:crypto');
}): Record<string, any>;
