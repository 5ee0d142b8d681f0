// Longer-running fault and load trials (harness: shared by the tests, at small sizes, and by
// bench/hardening/run.ts, the reported runs): concurrent pushes into a server SIGKILLed at a
// random moment, restarted and checked (every version is one that was pushed, gc leaves nothing
// unreferenced); many idle and active connections held at once; downloading a version over HTTP.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { Repo } from '../server/src/store/repo.ts';
import { localBackend } from '../server/src/store/local.ts';
import { runGc, unreferenced } from '../server/src/store/gc.ts';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { Rng, applyEdits, fastRandomBytes } from './testdata.ts';
import { startChild } from './child.ts';
import { pushBytes } from './helpers.ts';
import type { Store } from '../server/src/store/store.ts';

export async function download(url: string, name: string, version?: number): Promise<Buffer> {
  const res = await fetch(`${url}/api/download?name=${encodeURIComponent(name)}${version ? `&version=${version}` : ''}`);
  assert.equal(res.status, 200);
  return Buffer.from(await res.arrayBuffer());
}

export const versionsOf = async (url: string, name: string) => {
  const res = await fetch(`${url}/api/versions?name=${encodeURIComponent(name)}`);
  return res.status === 404 ? [] : ((await res.json()) as { version: number }[]).map((v) => v.version);
};

/** Kill trials: concurrent pushes of several files, SIGKILL at a random moment, restart, check. */
export async function killTrials(trials: number, seed: number, log: (s: string) => void = () => {}) {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-kill-'));
  const r = new Rng(seed);
  const files = ['a.bin', 'dir/b.txt', 'c.dat'];
  // every content ever pushed per file; what each committed version must be one of
  const pushed = new Map<string, Buffer[]>(files.map((f) => [f, []]));
  const confirmed = new Map<string, Map<number, Buffer>>(files.map((f) => [f, new Map()]));
  let current = new Map<string, Uint8Array>(files.map((f, i) => [f, fastRandomBytes(100 + i, 1_000_000 + r.int(3_000_000))]));
  let s = await startChild(data);
  let kills = 0;
  try {
    for (let t = 0; t < trials; t++) {
      const next = new Map<string, Uint8Array>();
      for (const f of files) {
        const edited = applyEdits(current.get(f)!, r, { kind: (['cut', 'insert', 'inverse'] as const)[r.int(3)], total: [256, 16_384, 1 << 20][r.int(3)], maxFragment: 4096 });
        next.set(f, edited);
        pushed.get(f)!.push(Buffer.from(edited));
      }
      const killAt = r.int(400);
      const runs = files.map((f) =>
        pushBytes(s, f, next.get(f)!).then(
          (rep) => confirmed.get(f)!.set(rep.version, Buffer.from(next.get(f)!)),
          () => {},
        ),
      );
      await new Promise((res) => setTimeout(res, killAt));
      await s.kill();
      kills++;
      await Promise.all(runs);
      s = await startChild(data);
      // gc (with commits running in the restarted server) leaves only what versions reference
      const repo = new Repo(localBackend(data));
      await runGc(repo, { minAgeMs: 0, windowMs: 10, repackPercent: 20 });
      assert.deepEqual(await unreferenced(repo), [], 'gc collected what the killed uploads left');
      for (const f of files) {
        for (const v of await versionsOf(s.url, f)) {
          const bytes = await download(s.url, f, v);
          const want = confirmed.get(f)!.get(v);
          if (want) assert.ok(bytes.equals(want), `${f} v${v} differs from what was confirmed`);
          else assert.ok(pushed.get(f)!.some((p) => p.equals(bytes)), `${f} v${v} is not one of the pushed contents`);
        }
        // the next sync works
        const rep = await pushBytes(s, f, next.get(f)!);
        confirmed.get(f)!.set(rep.version, Buffer.from(next.get(f)!));
      }
      current = next;
      log(`trial ${t + 1}: killed after ${killAt} ms; versions ${JSON.stringify(Object.fromEntries(files.map((f) => [f, confirmed.get(f)!.size])))}`);
    }
    return kills;
  } finally {
    await s.kill();
    rmSync(data, { recursive: true, force: true });
  }
}

export async function holdConnections(idle: number, active: number, log: (s: string) => void = console.log) {
  const data = mkdtempSync(path.join(tmpdir(), 'dsync-load-'));
  // every socket comes from 127.0.0.1, and the idle ones never send a Hello
  const most = String(idle + active + 10);
  const s = await startChild(data, ['--max-sessions-per-user', most, '--max-sessions-per-address', most, '--hello-timeout-ms', '600000']);
  const sockets: WebSocket[] = [];
  try {
    const bases = Array.from({ length: active }, (_, i) => fastRandomBytes(1000 + i, 1_000_000));
    await Promise.all(bases.map((b, i) => pushBytes(s, `f${i}`, b)));
    const before = s.memory();
    for (let i = 0; i < idle; i += 100) {
      await Promise.all(
        Array.from({ length: Math.min(100, idle - i) }, () =>
          new Promise<void>((resolve, reject) => {
            const ws = new WebSocket(s.wsUrl);
            ws.on('open', () => resolve());
            ws.on('error', reject);
            sockets.push(ws);
          }),
        ),
      );
    }
    const held = s.memory();
    const r = new Rng(1);
    const t0 = performance.now();
    const reports = await Promise.all(bases.map((b, i) => pushBytes(s, `f${i}`, applyEdits(b, r, { kind: 'insert', total: 16_384 }))));
    const ms = performance.now() - t0;
    const after = s.memory();
    const metrics = (await (await fetch(`${s.url}/api/metrics`)).json()) as { connections: number };
    const open = sockets.filter((w) => w.readyState === WebSocket.OPEN).length;
    const mib = (b: number) => (b / 2 ** 20).toFixed(0);
    log(`${open} idle sockets held open; ${reports.length} concurrent syncs in ${ms.toFixed(0)} ms; server RSS ${mib(before.rss)} MiB before, ${mib(held.rss)} MiB holding the sockets, ${mib(after.rss)} MiB after the syncs, peak ${mib(after.peak)} MiB`);
    return { open, reports, metrics, after };
  } finally {
    for (const w of sockets) w.terminate();
    await s.kill();
    rmSync(data, { recursive: true, force: true });
  }
}


/** The segment bytes the kept versions of `names` reference, each segment's ranges merged (a
 *  repacked store holds at most its dead share more), and how many segments hold them. */
export async function referencedBytes(store: Store, names: string[]): Promise<{ bytes: number; segments: number }> {
  const ranges = new Map<string, [number, number][]>();
  for (const f of names) {
    for (const v of await store.versionNumbers(f)) {
      const { layout } = await store.readVersion(f, v);
      for (const e of layout.extents) {
        const id = layout.segments[e.seg];
        if (!ranges.has(id)) ranges.set(id, []);
        ranges.get(id)!.push([e.offset, e.offset + e.length]);
      }
    }
  }
  let bytes = 0;
  for (const rs of ranges.values()) {
    let end = 0;
    for (const [a, z] of rs.sort((x, y) => x[0] - y[0])) if (z > end) (bytes += z - Math.max(a, end)), (end = z);
  }
  return { bytes, segments: ranges.size };
}
