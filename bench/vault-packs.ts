/**
 * A vault's packs on the server (docs/vaults.md, "The server"): the wall time of storing a
 * pack (PUT, hashed as it arrives, then its sums), and of a cold read (a server process that
 * has not read the pack before: its sums read and checked) of a small range and of the whole
 * pack, with the bytes each read takes from the store. The server runs in this process over a
 * local directory, so CPU is the client's and the server's together.
 * Usage (from the repository root):
 *   node --import tsx bench/vault-packs.ts [--packs 24] [--pack-mib 4] [--range 4096]
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../server/src/config.ts';
import { startServer } from '../server/src/server.ts';
import type { Backend } from '../server/src/store/backend.ts';
import { localBackend } from '../server/src/store/local.ts';
import { Repo } from '../server/src/store/repo.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { newVaultKey, wrapKey } from '../shared/src/vault/keys.ts';
import { MIB, arg, log, machine, median, table, writeResults } from './lib/common.ts';

const packs = Number(arg('--packs', '24'));
const packBytes = Number(arg('--pack-mib', '4')) * MIB;
const rangeBytes = Number(arg('--range', '4096'));
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-bench-vault-'));

/** A server over the directory whose store reads are counted in `read.bytes`. */
async function serve(read: { bytes: number }) {
  const b = localBackend(dir);
  const counted: Backend = { ...b, get: async (key, range) => { const got = await b.get(key, range); read.bytes += got.length; return got; } };
  return startServer(loadConfig({ port: '0', host: '127.0.0.1', store: dir }, {}), () => {}, new Repo(counted));
}

const timed = async <T>(fn: () => Promise<T>) => {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const c = process.cpuUsage(c0);
  return { ms: performance.now() - t0, cpuMs: (c.user + c.system) / 1000 };
};

try {
  const id = randomBytes(16).toString('hex');
  const bodies = Array.from({ length: packs }, () => randomBytes(packBytes));
  const ids = bodies.map((b) => createHash('sha256').update(b).digest('hex'));
  const upRead = { bytes: 0 };
  const up = await serve(upRead);
  const put: { ms: number; cpuMs: number }[] = [];
  try {
    const remote = httpVaultRemote(up.url);
    await remote.create(id, await wrapKey(id, newVaultKey(), 'bench', { m: 8, t: 1, p: 1 }));
    for (let i = 0; i < packs; i++) put.push(await timed(() => remote.putPack(id, ids[i], bodies[i])));
  } finally {
    await up.close();
  }
  // cold reads: a fresh server each time, so nothing of the pack is kept in its memory
  const rows: (string | number)[][] = [];
  const results: Record<string, { ms: number[]; cpuMs: number[]; storeBytes: number[] }> = {};
  for (const what of ['range', 'whole'] as const) {
    const r = (results[what] = { ms: [] as number[], cpuMs: [] as number[], storeBytes: [] as number[] });
    for (let i = 0; i < packs; i++) {
      const read = { bytes: 0 };
      const s = await serve(read);
      try {
        const remote = httpVaultRemote(s.url);
        await remote.keyfile(id); // the vault known to exist: not what is measured
        read.bytes = 0;
        const offset = Math.floor(Math.random() * (packBytes - rangeBytes));
        const t = await timed(() => (what === 'range' ? remote.readPack(id, ids[i], offset, rangeBytes) : remote.readPack(id, ids[i], 0, packBytes)));
        r.ms.push(t.ms);
        r.cpuMs.push(t.cpuMs);
        r.storeBytes.push(read.bytes);
      } finally {
        await s.close();
      }
    }
    rows.push([what === 'range' ? `cold read of ${rangeBytes} bytes at a random offset` : `cold read of the whole ${packBytes / MIB} MiB pack`, `${median(r.ms).toFixed(1)} ms`, `${median(r.cpuMs).toFixed(1)} ms`, `${(median(r.storeBytes) / 1024).toFixed(0)} KiB`]);
  }
  rows.unshift([`PUT of a ${packBytes / MIB} MiB pack (hashed as it arrives, then its sums)`, `${median(put.map((p) => p.ms)).toFixed(1)} ms`, `${median(put.map((p) => p.cpuMs)).toFixed(1)} ms`, '—']);
  for (const r of rows) log(r.join(' | '));
  writeResults(
    'vault-packs',
    "A vault's packs on the server: store, cold range read, cold whole read",
    machine(),
    table(['operation', 'wall (median)', 'CPU, client + server (median)', 'read from the store (median)'], rows) +
      `\n\nMedians of ${packs} packs. A cold read is a server process that has not read the pack before: it reads the pack's sums (45 bytes + 32 a 64 KiB block) and then only the blocks the range touches, each checked against its sum; a whole read reads the pack and checks every block.`,
    { packs, packBytes, rangeBytes, put, ...results },
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
