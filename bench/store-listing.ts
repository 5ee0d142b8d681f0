/**
 * Listing a store of many files: 100 000 files in 100 folders, written through the store's own
 * commit path (Store.create: segment, index, file head swap, catalog swap) on a local
 * directory. Times one page of a folder (GET /api/files reads one catalog), the whole recursive
 * listing (one catalog per folder), and, for comparison, reading every file head (what a
 * listing without catalogs costs).
 * Usage (from the repository root):
 *   node --import tsx bench/store-listing.ts [--files 100000] [--folders 100] [--dir /dev/shm] [--reps 3]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { bufferSource, chunkSource } from '../shared/src/chunking/chunk-index.ts';
import { DEFAULT_PARAMS } from '../shared/src/wire/protocol.ts';
import '../shared/src/chunking/wasm.ts';
import { Store } from '../server/src/store/store.ts';
import { Repo } from '../server/src/store/repo.ts';
import { localBackend } from '../server/src/store/local.ts';
import { arg, log, machine, median, writeResults } from './lib/common.ts';

const files = Number(arg('--files', '100000'));
const folders = Number(arg('--folders', '100'));
const reps = Number(arg('--reps', '3'));
const dir = mkdtempSync(path.join(arg('--dir', '/dev/shm'), 'dsync-listing-'));
const repo = new Repo(localBackend(dir));
const store = new Store(repo, 'bench');
try {
  const t0 = performance.now();
  const body = new Uint8Array(100).fill(7);
  const index = await chunkSource(bufferSource(body), DEFAULT_PARAMS, 3);
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i; (i = next++) < files; ) {
        const sink = store.create(`folder-${String(i % folders).padStart(3, '0')}/file-${String(i).padStart(6, '0')}.txt`);
        await sink.write(body);
        await sink.commit(index);
        if (i % 10_000 === 0) log(`${i} files written`);
      }
    }),
  );
  const writeS = (performance.now() - t0) / 1000;
  log(`${files} files written in ${writeS.toFixed(0)} s`);
  const time = async (fn: () => Promise<unknown>) => {
    const t = performance.now();
    await fn();
    return performance.now() - t;
  };
  const page: number[] = [];
  const all: number[] = [];
  const heads: number[] = [];
  let listed = 0;
  for (let r = 0; r < reps; r++) {
    page.push(await time(async () => store.listFolder('folder-042', '', 1000)));
    all.push(await time(async () => (listed = (await store.list()).length)));
    heads.push(
      await time(async () => {
        let n = 0;
        for await (const e of repo.backend.list('ns/bench/files/')) if (await repo.backend.getHead(e.key)) n++;
        if (n !== files) throw new Error(`${n} heads`);
      }),
    );
  }
  if (listed !== files) throw new Error(`listed ${listed} of ${files}`);
  const ms = (x: number[]) => median(x).toFixed(1);
  const perFolder = files / folders;
  const md = `
${files} files in ${folders} folders (${perFolder} each), written through Store.create and commit
(${writeS.toFixed(0)} s, 16 at a time) on a local directory in ${arg('--dir', '/dev/shm')}.

| listing | store reads | time (median of ${reps}) |
|---|---|---|
| one page of a folder (GET /api/files?prefix=folder-042/, ${perFolder} entries) | 1 catalog | ${ms(page)} ms |
| every file, recursive (GET /api/files?recursive=1, Store.list) | ${folders + 1} catalogs | ${ms(all)} ms |
| every file by its head (what a listing without catalogs reads) | ${files} heads | ${ms(heads)} ms |
`;
  writeResults('store-listing', 'Listing 100 000 files', machine(), md, { files, folders, writeS, pageMs: page, allMs: all, headsMs: heads });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
