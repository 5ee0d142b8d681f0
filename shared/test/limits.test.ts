// The chunk-size ranges in shared/src/base/limits.ts are the Rust chunker's (wasm/src/chunker.rs,
// the source): at every edge, checkParams accepts exactly what the wasm chunker accepts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DsyncChunker } from '../src/chunking/wasm.ts';
import { CHUNK_SIZE_RANGES } from '../src/base/limits.ts';
import { type ChunkParams, checkParams } from '../src/wire/protocol.ts';

function wasmAccepts(p: ChunkParams): boolean {
  try {
    new DsyncChunker(p.min, p.avg, p.max, p.op, p.every, 0).free();
    return true;
  } catch {
    return false;
  }
}

function tsAccepts(p: ChunkParams): boolean {
  try {
    checkParams(p);
    return true;
  } catch {
    return false;
  }
}

test('checkParams and the wasm chunker agree at every edge of the chunk-size ranges', () => {
  const { min, avg, max } = CHUNK_SIZE_RANGES;
  const edges = (r: { from: number; to: number; multipleOf: number }) => [r.from - r.multipleOf, r.from - 1, r.from, r.from + 1, r.from + r.multipleOf, r.to - r.multipleOf, r.to - 1, r.to, r.to + 1, r.to + r.multipleOf];
  const cases: ChunkParams[] = [
    ...edges(min).map((v) => ({ min: v, avg: 2 << 20, max: 8 << 20, op: 0, every: 16 })),
    ...edges(avg).map((v) => ({ min: 64, avg: v, max: 16 << 20, op: 0, every: 16 })),
    ...edges(max).map((v) => ({ min: 64, avg: 512, max: v, op: 0, every: 16 })),
  ];
  let accepted = 0;
  for (const p of cases) {
    assert.equal(tsAccepts(p), wasmAccepts(p), JSON.stringify(p));
    if (tsAccepts(p)) accepted++;
  }
  assert.ok(accepted >= 12 && accepted < cases.length, `${accepted} of ${cases.length} accepted`);
});
