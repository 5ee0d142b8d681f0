/**
 * A chunk worker's cut of one span (shared/src/vault/spans.ts `cutSpan`: `SpanCutter`, the keyed
 * chunking and the keyed BLAKE3 ids from one copy in wasm memory) against the same cut plus the
 * default chunking and its BLAKE3 hashes (what each span cost while a vault's version root was
 * the default chunking's, before it became the root over the keyed ids), in one thread,
 * alternated, CPU time of this process (user + system); the keyed chunks and ids of both are
 * checked equal. The module is this checkout's wasm/pkg.
 *
 *   node --import tsx bench/vault-span-cut.ts [--mib 17] [--rounds 12]
 */
import { DsyncChunker, SpanCutter } from '../shared/src/chunking/wasm.ts';
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

function keyed(): Uint8Array[] {
  const c = new SpanCutter(params, gear, key);
  try {
    c.cut(data, false);
    return [new Uint8Array(c.keyed_lengths().buffer), c.ids()];
  } finally {
    c.free();
  }
}

function keyedAndDefaultRoot(): Uint8Array[] {
  const out = keyed();
  const plain = new DsyncChunker(p.min, p.avg, p.max, p.op, p.every, DEFAULT_ALGO);
  try {
    plain.push(data);
    const pairs = plain.take_chunks();
    plain.take_strong(pairs.length / 2);
  } finally {
    plain.free();
  }
  return out;
}

const a = keyed();
const b = keyedAndDefaultRoot();
a.forEach((x, i) => {
  if (!Buffer.from(x).equals(Buffer.from(b[i]))) throw new Error(`the two cuts differ (result ${i})`);
});
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const times = { both: [] as number[], keyed: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  let t = cpuMs();
  keyedAndDefaultRoot();
  times.both.push(cpuMs() - t);
  t = cpuMs();
  keyed();
  times.keyed.push(cpuMs() - t);
}
const ratios = times.keyed.map((t, i) => t / times.both[i]);
const range = (xs: number[]) => `${median(xs).toFixed(1)} (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)})`;
console.log(`a span of ${MIB} MiB, ${ROUNDS} rounds alternated, CPU ms (median, min–max):`);
console.log(`  keyed chunking and ids, and the default chunking and hashes: ${range(times.both)}`);
console.log(`  keyed chunking and ids (SpanCutter): ${range(times.keyed)}`);
console.log(`  keyed/both, round by round: ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}); the same keyed chunks and ids`);
