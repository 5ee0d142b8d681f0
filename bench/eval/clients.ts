/**
 * The client side of every approach (bench/approaches), split into `prepare` (the client's own
 * computation on the target before it connects: chunking, hashing) and `syncPrepared` (the
 * session over one WebSocket), so the benchmark can time both and the load harness can
 * precompute the first.
 * Dsync prepares nothing: it chunks and hashes inside the session, while its Delta Bytes go
 * out (unless the load harness precomputed its index). Reports use the
 * same fields as Dsync's SyncReport: time split into client / server / network, traffic per
 * protocol part before compression, and wire bytes (the socket's, after permessage-deflate).
 */
import WebSocket from 'ws';
import type { Source } from '../../shared/src/chunking/chunk-index.ts';
import type { Prepared, Report } from '../approaches/approach.ts';
import { approachOf } from '../approaches/index.ts';
import { withRoute } from '../../shared/src/transport/route.ts';

const r1 = (x: number) => Math.round(x * 10) / 10;
const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/** The client's computation on the target, before any network traffic. `hashes`: for dsync,
 *  chunk and hash now instead of during the session (load harness). */
export async function prepare(approach: string, source: Source, { hashes = false } = {}): Promise<Prepared> {
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const p: Prepared = { approach, source, size: source.size, prepMs: 0, prepCpuMs: 0 };
  await approachOf(approach).prepare(p, { hashes });
  p.prepMs = performance.now() - t0;
  p.prepCpuMs = cpuMs(process.cpuUsage(c0));
  return p;
}

export function openWs(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url, { maxPayload: 64 << 20 }); // permessage-deflate on (ws default)
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}
/**
 * One sync of a prepared target to `base` (ws://host:port; Dsync's path /sync is added, with
 * the file's routing hint, as the sync client sends it: shared/src/transport/route.ts).
 * `withPrep` adds the preparation to client and total time (benchmark), or leaves it out
 * (load harness, where it was done before the timed run). `warm`: the WebSocket is opened
 * before the sync starts, as a page holds its socket open (the paper's setting); its opening
 * is reported as `connectMs`, outside the sync's times. Cold, the opening is part of them.
 */
export async function syncPrepared(p: Prepared, base: string, name: string, withPrep = true, warm = false): Promise<Report> {
  const approach = approachOf(p.approach);
  const c0 = process.cpuUsage();
  const tc = performance.now();
  const ws = await openWs(approach.server === 'baselines' ? base : withRoute(base + '/sync', name));
  const connectMs = performance.now() - tc;
  const r: Report = { ...(await approach.session(p, ws, name)), connectMs };
  if (!warm) r.timeMs.total += connectMs;
  // Client time is the client process' CPU time (all its threads: zlib, GC), so that waiting
  // on a full socket buffer does not count as client work; it is the only work this process
  // does during a benchmark sync.
  r.timeMs.client = cpuMs(process.cpuUsage(c0));
  if (withPrep) {
    r.timeMs.client += p.prepCpuMs;
    r.timeMs.total += p.prepMs;
  }
  const t = r.timeMs;
  t.network = Math.max(0, t.total - t.client - t.server);
  for (const k of Object.keys(t) as (keyof typeof t)[]) t[k] = r1(t[k]);
  r.connectMs = r1(r.connectMs);
  return r;
}
