// What verifying a commit's copied bytes costs the store: backend operations (and bytes read)
// per sync of a small edit (one 2 KB insertion) of a 10 MB file, through one server process,
// on the local directory and on a real MinIO. Every operation of the Backend interface is
// counted by a wrapper around the real backend.
//
//   node --import tsx bench/verify-cost.ts [--syncs 20] [--gap-ms 0]
//
// --gap-ms: the pause between two syncs (a local file changed less than 3 s ago has no stamp,
// docs/store.md §1, so back-to-back syncs read the previous sync's new segment again).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Rng, applyEdits, fastRandomBytes } from '../harness/testdata.ts';
import { loadConfig } from '../server/src/config.ts';
import { startServer } from '../server/src/server.ts';
import type { Backend } from '../server/src/store/backend.ts';
import { localBackend } from '../server/src/store/local.ts';
import { Repo } from '../server/src/store/repo.ts';
import { s3Backend } from '../server/src/store/s3.ts';
import { pushBytes } from '../harness/helpers.ts';
import { startMinio } from '../harness/minio.ts';

const { values } = parseArgs({ options: { syncs: { type: 'string', default: '20' }, 'gap-ms': { type: 'string', default: '0' } } });
const SYNCS = Number(values.syncs);
const GAP_MS = Number(values['gap-ms']);
const SIZE = 10_000_000;

const counts = new Map<string, number>();
let bytesRead = 0;
/** The backend with every call counted (and the bytes gets return). */
function counting(b: Backend): Backend {
  return new Proxy(b, {
    get(target, key, recv) {
      const v = Reflect.get(target, key, recv);
      if (typeof v !== 'function' || key === 'close') return v;
      return (...args: unknown[]) => {
        counts.set(String(key), (counts.get(String(key)) ?? 0) + 1);
        const out = v.apply(target, args);
        if (key === 'get' || key === 'getStamped') void out.then((x: Uint8Array | { body: Uint8Array }) => (bytesRead += 'body' in x ? x.body.length : x.length), () => {});
        return out;
      };
    },
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function run(label: string, backend: Backend) {
  const repo = new Repo(counting(backend));
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: '/nonexistent', 'gc-interval-ms': '0' }, {}), () => {}, repo);
  const server = { wsUrl: s.url.replace('http', 'ws') + '/sync' };
  try {
    const r = new Rng(7);
    let cur = fastRandomBytes(7, SIZE);
    await pushBytes(server, 'f.bin', cur);
    await sleep(3_500);
    const per: { ops: Map<string, number>; bytes: number }[] = [];
    for (let k = 0; k < SYNCS; k++) {
      cur = applyEdits(cur, r, { kind: 'insert', total: 2048, maxFragment: 2048 });
      counts.clear();
      bytesRead = 0;
      await pushBytes(server, 'f.bin', cur);
      await sleep(50); // reads whose counting is still on its way
      per.push({ ops: new Map(counts), bytes: bytesRead });
      if (GAP_MS) await sleep(GAP_MS);
    }
    const kinds = [...new Set(per.flatMap((p) => [...p.ops.keys()]))].sort();
    const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const rest = per.slice(1);
    const line = (name: string, ps: typeof per) =>
      `| ${label} | ${name} | ${avg(ps.map((p) => [...p.ops.values()].reduce((a, b) => a + b, 0))).toFixed(1)} | ${kinds.map((k) => `${k} ${avg(ps.map((p) => p.ops.get(k) ?? 0)).toFixed(1)}`).join(', ')} | ${(avg(ps.map((p) => p.bytes)) / 1e6).toFixed(2)} |`;
    console.log(line('first sync', per.slice(0, 1)));
    console.log(line(`syncs 2–${SYNCS} (mean)`, rest));
  } finally {
    await s.close();
  }
}

console.log(`| store | syncs | backend operations per sync | by kind | MB read per sync |\n|---|---|---|---|---|`);
const dir = mkdtempSync(path.join(tmpdir(), 'dsync-verify-cost-'));
try {
  await run('local directory', localBackend(dir));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const minio = await startMinio();
try {
  await run('MinIO', await s3Backend('s3://verify-cost/store', minio.endpoint, minio.env));
} finally {
  await minio.stop();
}
