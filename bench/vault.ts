// The client's cost of a vault's chunk work, in Node (docs/vaults.md, "Parameters"): keyed
// BLAKE3 chunk ids through wasm (keyed_blake3_chunks) against @noble/hashes' blake3 with a key;
// the keyed chunker against the plain one (the same FastCDC, another Gear table); sealing 8 KiB
// chunks with AES-256-GCM (WebCrypto, and node:crypto as the CLI's chunk workers seal, with the
// CPU each takes); Argon2id at the keyfile's parameters. Rounds interleave
// the variants; medians. Writes bench/results/vault-client.md.
//   node --import tsx bench/vault.ts [--mib 64] [--reps 5]
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { argon2id } from '@noble/hashes/argon2';
import { blake3 } from '@noble/hashes/blake3';
import '../shared/src/chunking/wasm.ts';
import { DsyncChunker, keyed_blake3_chunks } from '../shared/src/chunking/wasm.ts';
import { VAULT_ARGON2 } from '../shared/src/base/limits.ts';
import { DEFAULT_PARAMS as P } from '../shared/src/wire/protocol.ts';
import { Kind } from '../shared/src/vault/format.ts';
import { SEAL_OVERHEAD } from '../shared/src/vault/format.ts';
import { deriveKeys, newVaultId, newVaultKey, sealChunk, sealContentInto } from '../shared/src/vault/keys.ts';
import { nodeSealer } from '../shared/src/vault/spans-node.ts';
import { randomBytes } from '../harness/testdata.ts';

const arg = (n: string, d: number) => {
  const i = process.argv.indexOf(`--${n}`);
  return i > 0 ? Number(process.argv[i + 1]) : d;
};
const MIB = arg('mib', 64);
const REPS = arg('reps', 5);
const data = randomBytes(7, MIB << 20);
const keys = await deriveKeys(newVaultId(), newVaultKey());
const lengths = new Uint32Array(data.length / 8192).fill(8192);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const time = async (f: () => unknown | Promise<unknown>) => {
  const t = performance.now();
  await f();
  return (performance.now() - t) / 1000;
};
const chunk = (c: DsyncChunker) => {
  for (let o = 0; o < data.length; o += 4 << 20) c.push(data.subarray(o, o + (4 << 20)));
  c.finish();
  c.take_chunks();
  c.free();
};
/** Seconds of this process's CPU `f` takes. */
const cpu = async (f: () => Promise<unknown>) => {
  const c = process.cpuUsage();
  await f();
  const d = process.cpuUsage(c);
  return (d.user + d.system) / 1e6;
};
/** 8 KiB chunks sealed into one output, all at once, as a chunk worker seals a batch (spans.ts). */
const sealAll = (seal: typeof sealContentInto) => () => {
  const out = new Uint8Array(data.length + lengths.length * SEAL_OVERHEAD);
  return Promise.all(Array.from(lengths, (l, i) => seal(keys, keys.chunkId, data.subarray(i * 8192, i * 8192 + l), out, i * (8192 + SEAL_OVERHEAD))));
};
const node = nodeSealer();
const sealCpu: Record<string, number[]> = { WebCrypto: [], 'node:crypto': [] };
const runs: Record<string, number[]> = { 'ids: wasm keyed_blake3_chunks': [], 'ids: @noble/hashes blake3 {key}': [], 'chunking: plain Gear': [], 'chunking: keyed Gear': [], 'seal: AES-256-GCM (WebCrypto), 8 KiB chunks': [] };
for (let r = 0; r < REPS; r++) {
  runs['ids: wasm keyed_blake3_chunks'].push(await time(() => keyed_blake3_chunks(keys.chunkId, data, lengths)));
  runs['ids: @noble/hashes blake3 {key}'].push(await time(() => { for (let o = 0; o < data.length; o += 8192) blake3(data.subarray(o, o + 8192), { key: keys.chunkId }); }));
  runs['chunking: plain Gear'].push(await time(() => chunk(new DsyncChunker(P.min, P.avg, P.max, P.op, P.every, 0))));
  runs['chunking: keyed Gear'].push(await time(() => chunk(DsyncChunker.keyed(P.min, P.avg, P.max, P.op, P.every, keys.gear))));
  runs['seal: AES-256-GCM (WebCrypto), 8 KiB chunks'].push(await time(async () => { for (let o = 0; o < data.length; o += 8192) await sealChunk(keys, Kind.Content, keys.chunkId, data.subarray(o, o + 8192)); }));
  sealCpu.WebCrypto.push(await cpu(sealAll(sealContentInto)));
  sealCpu['node:crypto'].push(await cpu(sealAll(node)));
}
const argonS = await time(() => argon2id('a passphrase', new Uint8Array(16), { ...VAULT_ARGON2, dkLen: 32 }));
const cmd = `node --import tsx bench/vault.ts --mib ${MIB} --reps ${REPS}`;
const rows = Object.entries(runs).map(([k, v]) => `| ${k} | ${(MIB / median(v)).toFixed(0)} MiB/s | ${v.map((s) => (MIB / s).toFixed(0)).join(', ')} |`);
const md = `# A vault's client-side work (Node ${process.version})

Command: \`${cmd}\` (${new Date().toISOString()}, ${os.cpus().length} × ${os.cpus()[0].model}, load ${os.loadavg()[0].toFixed(1)}: a shared, loaded machine; compare rows of one run only).
${MIB} MiB of random bytes, ${REPS} interleaved rounds.

| what | median | every round |
|---|---|---|
${rows.join('\n')}

A batch of 8 KiB chunks sealed at once into one output, as a chunk worker seals (spans.ts), this process's CPU seconds for the ${MIB} MiB (all threads: WebCrypto's jobs run on libuv's pool): WebCrypto ${sealCpu.WebCrypto.map((s) => s.toFixed(2)).join(', ')} (median ${median(sealCpu.WebCrypto).toFixed(2)}), node:crypto (\`nodeSealer\`, the CLI's chunk workers) ${sealCpu['node:crypto'].map((s) => s.toFixed(2)).join(', ')} (median ${median(sealCpu['node:crypto']).toFixed(2)}).

Argon2id m=${VAULT_ARGON2.m} KiB, t=${VAULT_ARGON2.t}, p=${VAULT_ARGON2.p} (@noble/hashes): ${argonS.toFixed(2)} s.
`;
writeFileSync(new URL('results/vault-client.md', import.meta.url), md);
console.log(md);
