/**
 * The store under many small edits, and its garbage collection: 200 successive small edits of a
 * 10 MB file through a real server (loopback WebSocket, local directory store). Reports the
 * time to pull the latest version (whole, no basis) against the first, the bytes stored,
 * then removes every version but the latest and collects (bytes reclaimed, time taken, and the
 * p99 of syncs of another file running meanwhile; the collection repacks the segments mostly
 * dead, and a second collection deletes what that left), checks the store with --read-data,
 * and finally removes everything and collects.
 * Usage (from the repository root):
 *   node --import tsx bench/store-edits.ts [--edits 200] [--mib 10] [--window-ms 2000] [--repack-percent 20]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Rng, applyEdits, fastRandomBytes } from '../harness/testdata.ts';
import { DEFAULTS, loadConfig } from '../server/src/config.ts';
import { runCheck } from '../server/src/store/check.ts';
import { startServer } from '../server/src/server.ts';
import { runGc } from '../server/src/store/gc.ts';
import { pullBytes, pushBytes } from '../harness/helpers.ts';
import { referencedBytes } from '../harness/trials.ts';
import { arg, log, machine, writeResults } from './lib/common.ts';

const edits = Number(arg('--edits', '200'));
const mib = Number(arg('--mib', '10'));
const windowMs = Number(arg('--window-ms', '2000'));
const repackPercent = Number(arg('--repack-percent', String(DEFAULTS.gcRepackPercent)));
// the machine and its load as the run starts (writeResults adds the load as it ends)
const mach = machine();
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-edits-'));
const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: dir, 'gc-interval-ms': '0' }, {}));
const srv = { wsUrl: s.url.replace('http', 'ws') + '/sync' };
const store = await s.storeOf('local');
const stored = async () => {
  let n = 0;
  for (const p of ['data/', 'index/', 'ns/']) for await (const e of s.repo.backend.list(p)) n += e.size;
  return n;
};
const pullMs = async () => {
  const t = performance.now();
  await pullBytes(srv, 'doc.bin', null);
  return performance.now() - t;
};
const median3 = async (f: () => Promise<number>) => [await f(), await f(), await f()].sort((a, b) => a - b)[1];
try {
  const r = new Rng(1);
  let cur = fastRandomBytes(1, mib << 20);
  await pushBytes(srv, 'doc.bin', cur);
  const first = { bytes: await stored(), pullMs: await median3(pullMs) };
  for (let k = 0; k < edits; k++) {
    cur = applyEdits(cur, r, { kind: (['insert', 'cut', 'inverse'] as const)[k % 3], total: 256, maxFragment: 64 });
    await pushBytes(srv, 'doc.bin', cur);
  }
  const latest = await store.latest('doc.bin');
  const segs = (await store.readVersion('doc.bin', latest)).layout.segments.length;
  const last = { bytes: await stored(), pullMs: await median3(pullMs) };
  log(`after ${edits} edits: ${segs} segments, ${last.bytes} bytes stored`);
  // remove every version but the latest; collect while another file syncs
  for (const v of await store.versionNumbers('doc.bin')) if (v !== latest) await store.remove('doc.bin', v);
  let other = fastRandomBytes(2, 1 << 20);
  await pushBytes(srv, 'other.bin', other);
  const syncMs: number[] = [];
  let collecting = true;
  const t0 = performance.now();
  const gc = runGc(s.repo, { minAgeMs: 0, windowMs, repackPercent }).finally(() => (collecting = false));
  while (collecting) {
    other = applyEdits(other, r, { kind: 'insert', total: 256 });
    const t = performance.now();
    await pushBytes(srv, 'other.bin', other);
    syncMs.push(performance.now() - t);
  }
  const report = await gc;
  const gcMs = performance.now() - t0;
  syncMs.sort((a, b) => a - b);
  const p99 = syncMs[Math.min(syncMs.length - 1, Math.floor(syncMs.length * 0.99))];
  const kept = await stored();
  // the second collection deletes what the repack left unreferenced
  const t1 = performance.now();
  const second = await runGc(s.repo, { minAgeMs: 0, windowMs, repackPercent });
  const secondMs = performance.now() - t1;
  const repacked = await stored();
  const { errors: problems } = await runCheck(s.repo, { readData: true });
  if (problems.length) throw new Error(`check --read-data: ${problems.join('; ')}`);
  if (!(await pullBytes(srv, "doc.bin", null)).bytes.equals(cur)) throw new Error('the latest version reads back wrong after the repack');
  // what the kept versions need: the bytes their layouts reference (each segment's ranges
  // merged: every segment 100% live), every index and every head
  const needed = async () => {
    const referenced = await referencedBytes(store, ['doc.bin', 'other.bin']);
    let n = referenced.bytes;
    for (const p of ['index/', 'ns/']) for await (const e of s.repo.backend.list(p)) n += e.size;
    return { n, segments: referenced.segments };
  };
  const need = await needed();
  await store.remove('doc.bin');
  await store.remove('other.bin');
  const end = await runGc(s.repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
  const empty = await stored();
  const mb = (b: number) => (b / 1e6).toFixed(2);
  const md = `
A ${mib} MiB random file, then ${edits} successive small edits (256 bytes each, in fragments of
at most 64, insert/cut/inverse in turn), pushed through a real server on loopback with a
local directory store; the latest version references ${segs} segments (the bound is
ceil(size / 8 MiB) + 64).

| | bytes stored | pull of the latest version (whole, median of 3) |
|---|---|---|
| after the first version | ${mb(first.bytes)} MB | ${first.pullMs.toFixed(0)} ms |
| after ${edits} edits (${edits + 1} versions) | ${mb(last.bytes)} MB | ${last.pullMs.toFixed(0)} ms |
| every version but the latest removed, gc (repacks) | ${mb(kept)} MB | |
| a second gc (deletes what the repack left) | ${mb(repacked)} MB: **${(repacked / need.n).toFixed(2)}×** the ${mb(need.n)} MB the kept versions need | |
| everything removed, gc | ${mb(empty)} MB (heads of deleted files: their version numbers stay used) | |

Garbage collection of the ${edits} removed versions (commit window ${windowMs} ms, which it
waits once): ${report.deleted} objects, ${mb(report.bytes)} MB reclaimed in ${gcMs.toFixed(0)} ms;
${syncMs.length} syncs of a 1 MiB file ran meanwhile, p99 ${p99.toFixed(0)} ms (median
${syncMs[Math.floor(syncMs.length / 2)].toFixed(0)} ms). The final collection reclaimed
${mb(end.bytes)} MB.

The repack (segments at least ${repackPercent}% dead): ${mb(report.repacked)} MB copied out of
${report.repackedSegments} segments by the first collection; the second (${secondMs.toFixed(0)} ms) deleted ${second.deleted}
objects, ${mb(second.bytes)} MB (and repacked ${mb(second.repacked)} MB more). "Need" counts the
bytes the kept versions of both files reference (each segment's referenced ranges merged, as if
every segment were 100% live: ${need.segments} segments), every index and every head. \`check --read-data\` found no problem afterwards, and the latest version read
back byte-exact.
`;
  writeResults('store-edits', `${edits} small edits of a ${mib} MiB file, and gc`, mach, md, { edits, mib, repackPercent, segs, first, last, kept, repacked, need, empty, gc: report, second, gcMs, secondMs, syncMs });
} finally {
  await s.close();
  rmSync(dir, { recursive: true, force: true });
}
