/**
 * The recursive listing's walk of the folder catalogs (Store.folderRecords, what
 * `GET /api/files?recursive=1` and `POST /api/files/changes` read): CATALOG_READS catalogs in
 * flight against one read after another (the walk before, written here as the baseline), in
 * one process over one store, alternating, on a tree shaped like the peers bench's source tree
 * (--files small files in --folders folders, three levels deep) on a local directory.
 * Usage (from the repository root):
 *   node --import tsx bench/listing-walk.ts [--files 5000] [--folders 2000] [--dir /tmp] [--reps 5]
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

const files = Number(arg('--files', '5000'));
const folders = Number(arg('--folders', '2000'));
const reps = Number(arg('--reps', '5'));
const dir = mkdtempSync(path.join(arg('--dir', '/tmp'), 'dsync-walk-'));
const store = new Store(new Repo(localBackend(dir)), 'bench');
try {
  const body = new Uint8Array(100).fill(7);
  const index = await chunkSource(bufferSource(body), DEFAULT_PARAMS, 3);
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i; (i = next++) < files; ) {
        const sink = store.create(`d${i % Math.ceil(folders / 50)}/e${i % Math.ceil(folders / 5)}/f${i % folders}/file-${i}.txt`);
        await sink.write(body);
        await sink.commit(index);
      }
    }),
  );
  log(`${files} files written`);
  // the baseline: one catalog read after another, depth first (folderEntries is the listing's own read)
  const entries = (f: string) => store.listing.folderEntries(f);
  const oneByOne = async (f: string): Promise<number> => {
    let n = 0;
    for (const [name, e] of await entries(f)) n += 1 + (e ? 0 : await oneByOne(name.slice(0, -1)));
    return n;
  };
  const inFlight = async () => (await store.folderRecords('')).reduce((n, r) => n + r.files.length + r.folders.length, 0);
  const a: number[] = [];
  const b: number[] = [];
  const ratios: number[] = [];
  let catalogs = 0;
  for (let r = 0; r < reps; r++) {
    let t = performance.now();
    const na = await oneByOne('');
    a.push(performance.now() - t);
    t = performance.now();
    const nb = await inFlight();
    b.push(performance.now() - t);
    if (na !== nb) throw new Error(`${na} entries one by one, ${nb} in flight`);
    catalogs = (await store.folderRecords('')).length;
    ratios.push(b[r] / a[r]);
    log(`one by one ${a[r].toFixed(0)} ms, in flight ${b[r].toFixed(0)} ms (${nb} entries)`);
  }
  const md = `
${files} files in ${catalogs} catalogs (three levels of folders) on a local directory in ${arg('--dir', '/tmp')},
each walk reading every catalog; A and B alternate in one process, ${reps} pairs.

| walk | median | pairs (B/A) |
|---|---|---|
| A: one catalog read after another | ${median(a).toFixed(0)} ms | |
| B: CATALOG_READS in flight (Store.folderRecords) | ${median(b).toFixed(0)} ms | ${ratios.map((x) => x.toFixed(2)).join(', ')} |
`;
  writeResults('listing-walk', 'The recursive listing\'s walk of the catalogs', machine(), md, { files, catalogs, oneByOneMs: a, inFlightMs: b });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
