/**
 * A chunk worker's cut of one span (shared/src/vault/spans.ts `cutSpan`), one copy into wasm
 * memory (`SpanCutter`: both chunkings and both hashings from it) against three (a keyed
 * `DsyncChunker`, a default one and `keyed_blake3_chunks`, each handed the span), in one thread,
 * alternated, CPU time of this process (user + system); both give the same chunks, ids and
 * hashes (checked). The module is this checkout's wasm/pkg.
 *
 *   node --import tsx bench/vault-span-cut.ts [--mib 17] [--rounds 12]
 */
import { DsyncChunker, SpanCutter, keyed_blake3_chunks } from '../shared/src/chunking/wasm.ts';
import { DEFAULT_ALGO, DEFAULT_PARAMS } from '../shared/src/wire/protocol.ts';
import { fastRandomBytes } from '../harness/testdata.ts';
import { arg, median } from './lib/common.ts';

const MIB = Number(arg('--mib', '17'));
const ROUNDS = Number(arg('--rounds', '12'));
const data = fastRandomBytes(1, MIB << 20);
const gear = fastRandomBytes(2, 2048);
const key = fastRandomBytes(3, 32);
const p = DEFAULT_PARAMS;
const params = Uint32Array.of(p.min, p.avg, p.max, p.op, p.every);

function threeCopies(): Uint8Array[] {
  const keyed = DsyncChunker.keyed(p.min, p.avg, p.max, p.op, p.every, gear);
  const plain = new DsyncChunker(p.min, p.avg, p.max, p.op, p.every, DEFAULT_ALGO);
  try {
    keyed.push(data);
    plain.push(data);
    const lengthsOf = (pairs: Uint32Array) => Uint32Array.from({ length: pairs.length / 2 }, (_, i) => pairs[2 * i]);
    const lengths = lengthsOf(keyed.take_chunks());
    const total = lengths.reduce((n, l) => n + l, 0);
    const ids = keyed_blake3_chunks(key, data.subarray(0, total), lengths);
    const rootLengths = lengthsOf(plain.take_chunks());
    return [new Uint8Array(lengths.buffer), ids, new Uint8Array(rootLengths.buffer), plain.take_strong(rootLengths.length)];
  } finally {
    keyed.free();
    plain.free();
  }
}

function oneCopy(): Uint8Array[] {
  const c = new SpanCutter(params, gear, key, params, DEFAULT_ALGO);
  try {
    c.cut(data, false);
    return [new Uint8Array(c.keyed_lengths().buffer), c.ids(), new Uint8Array(c.root_lengths().buffer), c.root_hashes()];
  } finally {
    c.free();
  }
}

const a = threeCopies();
const b = oneCopy();
a.forEach((x, i) => {
  if (!Buffer.from(x).equals(Buffer.from(b[i]))) throw new Error(`the two cuts differ (result ${i})`);
});
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const times = { three: [] as number[], one: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  let t = cpuMs();
  threeCopies();
  times.three.push(cpuMs() - t);
  t = cpuMs();
  oneCopy();
  times.one.push(cpuMs() - t);
}
const ratios = times.one.map((t, i) => t / times.three[i]);
console.log(`a span of ${MIB} MiB, ${ROUNDS} rounds alternated, CPU ms (median, min–max):`);
console.log(`  three copies: ${median(times.three).toFixed(1)} (${Math.min(...times.three).toFixed(1)}–${Math.max(...times.three).toFixed(1)})`);
console.log(`  one copy (SpanCutter): ${median(times.one).toFixed(1)} (${Math.min(...times.one).toFixed(1)}–${Math.max(...times.one).toFixed(1)})`);
console.log(`  one/three, round by round: ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}); the same chunks, ids and hashes`);
