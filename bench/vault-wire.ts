/**
 * A vault's bytes on the wire against plain Dsync's (issue 46's "Measure"): the same pairs of
 * versions pushed and pulled both ways, every byte between client and server counted by a TCP
 * proxy (bench/lib/proxy.ts: the vault's HTTP requests and answers, plain Dsync's WebSocket after
 * permessage-deflate, headers and handshakes included).
 *
 * For each pair (v1 → v2), from a server that holds v1:
 * - push: v2 pushed by another device (plain: no kept basis, the server matches; vault: a new
 *   `Vault` that reads v1's manifest from the server and uploads the chunks the vault lacks);
 * - pull: v2 pulled by a device that holds v1 (plain: a delta of v1; vault: the manifest, then
 *   the chunks the device's copy lacks, as ranges of packs).
 * The vault both ways twice: a new device (no cache: it reads v1's whole manifest and the tree),
 * and the same device (the one that pushed v1, or pulled it, as a new process with its cache of
 * list pieces: it fetches only the pieces that changed).
 * Pairs: the traffic benchmark's synthetic edits (cut, insert, inverse of 256 B, 2 KiB, 16 KiB,
 * 128 KiB and 1 MiB in a 10 MiB file; harness/testdata.ts applyEdits), and a large file with 1 %,
 * 10 % and 30 % of its bytes inverted in runs of up to 128 KiB spread evenly over it.
 * Usage (from the repository root):
 *   node --import tsx bench/vault-wire.ts [--large-mib 1024]
 */
import { randomBytes as cryptoRandom } from 'node:crypto';
import WebSocket from 'ws';
import '../shared/src/chunking/wasm.ts';
import { formatBytes } from '../shared/src/base/units.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { push } from '../shared/src/session/delta-client.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { memoryPieceCache } from '../shared/src/vault/cache.ts';
import { type Vault, createVault, memoryHeads, openVault } from '../shared/src/vault/vault.ts';
import { Rng, applyEdits, fastRandomBytes } from '../harness/testdata.ts';
import { pullBytes, testServer } from '../harness/helpers.ts';
import { countingProxy } from './lib/proxy.ts';
import { MIB, arg, log, machine, table, writeResults } from './lib/common.ts';

const largeMib = Number(arg('--large-mib', '1024'));
const mach = machine();
const server = await testServer();
const proxy = await countingProxy({ host: '127.0.0.1', port: Number(new URL(server.url).port) });
const wsUrl = `ws://127.0.0.1:${proxy.port}/sync`;
const wire = () => proxy.counts.up + proxy.counts.down;
/** The bytes both ways while `fn` runs. */
async function counted(fn: () => Promise<unknown>): Promise<number> {
  proxy.reset();
  await fn();
  return wire();
}

// the vault's key derivation is not what is measured here: light Argon2id parameters
const ARGON = { m: 64, t: 1, p: 1 };
const PASS = cryptoRandom(16).toString('hex');
const remote = httpVaultRemote(proxy.url);
// the same device across runs: its head memory and its cache of list pieces, each run a new
// Vault object (a new process)
const pusherCache = memoryPieceCache();
const pusherHeads = memoryHeads();
const pullerCache = memoryPieceCache();
const pullerHeads = memoryHeads();
const { vault: first } = await createVault(remote, PASS, pusherHeads, ARGON, { cache: pusherCache });
const device = () => openVault(remote, first.id, { passphrase: PASS }, memoryHeads());
const pusher = () => openVault(remote, first.id, { passphrase: PASS }, pusherHeads, { cache: pusherCache });
const puller = () => openVault(remote, first.id, { passphrase: PASS }, pullerHeads, { cache: pullerCache });

async function pullVault(v: Vault, name: string, local: Uint8Array): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  await v.pull(name, async (b) => void parts.push(b.slice()), bufferSource(local));
  return Buffer.concat(parts);
}

interface Row {
  pair: string;
  size: number;
  plainPush: number;
  vaultPush: number;
  plainPull: number;
  vaultPull: number;
  samePush: number;
  samePull: number;
}
const rows: Row[] = [];

async function measure(pair: string, v1: Uint8Array, v2: Uint8Array) {
  const name = `${pair}.bin`;
  const same = `${pair}-same.bin`;
  const mtime = Date.now();
  await push(bufferSource(v1), { url: wsUrl, name, WebSocket: WebSocket as never });
  await first.push(name, bufferSource(v1), mtime);
  await (await pusher()).push(same, bufferSource(v1), mtime);
  await pullVault(await puller(), same, new Uint8Array(0));
  const plainPush = await counted(() => push(bufferSource(v2), { url: wsUrl, name, WebSocket: WebSocket as never }));
  const newDevice = await device();
  const vaultPush = await counted(() => newDevice.push(name, bufferSource(v2), mtime + 1));
  const sameDevice = await pusher();
  const samePush = await counted(() => sameDevice.push(same, bufferSource(v2), mtime + 1));
  let got: Uint8Array = new Uint8Array();
  const plainPull = await counted(async () => void (got = (await pullBytes({ wsUrl }, name, v1)).bytes));
  if (Buffer.compare(got, v2) !== 0) throw new Error(`${pair}: plain pull differs`);
  const newPuller = await device();
  const vaultPull = await counted(async () => void (got = await pullVault(newPuller, name, v1)));
  if (Buffer.compare(got, v2) !== 0) throw new Error(`${pair}: vault pull differs`);
  const samePuller = await puller();
  const samePull = await counted(async () => void (got = await pullVault(samePuller, same, v1)));
  if (Buffer.compare(got, v2) !== 0) throw new Error(`${pair}: vault pull (same device) differs`);
  const row = { pair, size: v2.length, plainPush, vaultPush, samePush, plainPull, vaultPull, samePull };
  rows.push(row);
  log(`${pair}: push plain ${formatBytes(plainPush)} vault ${formatBytes(vaultPush)} same device ${formatBytes(samePush)}; pull plain ${formatBytes(plainPull)} vault ${formatBytes(vaultPull)} same device ${formatBytes(samePull)}`);
}

try {
  for (const [i, kind] of (['cut', 'insert', 'inverse'] as const).entries())
    for (const total of [256, 2048, 16384, 131072, 1 << 20]) {
      const v1 = fastRandomBytes(100 + i, 10 * MIB);
      await measure(`${kind}-${total}`, v1, applyEdits(v1, new Rng(7 + i), { kind, total }));
    }
  const big = fastRandomBytes(900, largeMib * MIB);
  for (const pct of [1, 10, 30]) {
    const edited = applyEdits(big, new Rng(pct), { kind: 'inverse', total: Math.round((big.length * pct) / 100), maxFragment: 128 << 10, placement: [1 / 3, 1 / 3, 1 / 3] });
    await measure(`${largeMib}MiB-${pct}pct`, big, edited);
  }
} finally {
  await proxy.close();
  await server.stop();
}

const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
const body = [
  'Every byte between client and server both ways (a counting TCP proxy: HTTP requests and answers with their headers for the vault; the WebSocket after permessage-deflate, with its handshake, for plain Dsync). Push: v2 by another device (plain: no kept basis; vault, new device: one that reads v1\'s manifest from the server; vault, same device: the device that pushed v1, a new process with its cache of list pieces). Pull: v2 by a device holding v1 (vault, new device: it reads the whole manifest; same device: it pulled v1 and keeps its cache). Synthetic pairs: harness/testdata.ts applyEdits in a 10 MiB random file (the traffic benchmark\'s kinds); large: that share of the file inverted in runs of up to 128 KiB spread evenly. Both pulls are checked byte-exact.',
  '',
  table(
    ['pair', 'size', 'push: plain', 'push: vault, new device', 'push: vault, same device', 'same / plain', 'pull: plain', 'pull: vault, new device', 'pull: vault, same device', 'same / plain'],
    rows.map((r) => [r.pair, formatBytes(r.size), formatBytes(r.plainPush), formatBytes(r.vaultPush), formatBytes(r.samePush), ratio(r.samePush, r.plainPush), formatBytes(r.plainPull), formatBytes(r.vaultPull), formatBytes(r.samePull), ratio(r.samePull, r.plainPull)]),
  ),
].join('\n');
console.log(body);
const note = '- note: one run; byte counts, which do not depend on the machine\'s load (the keyed chunker cuts by the vault\'s random key: another vault cuts elsewhere, by a few chunks).';
writeResults('vault-wire', "A vault's bytes on the wire against plain Dsync's (bench/vault-wire.ts)", mach, body, { rows }, note);
