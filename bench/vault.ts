// The client's cost of a vault's chunk work, in Node (docs/vaults.md, "Parameters"): keyed
// BLAKE3 chunk ids through wasm (keyed_blake3_chunks) against @noble/hashes' blake3 with a key;
// the keyed chunker against the plain one (the same FastCDC, another Gear table); sealing 8 KiB
// chunks: AES-256-GCM a chunk a call (WebCrypto; how contents were sealed before `sealContent`)
// against `sealContent`'s AES-256-CTR a batch a call (WebCrypto, as the page's chunk workers
// seal, and node:crypto, as the CLI's), with the CPU each takes; Argon2id at the keyfile's
// parameters. Rounds interleave
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
import { type ContentCipher, deriveKeys, newVaultId, newVaultKey, sealContent, webCipher } from '../shared/src/vault/keys.ts';
import { nodeCipher } from '../shared/src/vault/spans-node.ts';
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
const chunks = Array.from(lengths, (l, i) => data.subarray(i * 8192, i * 8192 + l));
const ids = chunks.map(() => keys.chunkId);
/** Every 8 KiB chunk sealed with AES-256-GCM, a WebCrypto call each, all at once. */
const gcmEach = () => Promise.all(chunks.map((c) => crypto.subtle.encrypt({ name: 'AES-GCM', iv: crypto.getRandomValues(new Uint8Array(12)) }, keys.content, c as Uint8Array<ArrayBuffer>)));
/** The chunks sealed by `sealContent` in batches of 16 MiB (a chunk worker's span). */
const batches = (cipher: ContentCipher) => async () => {
  for (let i = 0; i < chunks.length; i += 2048) await sealContent(cipher, keys, ids.slice(i, i + 2048), chunks.slice(i, i + 2048));
};
const SEALS: Record<string, () => Promise<unknown>> = {
  'AES-256-GCM a chunk a call (WebCrypto)': gcmEach,
  'sealContent, AES-256-CTR a batch a call (WebCrypto)': batches(webCipher),
  'sealContent, AES-256-CTR a batch a call (node:crypto)': batches(nodeCipher),
};
const sealCpu: Record<string, number[]> = Object.fromEntries(Object.keys(SEALS).map((k) => [k, []]));
const runs: Record<string, number[]> = { 'ids: wasm keyed_blake3_chunks': [], 'ids: @noble/hashes blake3 {key}': [], 'chunking: plain Gear': [], 'chunking: keyed Gear': [], ...Object.fromEntries(Object.keys(SEALS).map((k) => [`seal: ${k}, 8 KiB chunks`, []])) };
for (let r = 0; r < REPS; r++) {
  runs['ids: wasm keyed_blake3_chunks'].push(await time(() => keyed_blake3_chunks(keys.chunkId, data, lengths)));
  runs['ids: @noble/hashes blake3 {key}'].push(await time(() => { for (let o = 0; o < data.length; o += 8192) blake3(data.subarray(o, o + 8192), { key: keys.chunkId }); }));
  runs['chunking: plain Gear'].push(await time(() => chunk(new DsyncChunker(P.min, P.avg, P.max, P.op, P.every, 0))));
  runs['chunking: keyed Gear'].push(await time(() => chunk(DsyncChunker.keyed(P.min, P.avg, P.max, P.op, P.every, keys.gear))));
  for (const [k, f] of Object.entries(SEALS)) {
    const c = process.cpuUsage();
    runs[`seal: ${k}, 8 KiB chunks`].push(await time(f));
    const d = process.cpuUsage(c);
    sealCpu[k].push((d.user + d.system) / 1e6);
  }
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

The CPU seconds of this process (all threads: WebCrypto's jobs run on libuv's pool) each way of sealing takes for the ${MIB} MiB:
${Object.entries(sealCpu).map(([k, v]) => `- ${k}: median ${median(v).toFixed(2)} (${v.map((s) => s.toFixed(2)).join(', ')})`).join('\n')}

Argon2id m=${VAULT_ARGON2.m} KiB, t=${VAULT_ARGON2.t}, p=${VAULT_ARGON2.p} (@noble/hashes): ${argonS.toFixed(2)} s.
`;
writeFileSync(new URL('results/vault-client.md', import.meta.url), md);
console.log(md);
