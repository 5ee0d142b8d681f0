/**
 * The 1 GiB, 30% modified push through a slower link: the real client (`push` of
 * shared/src/session/delta-client.ts) of the tree at ROOT (this one, or an older commit checked out as a
 * git worktree with its own wasm/pkg), against that tree's server, the target through
 * toxiproxy at MBPS (30 ms RTT), the basis pushed unshaped first. Where the network is not
 * much faster than the client's chunking, what the protocol overlaps shows; the 1 Gbps
 * benchmark is bound by the client's CPU instead.
 *
 *   node --import tsx bench/slow-link.ts [ROOT] [MBPS] [REPS]
 *
 * Prints each push and appends a row, with the command and ROOT's commit, to
 * bench/results/slow-link.md. Needs the datasets (`npm run bench` builds them) and toxiproxy
 * (scripts/bench.sh installs it; TOXIPROXY=path).
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import path from 'node:path';
import WebSocket from 'ws';

const here = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const root = path.resolve(process.argv[2] ?? here);
const mbps = Number(process.argv[3] ?? 100);
const reps = Number(process.argv[4] ?? 2);
const { startDsync, Toxiproxy } = await import(`${root}/bench/eval/procs.ts`);
const { fileSource } = await import(`${root}/server/src/store/store.ts`);
const { push } = await import(`${root}/shared/src/session/delta-client.ts`);
const dir = path.join(here, 'bench/tmp/datasets/large');
const basis = path.join(dir, 'large-1GiB.bin');
const target = path.join(dir, 'large-1GiB.mod30pct.bin');
if (!existsSync(target)) throw new Error(`${target} is missing: run npm run bench first (it builds the datasets)`);

const data = path.join(here, `bench/tmp/slow-link-${process.pid}`);
const srv = await startDsync({ data, paperExact: false, cpu: '0', deflate: true });
const tp = await Toxiproxy.start();
const port = await tp.proxy('slow', Number(new URL(srv.url).port), { mbps, rttMs: 30 });
const times: number[] = [];
try {
  for (let rep = 0; rep < reps; rep++) {
    const b = await open(basis);
    await push(fileSource(b, (await b.stat()).size), { url: srv.url + '/sync', name: `f${rep}`, WebSocket: WebSocket as never });
    await b.close();
    const t = await open(target);
    const t0 = performance.now();
    const r = await push(fileSource(t, (await t.stat()).size), { url: `ws://127.0.0.1:${port}/sync`, name: `f${rep}`, WebSocket: WebSocket as never });
    times.push(Math.round(performance.now() - t0));
    await t.close();
    console.log(`${mbps} Mbps: push ${times[times.length - 1]} ms, ${r.literalBytes} B of Delta Bytes`);
  }
} finally {
  await tp.stop();
  await srv.stop();
  await rm(data, { recursive: true, force: true });
}
const commit = execFileSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD']).toString().trim();
const out = path.join(here, 'bench/results/slow-link.md');
if (!existsSync(out)) {
  appendFileSync(out, '# 1 GiB, 30% modified, through a slower link\n\nWritten by bench/slow-link.ts (see its header): the real client push of the tree at ROOT, run with `taskset -c 1` (its server on core 0), toxiproxy v2.12.0 unpinned, 30 ms RTT. The wire alone takes 16.7 s at 100 Mbps and 5.6 s at 300 Mbps for the 209 MB of Delta Bytes.\n\n| date | command | commit of ROOT | Mbps | pushes (ms) |\n|---|---|---|---:|---|\n');
}
appendFileSync(out, `| ${new Date().toISOString()} | \`taskset -c 1 node --import tsx bench/slow-link.ts ${process.argv.slice(2).join(' ')}\` | ${commit} | ${mbps} | ${times.join(', ')} |\n`);
