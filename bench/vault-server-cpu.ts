/**
 * The server's CPU per small edit, a vault against plain Dsync (issue 46: "Server CPU per sync
 * of a small edit in a vault: below plain Dsync's"). A single edit costs the server a few
 * clock ticks (10 ms each in /proc/PID/stat), so each figure here is the server's total user +
 * system CPU over a block of edits divided by the edits: a tick is then 10 ms / edits.
 *
 * Three servers, each in a child process (`dsync serve`, its own store directory), each given a
 * 10 MiB file first, then `--edits` edits of 2 KiB in place (the same edits for each), pushed
 * one after another in `--rounds` blocks taken in turn (A B C A B C …, so load drift hits all
 * alike):
 *   - plain, new device: Dsync's push without a known version (the server matches the
 *     Checksum List against its basis: what a device that did not push the last version sends);
 *   - plain, known version: the device that pushed before (MemoryKnown, as the CLI keeps one:
 *     it sends Copies of the version it knows, the server checks and writes);
 *   - vault: the device that pushed before, a new `Vault` per edit (as each CLI command opens
 *     one: keyfile and head read) with its piece cache (the CLI keeps one on disk).
 * A server's CPU while the others run their blocks is its idle cost (timers); the table shows
 * the figures as measured and with that idle rate taken off.
 *
 * Usage (from the repository root):
 *   node --import tsx bench/vault-server-cpu.ts [--edits 200] [--rounds 4] [--mib 10]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import '../shared/src/chunking/wasm.ts';
import { bufferSource } from '../shared/src/chunking/chunk-index.ts';
import { MemoryKnown } from '../shared/src/session/known.ts';
import { memoryPieceCache } from '../shared/src/vault/cache.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { createVault, memoryHeads, openVault } from '../shared/src/vault/vault.ts';
import { fastRandomBytes } from '../harness/testdata.ts';
import { pullBytes, pushBytes } from '../harness/helpers.ts';
import { type Child, startChild } from '../harness/child.ts';
import { MIB, arg, log, machine, median, table, writeResults } from './lib/common.ts';

const EDITS = Number(arg('--edits', '200'));
const ROUNDS = Number(arg('--rounds', '4'));
const SIZE = Number(arg('--mib', '10')) * MIB;
const EDIT = 2048;
if (!(Number.isInteger(EDITS) && Number.isInteger(ROUNDS) && ROUNDS >= 1 && EDITS >= ROUNDS && EDITS % ROUNDS === 0)) throw new Error('--edits is a multiple of --rounds');
const PER_BLOCK = EDITS / ROUNDS;
const mach = machine();
const ARGON = { m: 64, t: 1, p: 1 }; // the key derivation runs on the client, not measured here
const PASS = 'correct horse battery staple';

/** Ticks a second of /proc/PID/stat's times (getconf CLK_TCK; 100 on Linux). */
const TICK_MS = 10;
/** user + system CPU of a process so far, ms. */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}
const settle = () => new Promise((r) => setTimeout(r, 500));

type Kind = 'plain, new device' | 'plain, known version' | 'vault';
const KINDS: Kind[] = ['plain, new device', 'plain, known version', 'vault'];

interface Subject {
  kind: Kind;
  child: Child;
  data: string;
  bytes: Uint8Array;
  /** pushes the current bytes as the next version */
  push(): Promise<void>;
  /** the stored newest version's bytes (checked at the end) */
  stored(): Promise<Uint8Array>;
  blocks: { cpuMs: number; wallMs: number }[];
  /** CPU and wall time while the other servers ran */
  idle: { cpuMs: number; wallMs: number };
}

async function subject(kind: Kind): Promise<Subject> {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-bench-cpu-'));
  const child = await startChild(data);
  const s: Subject = { kind, child, data, bytes: fastRandomBytes(4604, SIZE), push: async () => {}, stored: async () => new Uint8Array(), blocks: [], idle: { cpuMs: 0, wallMs: 0 } };
  if (kind === 'vault') {
    const r = httpVaultRemote(child.url);
    const heads = memoryHeads();
    const cache = memoryPieceCache();
    const { vault } = await createVault(r, PASS, heads, ARGON, { cache });
    s.push = async () => {
      const v = await openVault(r, vault.id, { passphrase: PASS }, heads, { cache });
      await v.push('big.bin', bufferSource(s.bytes), Date.now());
    };
    s.stored = async () => {
      const parts: Uint8Array[] = [];
      await (await openVault(r, vault.id, { passphrase: PASS }, memoryHeads())).pull('big.bin', async (b: Uint8Array) => void parts.push(b.slice()));
      return Buffer.concat(parts);
    };
  } else {
    const known = kind === 'plain, known version' ? new MemoryKnown() : undefined;
    s.push = async () => void (await pushBytes(child, 'big.bin', s.bytes, known ? { known } : {}));
    s.stored = async () => (await pullBytes(child, 'big.bin', null)).bytes;
  }
  await s.push();
  return s;
}

/** The i-th edit: 2 KiB of new bytes at a place spread over the file. */
function edit(s: Subject, i: number) {
  s.bytes = s.bytes.slice();
  s.bytes.set(fastRandomBytes(4700 + i, EDIT), (i * 1_300_007) % (SIZE - EDIT));
}

log(`server CPU per ${EDIT}-byte edit of ${SIZE / MIB} MiB: ${EDITS} edits each, ${ROUNDS} rounds of ${PER_BLOCK}`);
const subjects: Subject[] = [];
try {
  for (const k of KINDS) subjects.push(await subject(k));
  await settle();
  // the idle cost: each server's CPU while the others work
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of subjects) {
      const others = subjects.filter((o) => o !== s).map((o) => ({ o, cpu: cpuMs(o.child.child.pid!) }));
      const t0 = performance.now();
      const c0 = cpuMs(s.child.child.pid!);
      for (let j = 0; j < PER_BLOCK; j++) {
        edit(s, round * PER_BLOCK + j);
        await s.push();
      }
      await settle();
      const wallMs = performance.now() - t0;
      s.blocks.push({ cpuMs: cpuMs(s.child.child.pid!) - c0, wallMs });
      for (const { o, cpu } of others) {
        o.idle.cpuMs += cpuMs(o.child.child.pid!) - cpu;
        o.idle.wallMs += wallMs;
      }
      log(`round ${round + 1}, ${s.kind}: ${(s.blocks.at(-1)!.cpuMs / PER_BLOCK).toFixed(2)} ms a edit (${(wallMs / PER_BLOCK).toFixed(0)} ms wall)`);
    }
  }
  for (const s of subjects) {
    const got = await s.stored();
    if (!Buffer.from(got).equals(Buffer.from(s.bytes))) throw new Error(`${s.kind}: the stored version is not the last pushed`);
  }
} finally {
  for (const s of subjects) {
    await s.child.kill();
    rmSync(s.data, { recursive: true, force: true });
  }
}

const fmt = (x: number) => x.toFixed(2);
const rows = subjects.map((s) => {
  const per = s.blocks.map((b) => b.cpuMs / PER_BLOCK);
  const idlePerMs = s.idle.cpuMs / s.idle.wallMs;
  const net = s.blocks.map((b) => (b.cpuMs - idlePerMs * b.wallMs) / PER_BLOCK);
  const total = s.blocks.reduce((a, b) => a + b.cpuMs, 0) / EDITS;
  return { s, per, net, total, idlePerMs, wall: median(s.blocks.map((b) => b.wallMs / PER_BLOCK)) };
});
const plainNew = rows.find((r) => r.s.kind === 'plain, new device')!;
const plainKnown = rows.find((r) => r.s.kind === 'plain, known version')!;
const vault = rows.find((r) => r.s.kind === 'vault')!;
const body = [
  `Three servers in child processes (\`dsync serve\`, a store directory each); a ${SIZE / MIB} MiB file, then ${EDITS} edits of ${EDIT / 1024} KiB in place (the same for each) pushed one after another, in ${ROUNDS} blocks of ${PER_BLOCK} taken in turn (plain new device, plain known version, vault, then again). Each figure is the server's user + system CPU over a block (/proc/PID/stat, 10 ms ticks) divided by its ${PER_BLOCK} edits: a tick is ${fmt(TICK_MS / PER_BLOCK)} ms an edit. "Idle" is each server's CPU while the other two ran their blocks, a rate taken off in the last column. Every server's last version pulled byte-exact at the end.`,
  '',
  table(
    ['server CPU per edit', 'mean over all edits', 'per block', 'idle (CPU ms per s)', 'median block, idle taken off', 'client wall per edit (median block)'],
    rows.map((r) => [r.s.kind, `${fmt(r.total)} ms`, r.per.map(fmt).join(', '), fmt(r.idlePerMs * 1000), `${fmt(median(r.net))} ms`, `${r.wall.toFixed(0)} ms`]),
  ),
  '',
  `Vault against plain: ${fmt(vault.total / plainNew.total)}× a new device's push, ${fmt(vault.total / plainKnown.total)}× the known version's (means over all edits).`,
].join('\n');
console.log(body);
writeResults('vault-server-cpu', 'Server CPU per small edit, vault against plain Dsync (bench/vault-server-cpu.ts)', mach, body, {
  edits: EDITS,
  rounds: ROUNDS,
  size: SIZE,
  edit: EDIT,
  results: rows.map((r) => ({ kind: r.s.kind, meanMs: r.total, perBlockMs: r.per, idleCpuMsPerS: r.idlePerMs * 1000, netMedianMs: median(r.net), blocks: r.s.blocks })),
});
