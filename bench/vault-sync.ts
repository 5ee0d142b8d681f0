/**
 * `dsync sync DIR --vault ID` with many small files (docs/vaults.md, "Folder sync"), as a user
 * runs it, against a real `dsync serve` child through a counting TCP proxy: a folder of --files
 * files of 1 to 20 KB (random bytes, sizes spread evenly) synced into a new vault, then a second
 * device's first sync of it. Per run: the wall time of each CLI process (the vault's Argon2id
 * unlock included), the head writes and pack uploads (PUT requests), the pack reads of the
 * second device, and, from the tree opened with the vault's key, how many packs hold the
 * contents of exactly one file (such a pack's padded size is that file's size to within
 * PADME's 12%: the size leak). --reps runs, each on a new vault; medians.
 * Usage (from the repository root; --label names the results, bench/results/vault-sync-LABEL):
 *   node --import tsx bench/vault-sync.ts --label after [--files 1000] [--reps 3]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import '../shared/src/chunking/wasm.ts';
import { startServe } from '../harness/child.ts';
import { randomBytes } from '../harness/testdata.ts';
import { httpVaultRemote } from '../shared/src/vault/remote.ts';
import { memoryHeads, openVault } from '../shared/src/vault/vault.ts';
import { arg, log, machine, median, runDsync as run, table, writeResults } from './lib/common.ts';
import { countingProxy } from './lib/proxy.ts';

const files = Number(arg('--files', '1000'));
const reps = Number(arg('--reps', '3'));
const label = arg('--label', 'after');
const PASSPHRASE = 'the passphrase of the vault-sync bench';

const work = mkdtempSync(path.join(tmpdir(), 'dsync-bench-vault-sync-'));
const server = await startServe(['--data', path.join(work, 'store')]);
const px = await countingProxy({ host: '127.0.0.1', port: Number(new URL(server.url).port) });
/** requests of `method` whose path matches `re` since the last reset */
const routes = (method: string, re: RegExp) => Object.entries(px.counts.routes).reduce((n, [k, c]) => n + (k.startsWith(method + ' ') && re.test(k.slice(method.length + 1)) ? c : 0), 0);
const HEAD = /^\/api\/vaults\/[0-9a-f]{32}\/head$/;
const PACK = /^\/api\/vaults\/[0-9a-f]{32}\/packs\/[0-9a-f]{64}$/;

interface Run {
  wallMs: number;
  headWrites: number;
  packsWritten: number;
  bytesUp: number;
  contentPacks: number;
  packsOfOneFile: number;
  pullWallMs: number;
  packReads: number;
  bytesDown: number;
}
const runs: Run[] = [];
try {
  for (let r = 0; r < reps; r++) {
    const dev = (name: string) => {
      const home = path.join(work, `run${r}`, name);
      const dir = path.join(home, 'folder');
      mkdirSync(dir, { recursive: true });
      return { dir, env: { DSYNC_SERVER: px.url, DSYNC_CACHE_DIR: path.join(home, 'cache'), XDG_CONFIG_HOME: path.join(home, 'config'), DSYNC_VAULT_PASSPHRASE: PASSPHRASE } };
    };
    const a = dev('a');
    const b = dev('b');
    for (let i = 0; i < files; i++) {
      const f = path.join(a.dir, `d${String(i % 20).padStart(2, '0')}`, `f${String(i).padStart(5, '0')}.bin`);
      if (i < 20) mkdirSync(path.dirname(f), { recursive: true });
      writeFileSync(f, randomBytes(r * 1_000_000 + i, 1000 + Math.floor((i * 19_000) / Math.max(1, files - 1))));
    }
    const created = await run(['vault', 'create', '--json'], a.env);
    if (created.code !== 0) throw new Error(created.out);
    const id = JSON.parse(created.out.trim().split('\n')[0]).id as string;

    px.reset();
    const up = await run(['sync', a.dir, '--vault', id, '--device', 'a', '--json'], a.env);
    if (up.code !== 0) throw new Error(up.out.slice(-2000));
    const upCounts = { headWrites: routes('PUT', HEAD), packsWritten: routes('PUT', PACK), bytesUp: px.counts.up };

    px.reset();
    const down = await run(['sync', b.dir, '--vault', id, '--device', 'b', '--json'], b.env);
    if (down.code !== 0) throw new Error(down.out.slice(-2000));
    const downCounts = { packReads: routes('GET', PACK), bytesDown: px.counts.down };

    const vault = await openVault(httpVaultRemote(server.url), id, { passphrase: PASSPHRASE }, memoryHeads());
    const tree = await vault.tree();
    if (tree.files.length !== files) throw new Error(`the vault holds ${tree.files.length} files, not ${files}`);
    const filesIn = new Map<string, number>();
    for (const f of tree.files) for (const p of f.versions.at(-1)!.packs) filesIn.set(p, (filesIn.get(p) ?? 0) + 1);
    const one: Run = { wallMs: up.ms, ...upCounts, contentPacks: filesIn.size, packsOfOneFile: [...filesIn.values()].filter((n) => n === 1).length, pullWallMs: down.ms, ...downCounts };
    runs.push(one);
    log(`run ${r + 1}: ${JSON.stringify(one)}`);
    rmSync(path.join(work, `run${r}`), { recursive: true, force: true });
  }
} finally {
  await px.close();
  await server.kill();
  rmSync(work, { recursive: true, force: true });
}

const med = (k: keyof Run) => median(runs.map((x) => x[k]));
const rows: (string | number)[][] = runs.map((x, i) => [
  i + 1,
  (x.wallMs / 1000).toFixed(1) + ' s',
  x.headWrites,
  x.packsWritten,
  `${x.packsOfOneFile} of ${x.contentPacks}`,
  (x.bytesUp / 1e6).toFixed(1) + ' MB',
  (x.pullWallMs / 1000).toFixed(1) + ' s',
  x.packReads,
  (x.bytesDown / 1e6).toFixed(1) + ' MB',
]);
rows.push(['median', (med('wallMs') / 1000).toFixed(1) + ' s', med('headWrites'), med('packsWritten'), `${med('packsOfOneFile')} of ${med('contentPacks')}`, (med('bytesUp') / 1e6).toFixed(1) + ' MB', (med('pullWallMs') / 1000).toFixed(1) + ' s', med('packReads'), (med('bytesDown') / 1e6).toFixed(1) + ' MB']);
const body = [
  `${files} files of 1 to 20 KB, \`dsync sync DIR --vault ID\` into a new vault (A), then a second device's first sync (B); ${label}.`,
  '',
  table(['run', 'A wall', 'head writes', 'packs written', 'content packs holding one file', 'A bytes up', 'B wall', 'B pack reads', 'B bytes down'], rows),
].join('\n');
writeResults(`vault-sync-${label}`, `dsync sync --vault: first sync of ${files} small files (${label})`, machine(), body, { files, reps, label, runs });
