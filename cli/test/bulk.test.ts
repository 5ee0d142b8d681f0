// Small files in bulk (docs/sync.md "Small files in bulk"): a first `dsync sync` of 1 000 small
// files through a real server over a real local-directory store goes up in a handful of bulk
// requests and group commits (requests counted at the server, journal marks at the store), and
// comes down on a second device in a handful of bulk reads, opening no WebSocket either way;
// both folders end byte-exact with the files' mtimes. A racing edit of one file on the other
// device is a conflict for that file only: both contents stay, the rest of the batch commits.
// And a bulk read writes a few files at once while its answer streams on (their fsyncs overlap).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'node:test';
import { loadConfig } from '../../server/src/config.ts';
import { startServer } from '../../server/src/server.ts';
import type { Backend } from '../../server/src/store/backend.ts';
import { JOURNAL_PREFIX } from '../../server/src/store/journal.ts';
import { localBackend } from '../../server/src/store/local.ts';
import { Repo } from '../../server/src/store/repo.ts';
import WebSocket from 'ws';
import { pushBytes, testServer } from '../../harness/helpers.ts';
import { BULK_WRITES } from '../../shared/src/base/limits.ts';
import { isConflictName } from '../../shared/src/sync/conflict.ts';
import { ApiFolder } from '../../shared/src/sync/remote.ts';
import { wasm_memory } from '../../shared/src/chunking/wasm.ts';
import { dsync, filesOf } from './run.ts';

const FILES = 1000;

/** The real local backend, counting journal marks written. */
function counting(inner: Backend) {
  const counts = { marks: 0 };
  const b: Backend = Object.create(inner);
  b.putIfAbsent = async (key, body, stamped) => {
    const made = await inner.putIfAbsent(key, body, stamped);
    if (made && key.startsWith(JOURNAL_PREFIX)) counts.marks++;
    return made;
  };
  return { backend: b, counts };
}

test('a first sync of 1 000 small files is a handful of bulk requests and commits, both ways, and a racing edit is that file\'s conflict only', async () => {
  const root = mkdtempSync(path.join(tmpdir(), 'dsync-bulk-sync-'));
  const data = path.join(root, 'store');
  const { backend, counts } = counting(localBackend(data));
  const requests: string[] = [];
  let upgrades = 0;
  const s = await startServer(loadConfig({ port: '0', host: '127.0.0.1', store: data, 'max-load': '0' }, {}), () => {}, new Repo(backend), (server: http.Server) => {
    server.prependListener('request', (req: http.IncomingMessage) => requests.push(`${req.method} ${req.url?.split('?')[0]}`));
    server.prependListener('upgrade', () => upgrades++);
    return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok((server.address() as AddressInfo).port)));
  });
  const count = (what: string) => requests.filter((r) => r === what).length;
  try {
    const a = path.join(root, 'a');
    const b = path.join(root, 'b');
    mkdirSync(b);
    const want = new Map<string, Buffer>();
    const mtimes = new Map<string, number>();
    let seed = 45;
    const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (let i = 0; i < FILES; i++) {
      const name = `d${i % 5}/f${String(i).padStart(4, '0')}.bin`;
      const bytes = Buffer.alloc(1024 + Math.floor(rnd() * 12_000));
      for (let k = 0; k < bytes.length; k++) bytes[k] = (rnd() * 256) | 0;
      mkdirSync(path.join(a, path.dirname(name)), { recursive: true });
      writeFileSync(path.join(a, name), bytes);
      // whole seconds in the past: every file system keeps them exactly
      const t = 1_600_000_000 + i * 61;
      utimesSync(path.join(a, name), t, t);
      want.set(name, bytes);
      mtimes.set(name, t * 1000);
    }
    const envA = { DSYNC_CACHE_DIR: path.join(root, 'cache-a') };
    const envB = { DSYNC_CACHE_DIR: path.join(root, 'cache-b') };
    const sync = (dir: string, env: Record<string, string>) => dsync(['sync', dir, '-s', s.url, '--remote', 'proj', '--json'], { env });

    // device A: up in bulk
    let r = await sync(a, envA);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const up = { bulk: count('POST /api/files/bulk'), marks: counts.marks, upgrades };
    console.log(`up: ${up.bulk} bulk requests, ${up.marks} journal marks, ${up.upgrades} WebSocket upgrades, ${requests.length} requests in all`);
    assert.ok(up.bulk >= 1 && up.bulk <= 5, `${up.bulk} bulk requests`);
    assert.ok(up.marks <= 6, `${up.marks} journal marks`);
    assert.equal(up.upgrades, 0, 'no file went through a delta session');
    const store = await s.storeOf('local');
    for (const [name, bytes] of want) {
      assert.ok((await store.bytes(`proj/${name}`, 1)).equals(bytes), name);
      assert.equal((await store.versions(`proj/${name}`))[0].modified, mtimes.get(name), name);
    }

    // device B: down in bulk, byte-exact, with the mtimes
    requests.length = 0;
    r = await sync(b, envB);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const down = count('POST /api/files/bulk-read');
    console.log(`down: ${down} bulk reads, ${upgrades} WebSocket upgrades, ${requests.length} requests in all`);
    assert.ok(down >= 1 && down <= 5, `${down} bulk reads`);
    assert.equal(upgrades, 0);
    const got = filesOf(b);
    assert.equal(got.size, FILES);
    for (const [name, bytes] of want) {
      assert.ok(got.get(name)?.equals(bytes), name);
      assert.equal(Math.floor(statSync(path.join(b, name)).mtimeMs), mtimes.get(name), name);
    }

    // a racing edit: B changes f0001 and syncs first; A changes f0001 and f0002, then syncs
    const raced = 'd1/f0001.bin';
    const other = 'd2/f0002.bin';
    const fromB = Buffer.from('B edited this file\n');
    const fromA = Buffer.from('A edited this file too\n');
    const otherA = Buffer.from('A edited another file\n');
    writeFileSync(path.join(b, raced), fromB);
    r = await sync(b, envB);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    writeFileSync(path.join(a, raced), fromA);
    writeFileSync(path.join(a, other), otherA);
    r = await sync(a, envA);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    // A: the name holds B's version, A's bytes sit beside it under a conflict name; the other
    // edit went up as any edit
    const onA = filesOf(a);
    const copies = [...onA.keys()].filter(isConflictName);
    assert.equal(copies.length, 1, copies.join(', '));
    assert.ok(onA.get(copies[0])!.equals(fromA));
    assert.ok(onA.get(raced)!.equals(fromB));
    assert.ok(onA.get(other)!.equals(otherA));
    assert.equal(onA.size, FILES + 1);
    // the server: every content, none lost
    assert.ok((await store.bytes(`proj/${raced}`, 2)).equals(fromB));
    assert.ok((await store.bytes(`proj/${raced}`, 1)).equals(want.get(raced)!));
    assert.ok((await store.bytes(`proj/${copies[0]}`, 1)).equals(fromA));
    assert.ok((await store.bytes(`proj/${other}`, 2)).equals(otherA));
    // and B gets both
    r = await sync(b, envB);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.deepEqual([...filesOf(b)].sort(), [...filesOf(a)].sort());
  } finally {
    await s.close();
    rmSync(root, { recursive: true, force: true });
  }
});

/** The real client's bulk transfers (ApiFolder.fetchMany and sendMany) against the real server,
 *  for the server folder `proj`. */
function bulkClient(s: { url: string; wsUrl: string }) {
  class Bulk extends ApiFolder {
    push(): never {
      throw new Error('not here');
    }
    pull(): never {
      throw new Error('not here');
    }
    read<T>(list: { path: string; version: number }[], write: (k: number, bytes: Uint8Array) => Promise<T>) {
      return this.fetchMany(list, write);
    }
    write(files: { path: string; bytes: Uint8Array }[]) {
      return this.sendMany(files.map((f) => ({ ...f, expect: 'absent' as const })));
    }
  }
  return new Bulk({
    call: () => Promise.reject(new Error('not here')),
    statusOf: () => undefined,
    folder: 'proj',
    url: s.wsUrl,
    WebSocket: WebSocket as never,
    send: async (p, body, type) => {
      const res = await fetch(s.url + p, { method: 'POST', body: new Blob(body as BlobPart[]), headers: { 'content-type': type } });
      if (!res.ok) throw new Error(`${p}: HTTP ${res.status}`);
      return res;
    },
  });
}

test('a bulk read writes its files a few at once while the answer streams on, not each after the one before', { timeout: 300_000 }, async () => {
  const s = await testServer({ 'max-load': '0' });
  try {
    const files = Array.from({ length: 16 }, (_, i) => ({ path: `f${i}.txt`, bytes: Buffer.from(`file ${i}\n`.repeat(50 + i)) }));
    for (const f of files) await pushBytes(s, `proj/${f.path}`, f.bytes);
    const reader = bulkClient(s);
    // the first file's write waits until another one starts (or, if none does, a while): a
    // reader that writes each file after the one before never has two open
    let open = 0;
    let most = 0;
    let second: () => void = () => {};
    const another = new Promise<void>((ok) => (second = ok));
    const got = await reader.read(files.map((f) => ({ path: f.path, version: 1 })), async (k, bytes) => {
      open++;
      most = Math.max(most, open);
      if (open > 1) second();
      if (k === 0) await Promise.race([another, new Promise((ok) => setTimeout(ok, 20_000))]);
      open--;
      return { bytes: Buffer.from(bytes) };
    });
    assert.ok(most > 1, `files written at once: ${most}`);
    assert.ok(most <= BULK_WRITES, `files written at once: ${most}, at most ${BULK_WRITES}`);
    got.forEach((g, k) => {
      assert.ok('ok' in g, JSON.stringify(g));
      assert.deepEqual(g.ok.bytes, files[k].bytes, `file ${k} in its place`);
    });
    reader.close();
  } finally {
    await s.stop();
  }
});

test("a bulk upload's roots are chunked one file after another: 256 files of 200 KiB leave the wasm memory small", { timeout: 300_000 }, async () => {
  const s = await testServer({ 'max-load': '0' });
  try {
    const writer = bulkClient(s);
    const files = Array.from({ length: 256 }, (_, i) => ({ path: `f${i}.bin`, bytes: Buffer.alloc(200 << 10, i) }));
    const memory = wasm_memory() as WebAssembly.Memory;
    const before = memory.buffer.byteLength;
    const got = await writer.write(files);
    got.forEach((g, k) => assert.ok('ok' in g && g.ok.version === 1, `file ${k}: ${JSON.stringify(g)}`));
    // chunked at once, the 256 files would stage tens of MiB in wasm memory, which never shrinks
    const grown = memory.buffer.byteLength - before;
    assert.ok(grown < 8 << 20, `the wasm memory grew by ${(grown / 2 ** 20).toFixed(1)} MiB`);
    writer.close();
  } finally {
    await s.stop();
  }
});
