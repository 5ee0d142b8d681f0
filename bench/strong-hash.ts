/**
 * Strong hash throughput (issue 2, item 5.3): SHA-1, SHA-256, BLAKE3 in our wasm (Node and
 * Chromium), WebCrypto crypto.subtle.digest (Node and Chromium), node:crypto, @noble/hashes
 * (Node and Chromium) and native Rust (the crates our wasm is built from). Each piece is
 * hashed one-shot: 1 MiB pieces (bulk) and 8 KiB pieces (per-chunk hashing, the protocol's
 * use). Also the protocol's real client path: DsyncChunker with a per-chunk strong hash.
 * Usage (from the repository root):
 *   node --import tsx bench/strong-hash.ts [--mib 256] [--slow-mib 32] [--reps 3]
 */
import * as nodeCrypto from 'node:crypto';
import { sha1 } from '@noble/hashes/sha1';
import { sha256 } from '@noble/hashes/sha256';
import { blake3 } from '@noble/hashes/blake3';
import * as wasm from '../shared/src/chunking/wasm.ts';
import { random, chunkWasm, hashPieces, hashImpls } from './browser/gen.js';
import { arg, buildNative, runNative, openBrowser, machine, writeResults, table, median, log, MB, MIB } from './lib/common.ts';

const mib = Number(arg('--mib', '256'));
const slowMib = Number(arg('--slow-mib', '32')); // @noble/hashes is 10-50x slower: less data
const reps = Number(arg('--reps', '3'));
const SEED = 3;
const ALGOS = ['sha1', 'sha256', 'blake3'] as const;
const PIECES = [MIB, 8192];
const STRONG_CODE: Record<string, number> = { none: 0, sha1: 1, sha2: 2, sha256: 2, blake3: 3 };

const bin = buildNative();
const br = await openBrowser();
const mach = machine(br.version);

log(`generating ${mib} MiB in Node and in the page`);
const data = random(mib * MIB, SEED);
const slow = data.subarray(0, slowMib * MIB); // the same generator and seed: a prefix
await br.page.evaluate(([m, sm, s]) => {
  const b = (window as any).bench;
  b.gen('random', m, s);
  b.gen('slow', sm, s);
}, [mib, slowMib, SEED] as const);

const noble = { sha1, sha256, blake3 };
const nodeImpls: Record<string, any> = hashImpls({ wasm, subtle: globalThis.crypto?.subtle, noble, node: nodeCrypto });
const pageImpls: Record<string, string[]> = await br.page.evaluate(() => (window as any).bench.strongImpls());

// Correctness first: every implementation gives the same digest as node:crypto / wasm.
const sample = data.subarray(12345, 12345 + 8192);
const hex = (d: ArrayBuffer | Uint8Array) => Buffer.from(d instanceof ArrayBuffer ? new Uint8Array(d) : d).toString('hex');
for (const algo of ALGOS) {
  const want = hex(wasm.strong_hash(STRONG_CODE[algo], sample));
  for (const [impl, m] of Object.entries(nodeImpls)) {
    if (m[algo] && hex(await m[algo](sample)) !== want) throw new Error(`${impl} ${algo} disagrees with wasm`);
  }
  if (algo !== 'blake3' && want !== nodeCrypto.createHash(algo).update(sample).digest('hex')) throw new Error(`wasm ${algo} disagrees with node:crypto`);
}

// secs[`${env} ${impl}`][`${algo} ${piece}`] = seconds per round
const secs: Record<string, Record<string, number[]>> = {};
const checks: Record<string, number> = {};
const bytesOf: Record<string, number> = {};
const put = (who: string, what: string, s: number, bytes: number, check?: number) => {
  ((secs[who] ??= {})[what] ??= []).push(s);
  bytesOf[`${who}|${what}`] = bytes;
  if (check !== undefined) {
    const k = `${bytes} ${what}`;
    if (checks[k] !== undefined && checks[k] !== check) throw new Error(`${who} ${what}: digests differ from another implementation`);
    checks[k] = check;
  }
};
// Warm-up (V8 tier-up of wasm and JS) on a few MiB, untimed.
for (const m of Object.values(nodeImpls)) for (const a of ALGOS) if (m[a]) await hashPieces(m[a], slow.subarray(0, 4 * MIB), 8192, !!m.async);
await br.page.evaluate(async (impls) => {
  for (const [impl, algos] of Object.entries(impls)) for (const a of algos) await (window as any).bench.strong('slow', impl, a, 8192);
}, pageImpls);

for (let round = 1; round <= reps; round++) {
  const nat = runNative(bin, ['strong', '--mib', String(mib), '--reps', '1', '--seed', String(SEED)]);
  for (const r of nat.rows) put('native Rust', `${r.algo} ${r.piece}`, r.secs[0], nat.bytes);
  for (const [impl, m] of Object.entries(nodeImpls)) {
    const d = impl === 'noble' ? slow : data;
    for (const algo of ALGOS) {
      if (!m[algo]) continue;
      for (const piece of PIECES) {
        const r = await hashPieces(m[algo], d, piece, !!m.async);
        put(`Node ${impl}`, `${algo} ${piece}`, r.secs, d.length, r.check);
      }
    }
  }
  for (const [impl, algos] of Object.entries(pageImpls)) {
    const kind = impl === 'noble' ? 'slow' : 'random';
    for (const algo of algos) {
      for (const piece of PIECES) {
        const r = await br.page.evaluate(([k, i, a, p]) => (window as any).bench.strong(k, i, a, p), [kind, impl, algo, piece] as const);
        put(`Chromium ${impl}`, `${algo} ${piece}`, r.secs, (kind === 'slow' ? slowMib : mib) * MIB, r.check);
      }
    }
  }
  // The client's path: CDC chunks (mean ~10 KiB) hashed inside wasm while chunking.
  for (const algo of ['none', ...ALGOS]) {
    const r = chunkWasm(wasm.DsyncChunker, data, { strong: STRONG_CODE[algo] });
    put('Node wasm DsyncChunker', algo, r.secs, data.length);
    const b = await br.page.evaluate(([s]) => (window as any).bench.chunk('random', { strong: s }), [STRONG_CODE[algo]] as const);
    put('Chromium wasm DsyncChunker', algo, b.secs, data.length);
  }
  log(`round ${round}/${reps} done`);
}
await br.close();

const thr = (who: string, what: string) => (secs[who]?.[what] ? bytesOf[`${who}|${what}`] / median(secs[who][what]) / MB : NaN);
const f = (x: number) => (Number.isNaN(x) ? '—' : x.toFixed(0));
const COLS = ['native Rust', 'Node wasm', 'Chromium wasm', 'Node webcrypto', 'Chromium webcrypto', 'Node node:crypto', 'Node noble', 'Chromium noble'];
const rows = ALGOS.flatMap((algo) => PIECES.map((p) => [algo.toUpperCase().replace('SHA', 'SHA-'), p === MIB ? '1 MiB' : '8 KiB', ...COLS.map((c) => f(thr(c, `${algo} ${p}`)))]));
const chunkRows = ['Node', 'Chromium'].flatMap((env) => {
  const who = `${env} wasm DsyncChunker`;
  const base = thr(who, 'none');
  return ALGOS.map((a) => {
    const both = thr(who, a);
    // Hash-only rate implied by the extra time: 1 / (1/both - 1/base).
    return [env, a, f(base), f(both), f(1 / (1 / both - 1 / base))];
  });
});

const body = `
Strong hashes, one-shot per piece over ${mib} MiB of random data (gen.js / gen.rs, seed ${SEED});
@noble/hashes over the first ${slowMib} MiB of the same data (it is 10-50x slower). MB/s = 10^6 B/s,
median of ${reps} rounds; each round runs everything back to back. WebCrypto: one
\`crypto.subtle.digest\` call awaited at a time (as a chunk loop would). wasm: the exported
\`strong_hash(algo, bytes)\` (copies the piece into wasm memory; included). node:crypto has no
BLAKE3 (OpenSSL 3); WebCrypto has no BLAKE3. Native Rust: the sha1 / sha2 / blake3 crates that the
wasm is built from, through dsync_wasm::strong::hash (they detect SHA-NI / AVX2 / AVX-512 at run
time; this CPU has ${mach.cpu_flags}). All implementations agree on the digests (checked).

## One-shot throughput (MB/s)

${table(['algorithm', 'piece', ...COLS], rows)}

## The client's path: chunking with per-chunk strong hash in wasm (DsyncChunker, 1 MiB pushes)

${table(['env', 'strong hash', 'chunk only MB/s', 'chunk + hash MB/s', 'implied hash-only MB/s'], chunkRows)}
`;
writeResults('strong-hash', 'Strong hash throughput: wasm, WebCrypto, node:crypto, @noble/hashes, native', mach, body, {
  mib,
  slow_mib: slowMib,
  reps,
  secs,
  bytes: bytesOf,
});
console.log(body);
