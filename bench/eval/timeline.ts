/**
 * One large push, step by step: pushes the basis, then alternately the target (through a
 * toxiproxy link, 1 Gbps / 30 ms RTT unless told otherwise) and the basis again (over
 * loopback), and prints for each target push when the client finished chunking, sent the
 * end of its Checksum List, got Tokens End, sent its last Delta Bytes and got the Result
 * (ms from its first computation), the CPU each process used (client, `dsync serve` pinned
 * to core 0, toxiproxy), and what the server's log says it listed and copied (refinement).
 * The client uses hash workers as `npm run bench` does. Nothing is written to bench/results:
 * it is for looking into one row of Fig. 17.
 *
 *   node --import tsx bench/eval/timeline.ts [--basis F] [--target F] [--pushes 2] [--mbps 1000] [--rtt 30]
 *
 * The server's settings come from the environment as usual (e.g. DSYNC_REFINE=false).
 */
import { rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { fileSource } from '../../shared/src/chunking/file-source.ts';
import { OFF_THREAD_MIN } from '../../shared/src/chunking/hash-pool.ts';
import { nodeHashPool } from '../../shared/src/chunking/hash-workers-node.ts';
import { Conn } from '../../shared/src/transport/conn.ts';
import { DEFAULT_PARAMS } from '../../shared/src/wire/protocol.ts';
import { pushSession } from '../../shared/src/session/delta-client.ts';
import { openWs } from './clients.ts';
import { ROOT, Toxiproxy, cpuSeconds, startDsync } from './procs.ts';
import { setHeapGrowth } from '../../shared/src/base/node-gc.ts';

setHeapGrowth(); // as the CLI and the benchmark's client run

const argv = process.argv.slice(2);
const opt = (n: string, d: string) => (argv.includes(n) ? argv[argv.indexOf(n) + 1] : d);
const basis = opt('--basis', 'bench/tmp/datasets/large/large-1GiB.bin');
const target = opt('--target', 'bench/tmp/datasets/large/large-1GiB.mod30pct.bin');
const pushes = Number(opt('--pushes', '2'));
const shaping = { mbps: Number(opt('--mbps', '1000')), rttMs: Number(opt('--rtt', '30')) };

const data = join(ROOT, 'bench/tmp/timeline');
rmSync(data, { recursive: true, force: true });
const logs: Record<string, unknown>[] = [];
const srv = await startDsync({ data, paperExact: false, cpu: '0', deflate: false, onLog: (e) => void (e.op === 'push' && logs.push(e)) });
const tp = await Toxiproxy.start();
const pool = statSync(target).size >= OFF_THREAD_MIN ? nodeHashPool() : null;
try {
  const port = await tp.proxy('timeline', srv.port, shaping);
  const push = async (file: string, url: string) => {
    const conn = new Conn((await openWs(url + '/sync')) as any);
    const fh = await open(file);
    const size = (await fh.stat()).size;
    const cpu0 = { client: process.cpuUsage(), server: cpuSeconds(srv.pid), proxy: cpuSeconds(tp.pid) };
    const t0 = performance.now();
    const at: Record<string, number> = {};
    const mark = (k: string) => (at[k] ??= Math.round(performance.now() - t0));
    try {
      const out = await pushSession(conn, fileSource(fh, size, pool), {
        name: 'f',
        params: DEFAULT_PARAMS,
        algo: 3,
        onChunked: (d) => void (d === size && mark('chunked')),
        sender: { onPhase: (p) => mark({ tokens: 'list end', delta: 'tokens end', result: 'delta sent' }[p]) },
      });
      mark('result');
      const c = process.cpuUsage(cpu0.client);
      return { out, at, cpu: { client: (c.user + c.system) / 1e6, server: cpuSeconds(srv.pid) - cpu0.server, toxiproxy: cpuSeconds(tp.pid) - cpu0.proxy } };
    } finally {
      await fh.close();
      conn.close(1000, 'done');
    }
  };
  const ms = (s: number) => `${Math.round(s * 1000)} ms`;
  await push(basis, srv.url);
  console.log(`${target} after ${basis}, ${shaping.mbps} Mbps / ${shaping.rttMs} ms RTT (toxiproxy), ${pool?.size ?? 0} hash worker(s)`);
  for (let i = 0; i < pushes; i++) {
    const { out, at, cpu } = await push(target, `ws://127.0.0.1:${port}`);
    const log = logs.find((e) => e.version === out.result.version)!;
    console.log(
      `push ${i + 1}: ${Object.entries(at).map(([k, v]) => `${k} ${v} ms`).join(' | ')}; CPU client ${ms(cpu.client)}, server ${ms(cpu.server)}, toxiproxy ${ms(cpu.toxiproxy)}; ` +
        `listed ${log.refineListed} B, refined ${out.refinedBytes} B, literal ${out.literalBytes} B`,
    );
    await push(basis, srv.url);
  }
} finally {
  await pool?.close();
  await tp.stop();
  await srv.stop();
  rmSync(data, { recursive: true, force: true });
}
